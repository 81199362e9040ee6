package controller

import (
	"context"
	"fmt"
	"math"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// assignVSOCKCID gives a VMI with autoattachVSOCK its vsock context ID,
// unique in the cluster as KubeVirt's virt-controller makes it (host-side
// software tells guests apart by it), before its launcher pod is rendered:
// the launcher gives the guest that CID. The VMIs are listed from the API
// server, not the cache, which may not show the CID this controller's
// previous reconcile just assigned (reconciles of VMIs run one at a time).
func (r *VMIReconciler) assignVSOCKCID(ctx context.Context, vmi *v1.VirtualMachineInstance) *syncError {
	if vmi.Spec.Domain.Devices.AutoattachVSOCK == nil || !*vmi.Spec.Domain.Devices.AutoattachVSOCK || vmi.Status.VSOCKCID != nil {
		return nil
	}
	list := &v1.VirtualMachineInstanceList{}
	if err := r.APIReader.List(ctx, list); err != nil {
		return &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("listing VMIs for a free vsock CID: %w", err), retry: true}
	}
	used := map[uint32]bool{}
	for i := range list.Items {
		if c := list.Items[i].Status.VSOCKCID; c != nil {
			used[*c] = true
		}
	}
	cid, err := freeCID(used)
	if err != nil {
		return &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	orig := vmi.DeepCopy()
	vmi.Status.VSOCKCID = &cid
	if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("setting the vsock CID of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err), retry: true}
	}
	return nil
}

// freeCID is the lowest guest CID (from vmispec.GuestCID) not in used;
// 0xffffffff is VMADDR_CID_ANY.
func freeCID(used map[uint32]bool) (uint32, error) {
	for c := uint32(vmispec.GuestCID); c < math.MaxUint32; c++ {
		if !used[c] {
			return c, nil
		}
	}
	return 0, fmt.Errorf("no vsock CID is free")
}
