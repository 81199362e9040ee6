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

// The resources a clone's authorized source may be: a PVC, or a
// DataSource, which stands for the claims of its own namespace.
const (
	ResourcePVC        = "persistentvolumeclaims"
	ResourceDataSource = "datasources"
)

// Source is what a clone was authorized to read (what its clone token
// names): PVC Namespace/Name, or DataSource Namespace/Name and through
// it the claims of Namespace.
type Source struct{ Resource, Namespace, Name string }

func (s Source) String() string { return s.Resource + " " + s.Namespace + "/" + s.Name }

// Check decides whether u may create, in namespace ns, a DataVolume of
// spec (at path p). It returns the source authorized, zero when spec
// clones nothing:
//   - source.pvc: that claim, when it is in ns or u may create
//     datavolumes/source in its namespace;
//   - sourceRef to a DataSource that names a claim: that claim, as for
//     source.pvc (upstream's rule);
//   - sourceRef to a DataSource missing or naming no claim yet (a golden
//     image still importing): the DataSource, when it is in ns or u may
//     create datavolumes/source in its namespace; the controller waits
//     for it.
//
// A DataSource may be changed after admission: the controllers clone only
// what the token names, a DataSource standing for the claims of its own
// namespace (token.Payload.GrantsClone), so the namespace read is always
// one authorized here.
//
// Otherwise a Forbidden error naming p's source.pvc or sourceRef.
func Check(ctx context.Context, c client.Client, p *field.Path, ns string, spec *cdiv1.DataVolumeSpec, u frontproxy.User) (Source, *field.Error, error) {
	var src Source
	var fp *field.Path
	switch {
	case spec.Source != nil && spec.Source.PVC != nil:
		src = Source{Resource: ResourcePVC, Namespace: spec.Source.PVC.Namespace, Name: spec.Source.PVC.Name}
		fp = p.Child("source", "pvc")
	case spec.SourceRef != nil: // kind DataSource, the CRD's only one
		key := client.ObjectKey{Namespace: ptr.Deref(spec.SourceRef.Namespace, ns), Name: spec.SourceRef.Name}
		src, fp = Source{Resource: ResourceDataSource, Namespace: key.Namespace, Name: key.Name}, p.Child("sourceRef")
		ds := &cdiv1.DataSource{}
		switch err := c.Get(ctx, key, ds); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return Source{}, nil, fmt.Errorf("reading DataSource %s: %w", key, err)
		case ds.Spec.Source.PVC != nil:
			src = Source{Resource: ResourcePVC, Namespace: ds.Spec.Source.PVC.Namespace, Name: ds.Spec.Source.PVC.Name}
			if src.Namespace == "" {
				src.Namespace = ds.Namespace
			}
		}
	default:
		return Source{}, nil, nil
	}
	if src.Namespace == "" {
		src.Namespace = ns
	}
	if src.Namespace == ns {
		return src, nil, nil
	}
	allowed, err := frontproxy.Authorize(ctx, c, u, authzv1.ResourceAttributes{Namespace: src.Namespace, Verb: "create",
		Group: cdiv1.GroupName, Version: cdiv1.GroupVersion.Version, Resource: "datavolumes", Subresource: SourceSubresource})
	if err != nil {
		return Source{}, nil, fmt.Errorf("authorizing the clone of %s: %w", src, err)
	}
	if allowed {
		return src, nil, nil
	}
	what := "PVC " + src.Namespace + "/" + src.Name
	if src.Resource == ResourceDataSource {
		what = "DataSource " + src.Namespace + "/" + src.Name
	}
	return Source{}, field.Forbidden(fp, fmt.Sprintf("user %q may not clone %s: cloning from another namespace needs create on datavolumes/source (%s) in namespace %s",
		u.Name, what, cdiv1.GroupName, src.Namespace)), nil
}
