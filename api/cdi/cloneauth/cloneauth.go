// Package cloneauth is CDI's clone authorization, shared by cdi-apiserver's
// DataVolume webhook and virt-api's VM admission (as upstream CDI's
// datavolume-validate webhook and KubeVirt's VM admitter share
// authorizeDataVolumeClone): a DataVolume that clones a claim in another
// namespace is admitted only when its creator may create
// datavolumes/source (cdi.kubevirt.io) in that namespace. Without it any
// DataVolume author could read any claim through the clone source pod,
// which runs in the source namespace.
package cloneauth

import (
	"context"
	"fmt"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
)

// SourceSubresource is what a cloner must be allowed to create in the
// source namespace: datavolumes/source.
const SourceSubresource = "source"

// User is an admission request's user as a SubjectAccessReview asks of it.
func User(u authnv1.UserInfo) frontproxy.User {
	out := frontproxy.User{Name: u.Username, Groups: u.Groups}
	if len(u.Extra) > 0 {
		out.Extra = make(map[string]authzv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			out.Extra[k] = authzv1.ExtraValue(v)
		}
	}
	return out
}

// Check decides whether u may create, in namespace ns, a DataVolume of
// spec (at path p): nil when it clones nothing, clones in ns, names a
// DataSource that is missing or names no claim (the controller waits for
// it), or u may create datavolumes/source in the source's namespace;
// otherwise a Forbidden error naming p's source.pvc or sourceRef.
func Check(ctx context.Context, c client.Client, p *field.Path, ns string, spec *cdiv1.DataVolumeSpec, u frontproxy.User) (*field.Error, error) {
	var src cdiv1.DataVolumeSourcePVC
	var fp *field.Path
	switch {
	case spec.Source != nil && spec.Source.PVC != nil:
		src, fp = *spec.Source.PVC, p.Child("source", "pvc")
		if src.Namespace == "" {
			src.Namespace = ns
		}
	case spec.SourceRef != nil: // kind DataSource, the CRD's only one
		key := client.ObjectKey{Namespace: ptr.Deref(spec.SourceRef.Namespace, ns), Name: spec.SourceRef.Name}
		ds := &cdiv1.DataSource{}
		switch err := c.Get(ctx, key, ds); {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("reading DataSource %s: %w", key, err)
		}
		if ds.Spec.Source.PVC == nil {
			return nil, nil
		}
		src, fp = *ds.Spec.Source.PVC, p.Child("sourceRef")
		if src.Namespace == "" {
			src.Namespace = ds.Namespace
		}
	default:
		return nil, nil
	}
	if src.Namespace == ns {
		return nil, nil
	}
	allowed, err := frontproxy.Authorize(ctx, c, u, authzv1.ResourceAttributes{Namespace: src.Namespace, Verb: "create",
		Group: cdiv1.GroupName, Version: cdiv1.GroupVersion.Version, Resource: "datavolumes", Subresource: SourceSubresource})
	if err != nil {
		return nil, fmt.Errorf("authorizing the clone of PVC %s/%s: %w", src.Namespace, src.Name, err)
	}
	if allowed {
		return nil, nil
	}
	return field.Forbidden(fp, fmt.Sprintf("user %q may not clone PVC %s/%s: cloning from another namespace needs create on datavolumes/source (%s) in namespace %s",
		u.Name, src.Namespace, src.Name, cdiv1.GroupName, src.Namespace)), nil
}
