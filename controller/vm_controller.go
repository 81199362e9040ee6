package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/patch"
)

// VMGenerationAnnotation on a VMI is the generation of the VM it was
// created from (KubeVirt's kubevirt.io/vm-generation).
const VMGenerationAnnotation = "kubevirt.io/vm-generation"

// Crash-loop backoff for VMIs that fail before their guest ever ran:
// KubeVirt's schedule, 10 s * failures^2 plus jitter, at most 5 minutes.
const (
	startBackoffMinSeconds = 10
	startBackoffMaxSeconds = 300
)

// VMReconciler keeps each VirtualMachine's VirtualMachineInstance in line
// with its run strategy and pending state-change requests, and reports the
// VM's status from what it observes of that VMI.
type VMReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// WatchesDataVolumes: SetupWithManager found CDI's DataVolumes served
	// and watches them; otherwise a VM waiting for some looks again every
	// dataVolumePollInterval.
	WatchesDataVolumes bool
	// Now is the clock; tests leave it nil.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachines/finalizers,verbs=update
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch

// SetupWithManager registers the reconciler: it runs on VM changes, on
// changes of the VMIs the VMs own and, when CDI is installed, of the
// DataVolumes they use.
func (r *VMReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if r.WatchesDataVolumes = servesDataVolumes(mgr); r.WatchesDataVolumes {
		b = b.Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(r.vmsOfDataVolume))
	}
	return b.
		Named("virtualmachine").
		For(&v1.VirtualMachine{}).
		// A VM's VMI has the VM's name. Mapping by name rather than by owner
		// also wakes a VM whose name is taken by a VMI it does not own
		// when that VMI goes away.
		Watches(&v1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
		})).
		Complete(r)
}

func (r *VMReconciler) now() metav1.Time {
	if r.Now != nil {
		return metav1.NewTime(r.Now())
	}
	return metav1.Now()
}

// Reconcile creates or deletes the VM's VMI as its run strategy and state
// change requests say, then records the VM status.
func (r *VMReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return quiet(ctx)(r.reconcile(ctx, req))
}

func (r *VMReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vm := &v1.VirtualMachine{}
	if err := r.Client.Get(ctx, req.NamespacedName, vm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	var vmi *v1.VirtualMachineInstance
	var syncErr *syncError
	got := &v1.VirtualMachineInstance{}
	switch err := r.Client.Get(ctx, req.NamespacedName, got); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("getting VMI %s: %w", req.NamespacedName, err)
	case !metav1.IsControlledBy(got, vm):
		// Not ours: never touch it, and say why the VM cannot start.
		syncErr = &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("VirtualMachineInstance %s exists and is not controlled by this VirtualMachine", got.Name)}
	default:
		vmi = got
	}

	if vm.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalize(ctx, vm, vmi)
	}
	if err := patch.AddFinalizer(ctx, r.Client, vm, v1.VirtualMachineControllerFinalizer); err != nil {
		return ctrl.Result{}, err
	}

	status := vm.Status.DeepCopy()
	var requeue time.Duration
	var stopping bool
	strategy, err := vm.RunStrategy()
	if err != nil {
		syncErr = &syncError{reason: ReasonInvalidSpec, err: err}
	}
	a := vmAction{r: r, vm: vm, vmi: vmi, status: status}
	// Volume requests (addvolume/removevolume) before the run strategy: a
	// template they change comes back with the next pass.
	if syncErr == nil {
		done, err := a.applyVolumeRequests(ctx)
		if err != nil {
			return ctrl.Result{}, err.err
		}
		if a.specChanged {
			return ctrl.Result{}, nil
		}
		if done {
			status.VolumeRequests = nil
		}
	}
	// The DataVolumes come first, whatever the run strategy.
	a.dvs, a.dvErr = a.syncDataVolumes(ctx)
	if syncErr == nil {
		requeue, syncErr = a.sync(ctx, strategy)
		vmi, stopping = a.vmi, a.stopping
		if syncErr == nil && a.specChanged {
			// The VM spec was rewritten (Halted + start request); the
			// resulting watch event brings the next reconcile.
			return ctrl.Result{}, nil
		}
	}
	if syncErr == nil {
		syncErr = a.dvErr
	}
	if a.waitingForDVs && !r.WatchesDataVolumes && requeue == 0 {
		requeue = dataVolumePollInterval
	}

	r.computeStatus(vm, vmi, strategy, status, syncErr, stopping)
	status.PrintableStatus = withDataVolumeStatus(status.PrintableStatus, vmi, a.dvs)
	// Optimistic lock: virt-api appends state change requests to this
	// status; a stale write would drop one.
	was := vm.Status.PrintableStatus
	if err := patch.Status(ctx, r.Client, vm, &vm.Status, *status, client.MergeFromWithOptimisticLock{}); err != nil {
		return ctrl.Result{}, err
	}
	if vm.Status.PrintableStatus != was {
		log.FromContext(ctx).Info("VM status changed", "from", was, "to", vm.Status.PrintableStatus)
	}

	// KubeVirt's order: the VMI keeps the VM controller's finalizer until
	// its final state has been recorded on the VM, i.e. now.
	if vmi != nil && vmi.IsFinal() {
		if err := patch.RemoveFinalizer(ctx, r.Client, vmi, v1.VirtualMachineControllerFinalizer); err != nil {
			return ctrl.Result{}, err
		}
	}
	if syncErr != nil && syncErr.retry {
		return ctrl.Result{}, syncErr.err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// finalize handles a deleted VM: its VMI is stopped, and once it is gone
// the VM's finalizer goes too. (Owner references would let the garbage
// collector do the deletion, but the finalizer makes the VM outlive its
// VMI, as in KubeVirt, so that `kubectl delete vm --wait` means stopped.)
func (r *VMReconciler) finalize(ctx context.Context, vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) error {
	if vmi != nil {
		if vmi.DeletionTimestamp == nil {
			if err := r.deleteVMI(ctx, vm, vmi); err != nil {
				return err
			}
		}
		// The VM will not be there to record the VMI's end.
		if err := patch.RemoveFinalizer(ctx, r.Client, vmi, v1.VirtualMachineControllerFinalizer); err != nil {
			return err
		}
		if vm.Status.PrintableStatus != v1.VirtualMachineStatusTerminating {
			orig := vm.DeepCopy()
			vm.Status.PrintableStatus = v1.VirtualMachineStatusTerminating
			if err := r.Client.Status().Patch(ctx, vm, client.MergeFrom(orig)); err != nil {
				return client.IgnoreNotFound(fmt.Errorf("updating status of VM %s/%s: %w", vm.Namespace, vm.Name, err))
			}
		}
		return nil
	}
	return patch.RemoveFinalizer(ctx, r.Client, vm, v1.VirtualMachineControllerFinalizer)
}

// vmAction is one pass of run-strategy handling for one VM.
type vmAction struct {
	r      *VMReconciler
	vm     *v1.VirtualMachine
	vmi    *v1.VirtualMachineInstance
	status *v1.VirtualMachineStatus
	// stopping: this pass asked for the VMI's deletion.
	stopping bool
	// specChanged: this pass rewrote the VM's spec.
	specChanged bool
	// dvs: what the VM's DataVolumes say about starting it; dvErr: a
	// template's DataVolume could not be made (syncDataVolumes).
	dvs   dvVerdict
	dvErr *syncError
	// waitingForDVs: this pass would have started the VMI but for them.
	waitingForDVs bool
}

// sync applies the run strategy, following KubeVirt's semantics:
//
//	Always          a VMI always exists; a final one, or one with a stop
//	                request (restart), is deleted and then recreated.
//	RerunOnFailure  a Failed VMI is deleted and recreated (a Start request
//	                is queued); a Succeeded one is deleted and not.
//	Manual          only Start/Stop requests create/delete the VMI.
//	Halted          no VMI; a Start request flips the VM to Always.
//	Once            a VMI is created once and left alone when it ends.
func (a *vmAction) sync(ctx context.Context, strategy v1.VirtualMachineRunStrategy) (time.Duration, *syncError) {
	vm, vmi := a.vm, a.vmi
	switch strategy {
	case v1.RunStrategyAlways:
		if vmi != nil {
			if hasStopRequestFor(a.status, vmi) || vmi.IsFinal() {
				return 0, a.stop(ctx)
			}
			return 0, nil
		}
		return a.startAfterBackoff(ctx)

	case v1.RunStrategyRerunOnFailure:
		if vmi != nil {
			failed := vmi.Status.Phase == v1.Failed
			if vmi.DeletionTimestamp == nil && (hasStopRequestFor(a.status, vmi) || failed || vmi.Status.Phase == v1.Succeeded) {
				if failed && !hasStartRequest(a.status) {
					// The restart happens once the failed VMI is gone; the
					// Start request that says so is stored before the VMI is
					// deleted, so that a failure in between cannot lose it.
					if err := a.queueStart(ctx); err != nil {
						return 0, err
					}
				}
				return 0, a.stop(ctx)
			}
			return 0, nil
		}
		// Start when asked, or when the VM just switched to this strategy;
		// not after a VMI that succeeded was cleaned up.
		if hasStartRequest(a.status) || vm.Status.RunStrategy != strategy {
			return a.startAfterBackoff(ctx)
		}
		return 0, nil

	case v1.RunStrategyManual:
		if vmi != nil {
			if hasStopRequestFor(a.status, vmi) {
				return 0, a.stop(ctx)
			}
			return 0, nil
		}
		if hasStartRequest(a.status) {
			return 0, a.start(ctx)
		}
		return 0, nil

	case v1.RunStrategyHalted:
		if vmi != nil {
			return 0, a.stop(ctx)
		}
		if hasStartRequest(a.status) {
			return 0, a.switchToAlways(ctx)
		}
		return 0, nil

	case v1.RunStrategyOnce:
		if vmi == nil {
			return 0, a.start(ctx)
		}
		return 0, nil

	default:
		return 0, &syncError{reason: ReasonInvalidSpec, err: fmt.Errorf("spec.runStrategy %q is not supported", strategy)}
	}
}

func hasStartRequest(st *v1.VirtualMachineStatus) bool {
	return len(st.StateChangeRequests) > 0 && st.StateChangeRequests[0].Action == v1.StartRequest
}

// hasStopRequestFor: the first pending request stops exactly this VMI. Only
// the first request counts; later ones wait their turn.
func hasStopRequestFor(st *v1.VirtualMachineStatus, vmi *v1.VirtualMachineInstance) bool {
	if len(st.StateChangeRequests) == 0 {
		return false
	}
	r := st.StateChangeRequests[0]
	return r.Action == v1.StopRequest && r.UID != nil && *r.UID == vmi.UID
}

// queueStart appends a Start request to the VM's stored status at once.
func (a *vmAction) queueStart(ctx context.Context) *syncError {
	vm := a.vm
	orig := vm.DeepCopy()
	vm.Status.StateChangeRequests = append(vm.Status.StateChangeRequests, v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest})
	if err := a.r.Client.Status().Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("queueing the restart of VM %s/%s: %w", vm.Namespace, vm.Name, err), retry: true}
	}
	a.status.StateChangeRequests = append([]v1.VirtualMachineStateChangeRequest(nil), vm.Status.StateChangeRequests...)
	return nil
}

func (a *vmAction) startAfterBackoff(ctx context.Context) (time.Duration, *syncError) {
	if f := a.status.StartFailure; f != nil && f.RetryAfterTimestamp != nil {
		if left := f.RetryAfterTimestamp.Sub(a.r.now().Time); left > 0 {
			return left, nil
		}
	}
	return 0, a.start(ctx)
}

func (a *vmAction) start(ctx context.Context) *syncError {
	vm := a.vm
	if vm.Spec.Template == nil {
		return &syncError{reason: ReasonInvalidSpec, err: errors.New("spec.template is required")}
	}
	switch {
	case a.dvErr != nil:
		return a.dvErr
	case a.dvs.failed:
		return &syncError{reason: ReasonDataVolumeError, err: a.dvs.err}
	case !a.dvs.ready:
		// A DataVolume's change brings the next pass.
		a.waitingForDVs = true
		return nil
	}
	if changed, err := a.captureRevisions(ctx); err != nil || changed {
		// Changed: the VM's new generation brings the next pass.
		a.specChanged = changed
		return err
	}
	vmi := newVMIFromVM(vm)
	if err := a.expandVMI(ctx, vmi); err != nil {
		return err
	}
	if err := a.r.Client.Create(ctx, vmi); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// The cache has not seen the VMI created by the previous pass
			// yet (or the old one is still going away): try again later.
			return &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("VMI %s/%s still exists: %w", vm.Namespace, vm.Name, err), retry: true}
		}
		a.r.Recorder.Eventf(vm, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreateVMI", "Error creating virtual machine instance: %v", err)
		return &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("creating VMI for VM %s/%s: %w", vm.Namespace, vm.Name, err), retry: true}
	}
	a.r.Recorder.Eventf(vm, vmi, corev1.EventTypeNormal, ReasonSuccessfulCreate, "CreateVMI", "Started the virtual machine by creating the new virtual machine instance %s", vmi.Name)
	a.vmi = vmi
	return nil
}

func (a *vmAction) stop(ctx context.Context) *syncError {
	if a.vmi == nil || a.vmi.DeletionTimestamp != nil {
		return nil
	}
	if err := a.r.deleteVMI(ctx, a.vm, a.vmi); err != nil {
		return &syncError{reason: ReasonFailedDelete, err: err, retry: true}
	}
	a.stopping = true
	return nil
}

func (r *VMReconciler) deleteVMI(ctx context.Context, vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance) error {
	uid := vmi.UID
	err := r.Client.Delete(ctx, vmi, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		r.Recorder.Eventf(vm, vmi, corev1.EventTypeWarning, ReasonFailedDelete, "DeleteVMI", "Error deleting virtual machine instance %s: %v", vmi.Name, err)
		return fmt.Errorf("deleting VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	r.Recorder.Eventf(vm, vmi, corev1.EventTypeNormal, ReasonSuccessfulDelete, "DeleteVMI", "Stopped the virtual machine by deleting the virtual machine instance %s", vmi.UID)
	return nil
}

// switchToAlways: a start request on a Halted VM turns it on for good, the
// way KubeVirt's controller does when virt-api could not.
func (a *vmAction) switchToAlways(ctx context.Context) *syncError {
	vm := a.vm
	orig := vm.DeepCopy()
	if vm.Spec.RunStrategy != nil {
		vm.Spec.RunStrategy = ptr.To(v1.RunStrategyAlways)
	} else {
		vm.Spec.Running = ptr.To(true)
	}
	if err := a.r.Client.Patch(ctx, vm, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("switching VM %s/%s to run: %w", vm.Namespace, vm.Name, err), retry: true}
	}
	a.specChanged = true
	return nil
}

// newVMIFromVM renders the VMI of a VM from its template.
func newVMIFromVM(vm *v1.VirtualMachine) *v1.VirtualMachineInstance {
	t := vm.Spec.Template
	vmi := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{
			Name:            vm.Name,
			Namespace:       vm.Namespace,
			Labels:          copyMap(t.ObjectMeta.Labels),
			Annotations:     copyMap(t.ObjectMeta.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, v1.VirtualMachineGroupVersionKind)},
			// Keeps the VMI until this controller has recorded its end.
			Finalizers: []string{v1.VirtualMachineControllerFinalizer},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[VMGenerationAnnotation] = strconv.FormatInt(vm.Generation, 10)
	return vmi
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// computeStatus fills in the VM status from the VMI as observed (or as
// just created) and the outcome of this pass.
func (r *VMReconciler) computeStatus(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, strategy v1.VirtualMachineRunStrategy, st *v1.VirtualMachineStatus, syncErr *syncError, stopping bool) {
	now := r.now()
	st.Created = vmi != nil
	st.Ready = false
	if vmi != nil {
		if c := vmi.GetCondition(v1.VirtualMachineInstanceReady); c != nil && c.Status == corev1.ConditionTrue {
			st.Ready = true
		}
	}
	// Remembered from the first start on, so that RerunOnFailure can tell a
	// fresh switch to it from a VMI that succeeded and was cleaned up.
	if strategy != v1.RunStrategyUnknown && (st.RunStrategy != "" || st.Created) {
		st.RunStrategy = strategy
	}

	trimStateChangeRequest(st, vmi)
	syncStartFailure(st, vmi, strategy, now)

	st.DesiredGeneration = vm.Generation
	if vmi != nil {
		if g, err := strconv.ParseInt(vmi.Annotations[VMGenerationAnnotation], 10, 64); err == nil {
			st.ObservedGeneration = g
		}
	}

	// Ready mirrors the VMI's.
	switch c := vmiCondition(vmi, v1.VirtualMachineInstanceReady); {
	case vmi == nil:
		st.Conditions = v1.SetVMCondition(st.Conditions, v1.VirtualMachineCondition{
			Type: v1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: ReasonVMINotExists, Message: "VMI does not exist",
		}, now)
	case c == nil:
		st.Conditions = v1.SetVMCondition(st.Conditions, v1.VirtualMachineCondition{
			Type: v1.VirtualMachineReady, Status: corev1.ConditionFalse, Reason: ReasonVMICondMissing, Message: "VMI is missing the Ready condition",
		}, now)
	default:
		st.Conditions = v1.SetVMCondition(st.Conditions, v1.VirtualMachineCondition{
			Type: v1.VirtualMachineReady, Status: c.Status, Reason: c.Reason, Message: c.Message,
			LastProbeTime: c.LastProbeTime, LastTransitionTime: c.LastTransitionTime,
		}, now)
	}
	if c := vmiCondition(vmi, v1.VirtualMachineInstancePaused); c != nil {
		st.Conditions = v1.SetVMCondition(st.Conditions, v1.VirtualMachineCondition{
			Type: v1.VirtualMachinePaused, Status: c.Status, Reason: c.Reason, Message: c.Message,
			LastProbeTime: c.LastProbeTime, LastTransitionTime: c.LastTransitionTime,
		}, now)
	} else {
		st.Conditions = v1.RemoveVMCondition(st.Conditions, v1.VirtualMachinePaused)
	}
	if syncErr != nil {
		st.Conditions = v1.SetVMCondition(st.Conditions, v1.VirtualMachineCondition{
			Type: v1.VirtualMachineFailure, Status: corev1.ConditionTrue, Reason: syncErr.reason, Message: syncErr.err.Error(),
		}, now)
	} else {
		st.Conditions = v1.RemoveVMCondition(st.Conditions, v1.VirtualMachineFailure)
	}
	// The template changed under a running VMI: it applies on next start.
	if vmi != nil && !vmi.IsFinal() && st.ObservedGeneration != 0 && st.ObservedGeneration < vm.Generation {
		st.Conditions = v1.SetVMCondition(st.Conditions, v1.VirtualMachineCondition{
			Type: v1.VirtualMachineRestartRequired, Status: corev1.ConditionTrue, Reason: "RestartRequired",
			Message: "the VM template changed since the VMI started; restart the VM to apply it",
		}, now)
	} else {
		st.Conditions = v1.RemoveVMCondition(st.Conditions, v1.VirtualMachineRestartRequired)
	}

	st.PrintableStatus = printableStatus(vm, vmi, strategy, st, stopping)
}

func vmiCondition(vmi *v1.VirtualMachineInstance, t v1.VirtualMachineInstanceConditionType) *v1.VirtualMachineInstanceCondition {
	if vmi == nil {
		return nil
	}
	return vmi.GetCondition(t)
}

// trimStateChangeRequest drops the first request once it is done or stale
// (KubeVirt handles one request per pass, oldest first).
func trimStateChangeRequest(st *v1.VirtualMachineStatus, vmi *v1.VirtualMachineInstance) {
	if len(st.StateChangeRequests) == 0 {
		return
	}
	r := st.StateChangeRequests[0]
	done := false
	switch r.Action {
	case v1.StopRequest:
		// Done when the VMI it named is gone, or was never named.
		done = vmi == nil || r.UID == nil || *r.UID != vmi.UID
	case v1.StartRequest:
		done = vmi != nil && vmi.DeletionTimestamp == nil && !vmi.IsFinal()
	default:
		done = true
	}
	if done {
		st.StateChangeRequests = st.StateChangeRequests[1:]
		if len(st.StateChangeRequests) == 0 {
			st.StateChangeRequests = nil
		}
	}
}

// syncStartFailure counts VMIs that fail before their guest ever ran, for
// the crash-loop backoff; a VMI that reached Running resets the count.
func syncStartFailure(st *v1.VirtualMachineStatus, vmi *v1.VirtualMachineInstance, strategy v1.VirtualMachineRunStrategy, now metav1.Time) {
	restarting := strategy == v1.RunStrategyAlways || strategy == v1.RunStrategyRerunOnFailure || strategy == v1.RunStrategyOnce
	if !restarting || (vmi != nil && wasRunning(vmi)) {
		st.StartFailure = nil
		return
	}
	// A VMI deleted on purpose (stop, restart) did not crash.
	if vmi == nil || !vmi.IsFinal() || vmi.DeletionTimestamp != nil || vmi.Status.Phase != v1.Failed {
		return
	}
	if st.StartFailure != nil && st.StartFailure.LastFailedVMIUID == vmi.UID {
		return
	}
	count := 1
	if st.StartFailure != nil {
		count = st.StartFailure.ConsecutiveFailCount + 1
	}
	st.StartFailure = &v1.VirtualMachineStartFailure{
		ConsecutiveFailCount: count,
		LastFailedVMIUID:     vmi.UID,
		RetryAfterTimestamp:  ptr.To(metav1.NewTime(now.Add(startBackoff(count)))),
	}
}

// startBackoff is KubeVirt's crash-loop delay: 10 s * count^2 plus up to
// half of that at random (so that VMs failing together do not retry
// together), capped at 5 minutes.
func startBackoff(count int) time.Duration {
	d := startBackoffMinSeconds * count * count
	if d > startBackoffMaxSeconds || d <= 0 {
		d = startBackoffMaxSeconds
	}
	d += rand.IntN(d/2 + 1)
	if d > startBackoffMaxSeconds {
		d = startBackoffMaxSeconds
	}
	return time.Duration(d) * time.Second
}

// printableStatus is the one word `kubectl get vm` shows; the first that
// applies wins, in KubeVirt's order.
func printableStatus(vm *v1.VirtualMachine, vmi *v1.VirtualMachineInstance, strategy v1.VirtualMachineRunStrategy, st *v1.VirtualMachineStatus, stopping bool) v1.VirtualMachinePrintableStatus {
	cond := func(t v1.VirtualMachineInstanceConditionType, s corev1.ConditionStatus) *v1.VirtualMachineInstanceCondition {
		c := vmiCondition(vmi, t)
		if c == nil || c.Status != s {
			return nil
		}
		return c
	}
	switch {
	case vm.DeletionTimestamp != nil:
		return v1.VirtualMachineStatusTerminating
	case vmi != nil && !vmi.IsFinal() && (vmi.DeletionTimestamp != nil || stopping || hasStopRequestFor(st, vmi)):
		return v1.VirtualMachineStatusStopping
	case vmi != nil && vmi.Status.MigrationState != nil && vmi.Status.MigrationState.StartTimestamp != nil &&
		!vmi.Status.MigrationState.Completed && !vmi.Status.MigrationState.Failed:
		return v1.VirtualMachineStatusMigrating
	case vmi != nil && vmi.IsRunning() && cond(v1.VirtualMachineInstancePaused, corev1.ConditionTrue) != nil:
		return v1.VirtualMachineStatusPaused
	case vmi != nil && vmi.IsRunning():
		return v1.VirtualMachineStatusRunning
	}
	if c := cond(v1.VirtualMachineInstancePodScheduled, corev1.ConditionFalse); c != nil && c.Reason == corev1.PodReasonUnschedulable {
		return v1.VirtualMachineStatusUnschedulable
	}
	if c := cond(v1.VirtualMachineInstanceSynchronized, corev1.ConditionFalse); c != nil {
		switch c.Reason {
		case ReasonErrImagePull:
			return v1.VirtualMachineStatusErrImagePull
		case ReasonImagePullBackOff:
			return v1.VirtualMachineStatusImagePullBackOff
		}
	}
	if vmi != nil && !vmi.IsFinal() {
		return v1.VirtualMachineStatusStarting
	}
	crashLooping := st.StartFailure != nil && st.StartFailure.ConsecutiveFailCount > 0 &&
		(strategy == v1.RunStrategyAlways || strategy == v1.RunStrategyRerunOnFailure || strategy == v1.RunStrategyOnce)
	if crashLooping {
		return v1.VirtualMachineStatusCrashLoopBackOff
	}
	return v1.VirtualMachineStatusStopped
}
