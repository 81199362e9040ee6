package hostpath

import (
	"context"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Annotations of the claim and volume lifecycle (k8s.io/api's volume
// binding and the external provisioner's).
const (
	// AnnSelectedNode is set on a WaitForFirstConsumer claim by the
	// scheduler: the node its first pod goes to.
	AnnSelectedNode = "volume.kubernetes.io/selected-node"
	// AnnStorageProvisioner is set on a claim by the PV controller when it
	// leaves the claim to an external provisioner.
	AnnStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	// AnnProvisionedBy marks the volumes a provisioner made.
	AnnProvisionedBy = "pv.kubernetes.io/provisioned-by"
)

// Provisioner does for this node what the upstream external-provisioner
// sidecar does for a CSI driver: it turns the claims of the driver's
// StorageClasses into volumes, and deletes released volumes. One runs
// per node, with the node's driver, as in HPP.
//
// Claims (level-triggered; each pass reads the claim, its class and its
// volume):
//
//	bound, or not of a class of this driver  -> nothing
//	  (or its class not yet seen: the class's
//	  own event brings the claim back)
//	the class's pool is not on this node     -> a ProvisioningFailed event
//	                                            naming it (no node has it)
//	no selected node, or another node's      -> nothing (the scheduler, or
//	  or no storage-provisioner annotation       the PV controller, acts first)
//	volume pvc-<claim UID> exists            -> nothing (the PV controller binds)
//	otherwise                                -> CreateVolume, then create the
//	                                            PV pre-bound to the claim
//
// Bound claims (status Bound: the PV controller has set their capacity) of
// this node's volumes asking for more than the volume has
// (the external-resizer's job; the class allows expansion, or the API
// server refuses the request):
//
//	PV capacity < request -> claim status: allocated = request,
//	                         ControllerResizeInProgress; ControllerExpandVolume;
//	                         PV capacity = what the driver gives
//	claim capacity < PV's, or the claim still marked
//	ControllerResizeInProgress
//	                      -> claim status: capacity = PV's, resize
//	                         statuses and conditions cleared (no node
//	                         expansion: the controller is on the node)
//
// Volumes: one this node's driver made, Released, with reclaim policy
// Delete -> DeleteVolume, then delete the PV.
type Provisioner struct {
	Client   client.Client
	Driver   *Driver
	Recorder events.EventRecorder
	// Capacity, when set, is told of each volume created or deleted.
	Capacity *Capacity
}

// SetupWithManager registers the claim and the volume reconcilers.
func (p *Provisioner) SetupWithManager(mgr ctrl.Manager) error {
	// A claim and its class are often created together (one manifest):
	// the claim's event may come before the cache has the class, so a
	// class's event brings back the unbound claims naming it.
	if err := ctrl.NewControllerManagedBy(mgr).Named("hostpath-claim").For(&corev1.PersistentVolumeClaim{}).
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(p.claimsOfClass)).
		Complete(ctrlFunc(p.reconcileClaim)); err != nil {
		return fmt.Errorf("setting up the claim controller: %w", err)
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("hostpath-volume").For(&corev1.PersistentVolume{}).
		Complete(ctrlFunc(p.reconcileVolume)); err != nil {
		return fmt.Errorf("setting up the volume controller: %w", err)
	}
	return nil
}

// claimsOfClass is the unbound claims naming class sc.
func (p *Provisioner) claimsOfClass(ctx context.Context, sc client.Object) []reconcile.Request {
	var pvcs corev1.PersistentVolumeClaimList
	if err := p.Client.List(ctx, &pvcs); err != nil {
		logf.FromContext(ctx).Error(err, "listing the claims of a storage class", "class", sc.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for _, pvc := range pvcs.Items {
		if pvc.Spec.VolumeName == "" && pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName == sc.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&pvc)})
		}
	}
	return reqs
}

type ctrlFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f ctrlFunc) Reconcile(ctx context.Context, r ctrl.Request) (ctrl.Result, error) {
	return f(ctx, r)
}

// VolumeName is the PV (and the volume ID) of a claim, as the upstream
// provisioner names it.
func VolumeName(pvc *corev1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

func (p *Provisioner) reconcileClaim(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pvc corev1.PersistentVolumeClaim
	if err := p.Client.Get(ctx, req.NamespacedName, &pvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pvc.Spec.VolumeName != "" && pvc.Status.Phase == corev1.ClaimBound && pvc.DeletionTimestamp == nil {
		return ctrl.Result{}, p.resize(ctx, &pvc)
	}
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Spec.StorageClassName == nil {
		return ctrl.Result{}, nil
	}
	node := pvc.Annotations[AnnSelectedNode]
	if node != "" && (pvc.Annotations[AnnStorageProvisioner] != DriverName || node != p.Driver.NodeID) {
		return ctrl.Result{}, nil
	}
	var sc storagev1.StorageClass
	if err := p.Client.Get(ctx, client.ObjectKey{Name: *pvc.Spec.StorageClassName}, &sc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sc.Provisioner != DriverName || p.missingPoolEvent(&pvc, &sc) || node == "" {
		return ctrl.Result{}, nil
	}
	name := VolumeName(&pvc)
	var pv corev1.PersistentVolume
	if err := p.Client.Get(ctx, client.ObjectKey{Name: name}, &pv); err == nil || !apierrors.IsNotFound(err) {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pv, err := p.provision(ctx, &pvc, &sc)
	if err != nil {
		p.Recorder.Eventf(&pvc, nil, corev1.EventTypeWarning, "ProvisioningFailed", "Provision", "Failed to provision volume %s: %v", name, err)
		if status.Code(err) == codes.InvalidArgument {
			return ctrl.Result{}, nil // the claim must change first
		}
		return ctrl.Result{}, err
	}
	if err := p.Client.Create(ctx, &pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return ctrl.Result{}, fmt.Errorf("creating volume %s: %w", name, err)
	}
	logf.FromContext(ctx).Info("provisioned", "volume", name, "node", p.Driver.NodeID)
	p.Capacity.Trigger()
	p.Recorder.Eventf(&pvc, nil, corev1.EventTypeNormal, "ProvisioningSucceeded", "Provision", "Successfully provisioned volume %s", name)
	return ctrl.Result{}, nil
}

// provision creates the claim's volume with the driver and returns its PV.
func (p *Provisioner) provision(ctx context.Context, pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass) (corev1.PersistentVolume, error) {
	mode := corev1.PersistentVolumeFilesystem
	if pvc.Spec.VolumeMode != nil {
		mode = *pvc.Spec.VolumeMode
	}
	// The widest mode asked for; the multi-node ones only from a class
	// whose volumes are shared on their node (SharedOnNodeParameter).
	access := &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}
	shared := sharedOnNode(sc.Parameters)
	for _, m := range pvc.Spec.AccessModes {
		switch {
		case m == corev1.ReadWriteOnce:
		case m == corev1.ReadWriteOncePod:
			access.Mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		case m == corev1.ReadWriteMany && shared:
			access.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		case m == corev1.ReadOnlyMany && shared:
			if access.Mode != csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER {
				access.Mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
			}
		default:
			return corev1.PersistentVolume{}, status.Errorf(codes.InvalidArgument, "access mode %s: hostpath volumes are on one node (a class with %s: \"true\" shares them among its pods)", m, SharedOnNodeParameter)
		}
	}
	vc := &csi.VolumeCapability{AccessMode: access, AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	if mode == corev1.PersistentVolumeBlock {
		vc.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	}
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	node := map[string]string{TopologyKey: p.Driver.NodeID}
	resp, err := p.Driver.CreateVolume(ctx, &csi.CreateVolumeRequest{
		Name:                      VolumeName(pvc),
		CapacityRange:             &csi.CapacityRange{RequiredBytes: size.Value()},
		VolumeCapabilities:        []*csi.VolumeCapability{vc},
		Parameters:                sc.Parameters,
		AccessibilityRequirements: &csi.TopologyRequirement{Requisite: []*csi.Topology{{Segments: node}}, Preferred: []*csi.Topology{{Segments: node}}},
	})
	if err != nil {
		return corev1.PersistentVolume{}, err
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if sc.ReclaimPolicy != nil {
		reclaim = *sc.ReclaimPolicy
	}
	capacity := size
	if resp.GetVolume().GetCapacityBytes() > 0 {
		capacity = *resourceBytes(resp.GetVolume().GetCapacityBytes())
	}
	return corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: VolumeName(pvc), Annotations: map[string]string{AnnProvisionedBy: DriverName}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: capacity},
			AccessModes:                   pvc.Spec.AccessModes,
			VolumeMode:                    &mode,
			StorageClassName:              sc.Name,
			PersistentVolumeReclaimPolicy: reclaim,
			MountOptions:                  sc.MountOptions,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID, ResourceVersion: pvc.ResourceVersion},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: DriverName, VolumeHandle: resp.GetVolume().GetVolumeId(), VolumeAttributes: resp.GetVolume().GetVolumeContext()}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: TopologyKey, Operator: corev1.NodeSelectorOpIn, Values: []string{p.Driver.NodeID}}}}}}},
		},
	}, nil
}

// volumeNode is the node a volume of this driver is on.
func volumeNode(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, t := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if e.Key == TopologyKey && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

func (p *Provisioner) reconcileVolume(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var pv corev1.PersistentVolume
	if err := p.Client.Get(ctx, req.NamespacedName, &pv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pv.Annotations[AnnProvisionedBy] != DriverName || pv.Spec.CSI == nil || pv.Spec.CSI.Driver != DriverName ||
		volumeNode(&pv) != p.Driver.NodeID || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	if _, err := p.Driver.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: pv.Spec.CSI.VolumeHandle}); err != nil {
		p.Recorder.Eventf(&pv, nil, corev1.EventTypeWarning, "VolumeFailedDelete", "Delete", "Failed to delete volume: %v", err)
		return ctrl.Result{}, fmt.Errorf("deleting volume %s: %w", pv.Name, err)
	}
	// Only the version read: a PV bound again meanwhile is not deleted.
	if err := p.Client.Delete(ctx, &pv, client.Preconditions{UID: &pv.UID, ResourceVersion: &pv.ResourceVersion}); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	logf.FromContext(ctx).Info("deleted", "volume", pv.Name)
	p.Capacity.Trigger()
	return ctrl.Result{}, nil
}

func resourceBytes(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.BinarySI) }

// resize expands the bound claim's volume when the claim asks for more
// (see Provisioner).
func (p *Provisioner) resize(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	var pv corev1.PersistentVolume
	if err := p.Client.Get(ctx, client.ObjectKey{Name: pvc.Spec.VolumeName}, &pv); err != nil {
		return client.IgnoreNotFound(err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != DriverName || volumeNode(&pv) != p.Driver.NodeID ||
		pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.UID != pvc.UID {
		return nil
	}
	want := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	if have.Cmp(want) < 0 {
		patch := client.MergeFrom(pvc.DeepCopy())
		pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
		pvc.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
			corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInProgress}
		if err := p.Client.Status().Patch(ctx, pvc, patch); err != nil {
			return fmt.Errorf("claim %s/%s: marking the resize: %w", pvc.Namespace, pvc.Name, err)
		}
		resp, err := p.Driver.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: pv.Spec.CSI.VolumeHandle,
			CapacityRange: &csi.CapacityRange{RequiredBytes: want.Value()}})
		if err != nil {
			p.Recorder.Eventf(pvc, nil, corev1.EventTypeWarning, "VolumeResizeFailed", "Resize", "Failed to expand volume %s: %v", pv.Name, err)
			return fmt.Errorf("expanding volume %s: %w", pv.Name, err)
		}
		pvPatch := client.MergeFrom(pv.DeepCopy())
		pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: *resourceBytes(resp.GetCapacityBytes())}
		if err := p.Client.Patch(ctx, &pv, pvPatch); err != nil {
			return fmt.Errorf("volume %s: recording its capacity: %w", pv.Name, err)
		}
		p.Recorder.Eventf(pvc, nil, corev1.EventTypeNormal, "VolumeResizeSuccessful", "Resize", "Expanded volume %s to %s", pv.Name, want.String())
	}
	// Done when the claim has the volume's capacity and is not marked
	// resizing. A pass that read a stale claim and PV from the cache may
	// have marked it again after the pass before had finished: its mark is
	// cleared here, or it would stay for good.
	got := pvc.Status.Capacity[corev1.ResourceStorage]
	capacity := pv.Spec.Capacity[corev1.ResourceStorage]
	resizing := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage] == corev1.PersistentVolumeClaimControllerResizeInProgress
	if got.Cmp(capacity) >= 0 && !resizing {
		return nil
	}
	patch := client.MergeFrom(pvc.DeepCopy())
	pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: capacity}
	pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: capacity}
	delete(pvc.Status.AllocatedResourceStatuses, corev1.ResourceStorage)
	conds := pvc.Status.Conditions[:0]
	for _, c := range pvc.Status.Conditions {
		if c.Type != corev1.PersistentVolumeClaimResizing && c.Type != corev1.PersistentVolumeClaimFileSystemResizePending {
			conds = append(conds, c)
		}
	}
	pvc.Status.Conditions = conds
	if err := p.Client.Status().Patch(ctx, pvc, patch); err != nil {
		return fmt.Errorf("claim %s/%s: recording its capacity: %w", pvc.Namespace, pvc.Name, err)
	}
	return nil
}
