package datavolume

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
)

// The reasons a clone's DataVolume waits for (Pending, its conditions
// False with the reason, looked at again every waitInterval).
const (
	ReasonDataSourceNotFound = "DataSourceNotFound"
	ReasonDataSourceNotReady = "DataSourceNotReady"
	ReasonCloneSourceMissing = "CloneSourceNotFound"
)

// Waiting is why a DataVolume cannot have its claim yet.
type Waiting struct{ Reason, Message string }

// resolveSource is dv with its sourceRef replaced by the PVC source of
// the DataSource it names, once that is Ready (nil and why otherwise).
func (r *Reconciler) resolveSource(ctx context.Context, dv *cdiv1.DataVolume) (*cdiv1.DataVolume, *Waiting, error) {
	ref := dv.Spec.SourceRef
	if ref == nil {
		return dv, nil, nil
	}
	key := client.ObjectKey{Namespace: ptr.Deref(ref.Namespace, dv.Namespace), Name: ref.Name}
	ds := &cdiv1.DataSource{}
	switch err := r.Client.Get(ctx, key, ds); {
	case apierrors.IsNotFound(err):
		return nil, &Waiting{ReasonDataSourceNotFound, fmt.Sprintf("DataSource %s not found", key)}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading DataSource %s: %w", key, err)
	}
	c := cdiv1.FindDataSourceCondition(ds.Status.Conditions, cdiv1.DataSourceReady)
	if c == nil || c.Status != corev1.ConditionTrue || ds.Spec.Source.PVC == nil {
		return nil, &Waiting{ReasonDataSourceNotReady, fmt.Sprintf("DataSource %s is not ready", key)}, nil
	}
	out := dv.DeepCopy()
	out.Spec.SourceRef = nil
	pvc := *ds.Spec.Source.PVC
	if pvc.Namespace == "" {
		pvc.Namespace = ds.Namespace
	}
	out.Spec.Source = &cdiv1.DataVolumeSource{PVC: &pvc}
	return out, nil, nil
}

// ReasonCloneValidationFailed fails a DataVolume not authorized to clone
// its source (CDI's).
const ReasonCloneValidationFailed = "CloneValidationFailed"

// extendCloneToken is dv's extended clone token, made from the clone
// token cdi-apiserver issued to its creator (cdiv1.AnnCloneToken) while
// that is valid and names dv; ok is false when there is none to make
// (none issued, already extended, not valid, no key).
func (r *Reconciler) extendCloneToken(dv *cdiv1.DataVolume, now time.Time) (string, bool) {
	if _, done := dv.Annotations[cdiv1.AnnExtendedCloneToken]; done || r.Signer == nil {
		return "", false
	}
	p, err := r.cloneToken(dv, now)
	if err != nil {
		return "", false
	}
	p.Params[token.ParamTargetUID] = string(dv.UID)
	ext, err := r.Signer.Extend(p, now)
	if err != nil {
		return "", false
	}
	return ext, true
}

// cloneToken is what dv's clone token grants, or why it grants dv
// nothing.
func (r *Reconciler) cloneToken(dv *cdiv1.DataVolume, now time.Time) (token.Payload, error) {
	tok, ok := dv.Annotations[cdiv1.AnnCloneToken]
	switch {
	case !ok:
		return token.Payload{}, fmt.Errorf("no clone token (cdi-apiserver issues one to a creator who may create datavolumes/source in the source's namespace)")
	case r.Tokens == nil:
		return token.Payload{}, fmt.Errorf("cdi-controller has no token key to check its clone token")
	}
	p, err := r.Tokens.Verify(tok, now)
	if err != nil {
		return token.Payload{}, err
	}
	if p.Operation != token.OperationClone || p.Params[token.ParamTargetNamespace] != dv.Namespace || p.Params[token.ParamTargetName] != dv.Name {
		return token.Payload{}, fmt.Errorf("its clone token grants %s into %s/%s, not a clone into this DataVolume",
			p.Operation, p.Params[token.ParamTargetNamespace], p.Params[token.ParamTargetName])
	}
	return p, nil
}

// cloneAuthorized says why dv may not clone the claim src of another
// namespace ("" if it may): its extended clone token must grant src to
// dv (a DataSource's token, the claims of the DataSource's namespace: one
// changed after admission to name a claim elsewhere is refused).
func (r *Reconciler) cloneAuthorized(dv *cdiv1.DataVolume, src client.ObjectKey, now time.Time) string {
	why := func(msg string) string {
		return fmt.Sprintf("DataVolume %s/%s may not clone PVC %s: %s", dv.Namespace, dv.Name, src, msg)
	}
	ext, ok := dv.Annotations[cdiv1.AnnExtendedCloneToken]
	switch {
	case r.Tokens == nil:
		return why("cdi-controller has no token key to check its clone token")
	case !ok:
		if _, err := r.cloneToken(dv, now); err != nil {
			return why(err.Error())
		}
		return why("its clone token was not extended while valid: create the DataVolume again")
	}
	p, err := r.Tokens.VerifyExtended(ext, now)
	if err != nil {
		return why(err.Error())
	}
	if p.Params[token.ParamTargetUID] != string(dv.UID) {
		return why("the clone token was extended for another DataVolume")
	}
	if err := p.GrantsClone(src, dv.Namespace, dv.Name); err != nil {
		return why(err.Error())
	}
	return ""
}

// cloneSource reads a clone's source claim and gives dv its size when it
// asks for none (a copy; dv itself when it is no clone). A source in
// another namespace must be authorized by the DataVolume's clone token
// (cloneAuthorized).
func (r *Reconciler) cloneSource(ctx context.Context, dv *cdiv1.DataVolume) (*cdiv1.DataVolume, *corev1.PersistentVolumeClaim, *Waiting, error) {
	if dv.Spec.Source == nil || dv.Spec.Source.PVC == nil {
		return dv, nil, nil, nil
	}
	key := cloneKey(dv)
	src := &corev1.PersistentVolumeClaim{}
	switch err := r.Client.Get(ctx, key, src); {
	case apierrors.IsNotFound(err):
		return nil, nil, &Waiting{ReasonCloneSourceMissing, fmt.Sprintf("source PVC %s not found", key)}, nil
	case err != nil:
		return nil, nil, nil, fmt.Errorf("reading the source PVC %s: %w", key, err)
	}
	out := dv.DeepCopy()
	var req *corev1.ResourceList
	switch {
	case out.Spec.PVC != nil:
		req = &out.Spec.PVC.Resources.Requests
	case out.Spec.Storage != nil:
		req = &out.Spec.Storage.Resources.Requests
	}
	if req != nil {
		if _, set := (*req)[corev1.ResourceStorage]; !set {
			if *req == nil {
				*req = corev1.ResourceList{}
			}
			(*req)[corev1.ResourceStorage] = sourceSize(src)
		}
	}
	return out, src, nil, nil
}

// cloneKey is a clone's source claim, its namespace defaulting to the
// DataVolume's.
func cloneKey(dv *cdiv1.DataVolume) client.ObjectKey {
	p := dv.Spec.Source.PVC
	ns := p.Namespace
	if ns == "" {
		ns = dv.Namespace
	}
	return client.ObjectKey{Namespace: ns, Name: p.Name}
}

// sourceSize is a claim's size: its capacity once bound, else its
// request.
func sourceSize(pvc *corev1.PersistentVolumeClaim) resource.Quantity {
	if q, ok := pvc.Status.Capacity[corev1.ResourceStorage]; ok {
		return q
	}
	return pvc.Spec.Resources.Requests[corev1.ResourceStorage]
}

// sizeAsSource gives the claim pvc of a clone whose DataVolume asks for
// no size its source's size: Claim grew a `storage` request by the
// filesystem overhead, but a Filesystem source's size already holds its
// own. Only a Block source cloned to a Filesystem claim keeps the growth:
// its image needs the room the filesystem takes.
func sizeAsSource(pvc, src *corev1.PersistentVolumeClaim) {
	if filesystem(pvc) && !filesystem(src) {
		return
	}
	pvc.Spec.Resources.Requests[corev1.ResourceStorage] = sourceSize(src)
}

func filesystem(pvc *corev1.PersistentVolumeClaim) bool {
	return ptr.Deref(pvc.Spec.VolumeMode, corev1.PersistentVolumeFilesystem) == corev1.PersistentVolumeFilesystem
}

// tooSmall says why a clone's claim cannot hold its source ("" if it
// can).
func tooSmall(pvc, src *corev1.PersistentVolumeClaim) string {
	want, got := sourceSize(src), pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if got.Cmp(want) < 0 {
		return fmt.Sprintf("target PVC %s requests %s, less than the size of the source PVC %s/%s (%s)", pvc.Name, got.String(), src.Namespace, src.Name, want.String())
	}
	return ""
}
