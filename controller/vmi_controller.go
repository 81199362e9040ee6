package controller

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// VMIReconciler gives each VirtualMachineInstance one virt-launcher pod and
// moves the VMI through Pending -> Scheduling -> Scheduled from what it sees
// of that pod. From Scheduled on, virt-handler on the pod's node owns the
// VMI's phase (Running, Succeeded, Failed); this controller only steps in
// when the pod is gone before the handler could report, and it tears the
// pod down when the VMI is deleted.
type VMIReconciler struct {
	// Client reads from the informer cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server directly; used right before
	// creating a pod, so that a cache that has not yet seen the pod created
	// by the previous reconcile cannot make us create a second one.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Launcher  LauncherConfig
	// Config is the cluster configuration (feature gates); nil means
	// KubeVirt's defaults.
	Config func() (ClusterConfig, error)
	// Now is the clock; tests leave it nil.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: it runs on VMI changes and on
// changes of the pods the VMIs own.
func (r *VMIReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if servesDataVolumes(mgr) {
		// A DataVolume that gets ready lets its VMIs' pods be made.
		b = b.Watches(&cdiv1.DataVolume{}, handler.EnqueueRequestsFromMapFunc(r.vmisOfDataVolume))
	}
	return b.
		Named("virtualmachineinstance").
		For(&v1.VirtualMachineInstance{}).
		Watches(&corev1.Pod{},
			handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1.VirtualMachineInstance{}, handler.OnlyControllerOwner()),
			builder.WithPredicates(predicate.NewPredicateFuncs(isLauncherPod))).
		// A claim that appears (or changes) moves the VMIs using it.
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.vmisOfClaim)).
		// An attachment pod that runs moves its volumes to AttachedToNode.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(vmiOfAttachmentPod),
			builder.WithPredicates(predicate.NewPredicateFuncs(isAttachmentPod))).
		Complete(r)
}

func isLauncherPod(o client.Object) bool {
	return o.GetLabels()[v1.AppLabel] == LauncherLabelValue
}

func (r *VMIReconciler) now() metav1.Time {
	if r.Now != nil {
		return metav1.NewTime(r.Now())
	}
	return metav1.Now()
}

// Reconcile brings one VMI's launcher pod and status in line with what is
// observed. It is idempotent: running it twice in a row changes nothing the
// second time.
func (r *VMIReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return quiet(ctx)(r.reconcile(ctx, req))
}

func (r *VMIReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	vmi := &v1.VirtualMachineInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, vmi); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}

	pods, err := r.launcherPods(ctx, r.Client, vmi)
	if err != nil {
		return ctrl.Result{}, err
	}
	pod := vmispec.ActiveLauncherPod(vmi, pods)
	if pod == nil && (vmi.Status.Phase == v1.Scheduling || vmi.Status.Phase == v1.Scheduled || vmi.Status.Phase == v1.Running) {
		// The VMI says a pod was seen but the cache has none: it is gone,
		// or the cache lags behind our own create. Only the API server can
		// tell, and concluding "gone" fails the VMI for good.
		if pods, err = r.launcherPods(ctx, r.APIReader, vmi); err != nil {
			return ctrl.Result{}, err
		}
		pod = vmispec.ActiveLauncherPod(vmi, pods)
	}

	var syncErr *syncError
	var requeue time.Duration
	var hp *hotplugState
	// The claims decide the pod's volumes and LiveMigratable. From the
	// cache: a claim it has not seen yet comes back through the watch.
	pvcs, pvcErr := readPVCs(ctx, r.Client, vmi)
	switch {
	case vmi.DeletionTimestamp != nil:
		requeue, syncErr = r.deletePodsAfterGrace(ctx, vmi, pods)
	case vmi.IsFinal():
		// The guest is gone; a launcher still running has nothing to do.
		_, syncErr = r.deletePods(ctx, vmi, pods, true)
	default:
		if err := patch.AddFinalizer(ctx, r.Client, vmi, v1.VirtualMachineInstanceFinalizer); err != nil {
			return ctrl.Result{}, err
		}
		if pod == nil && (vmi.Status.Phase == v1.VmPhaseUnset || vmi.Status.Phase == v1.Pending) {
			if syncErr = pvcErr; syncErr == nil {
				syncErr = r.assignVSOCKCID(ctx, vmi)
			}
			if syncErr == nil {
				pod, syncErr = r.createPod(ctx, vmi, pvcs)
			}
		}
		if syncErr == nil {
			syncErr = r.deleteMigratedSource(ctx, vmi, pods, pod)
		}
		if syncErr == nil && vmi.Status.Phase == v1.Running && pod != nil && !vmispec.PodDown(pod) && pod.Spec.NodeName != "" {
			hp, syncErr = r.syncHotplug(ctx, vmi, pod)
		}
	}

	if syncErr == nil {
		syncErr = imagePullError(pod)
	}
	if err := r.updateStatus(ctx, vmi, pod, migrationTargetPod(vmi, pods), pvcs, hp, syncErr); err != nil {
		return ctrl.Result{}, err
	}

	// The finalizer goes once the VMI is being deleted and no launcher pod
	// is left: the guest had its graceful stop (or never ran).
	if vmi.DeletionTimestamp != nil && len(pods) == 0 {
		// Confirmed with the API server: a pod the cache has not seen yet
		// must not outlive its VMI's finalizer.
		live, err := r.launcherPods(ctx, r.APIReader, vmi)
		if err != nil {
			return ctrl.Result{}, err
		}
		if len(live) == 0 {
			if err := patch.RemoveFinalizer(ctx, r.Client, vmi, v1.VirtualMachineInstanceFinalizer); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if syncErr != nil && syncErr.retry {
		logger.Info("sync failed; will retry", "reason", syncErr.reason, "error", syncErr.err)
		return ctrl.Result{}, syncErr.err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// syncError is a failure to reach the desired state; its reason ends up in
// the Synchronized condition.
type syncError struct {
	reason string
	err    error
	// retry: the failure may be transient, so the request goes back to the
	// queue with backoff. Invalid specs are not retried; a spec change
	// triggers the next reconcile.
	retry bool
}

// launcherPods lists the VMI's launcher pods (by the created-by label, then
// checked against the controller reference), oldest first, migration
// targets included: which one runs the guest is vmispec.ActiveLauncherPod's
// to say.
func (r *VMIReconciler) launcherPods(ctx context.Context, reader client.Reader, vmi *v1.VirtualMachineInstance) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	sel := labels.SelectorFromSet(labels.Set{v1.AppLabel: LauncherLabelValue, v1.CreatedByLabel: string(vmi.UID)})
	if err := reader.List(ctx, list, client.InNamespace(vmi.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("listing launcher pods of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if metav1.IsControlledBy(p, vmi) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp)
	})
	return out, nil
}

// migrationTargetPod is the target pod of the VMI's migration in flight
// (handed to the handlers and not yet over), if it exists: the one the
// handoff named, not any pod with the migration's label (a tenant can
// label a pod of her own so).
func migrationTargetPod(vmi *v1.VirtualMachineInstance, pods []*corev1.Pod) *corev1.Pod {
	ms := vmi.Status.MigrationState
	if ms == nil || ms.Completed || ms.Failed || ms.MigrationUID == "" || ms.TargetPod == "" {
		return nil
	}
	for _, p := range pods {
		if p.Name == ms.TargetPod && p.Labels[MigrationJobLabel] == string(ms.MigrationUID) && !vmispec.PodDown(p) {
			return p
		}
	}
	return nil
}

func (r *VMIReconciler) createPod(ctx context.Context, vmi *v1.VirtualMachineInstance, pvcs map[string]vmispec.PVCInfo) (*corev1.Pod, *syncError) {
	// The cache said there is no pod. Ask the API server: the pod created by
	// the previous reconcile may simply not have reached the cache yet.
	live, err := r.launcherPods(ctx, r.APIReader, vmi)
	if err != nil {
		return nil, &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	if p := vmispec.ActiveLauncherPod(vmi, live); p != nil {
		return p, nil
	}
	pod, err := RenderLauncherPod(vmi, r.Launcher)
	if err != nil {
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error rendering the virt-launcher pod: %v", err)
		return nil, &syncError{reason: ReasonInvalidSpec, err: err}
	}
	cfg := ClusterConfig{}
	if r.Config != nil {
		if cfg, err = r.Config(); err != nil {
			return nil, &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("reading the cluster configuration: %w", err), retry: true}
		}
	}
	// Retried: enabling the gate is a configuration change, which no
	// watch brings back.
	if err := checkHostDisks(vmi, cfg); err != nil {
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error rendering the virt-launcher pod: %v", err)
		return nil, &syncError{reason: ReasonInvalidSpec, err: err, retry: true}
	}
	if err := addDiskVolumes(pod, vmi, pvcs); err != nil {
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error rendering the virt-launcher pod: %v", err)
		return nil, &syncError{reason: ReasonInvalidSpec, err: err}
	}
	// KubeVirt's way: no pod while a network's NAD is missing; the
	// Synchronized condition and an event name it, and the VMI retries.
	if err := addNetworks(ctx, r.APIReader, vmi, pod); err != nil {
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error rendering the virt-launcher pod: %v", err)
		return nil, &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error creating pod: %v", err)
		return nil, &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("creating virt-launcher pod for VMI %s/%s: %w", vmi.Namespace, vmi.Name, err), retry: true}
	}
	r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, ReasonSuccessfulCreate, "CreatePod", "Created virtual machine pod %s", pod.Name)
	return pod, nil
}

// deletePodsAfterGrace handles a deleted VMI. A guest that runs (the handler
// reported Running) gets the VMI's grace period to shut down through
// virt-handler, which then marks the VMI final; after that, or once the
// grace period is over, the pods are deleted (and the pod's own grace period
// covers a launcher that still has to stop the guest on SIGTERM). A guest
// that never ran has nothing to shut down: its pods go at once.
func (r *VMIReconciler) deletePodsAfterGrace(ctx context.Context, vmi *v1.VirtualMachineInstance, pods []*corev1.Pod) (time.Duration, *syncError) {
	if vmi.IsRunning() {
		deadline := vmi.DeletionTimestamp.Add(time.Duration(vmispec.GracePeriodSeconds(&vmi.Spec)) * time.Second)
		if left := deadline.Sub(r.now().Time); left > 0 {
			return left, nil
		}
	}
	return r.deletePods(ctx, vmi, pods, false)
}

// deleteMigratedSource deletes the source pod of the VMI's completed
// migration once its launcher has exited (the handler stopped it when the
// guest left). It has nothing left to do, and left in place it would be
// a second launcher pod of the VMI, ended, that users and tools listing
// the VMI's pods would have to tell apart from the one running the guest.
func (r *VMIReconciler) deleteMigratedSource(ctx context.Context, vmi *v1.VirtualMachineInstance, pods []*corev1.Pod, active *corev1.Pod) *syncError {
	ms := vmi.Status.MigrationState
	if ms == nil || !ms.Completed || ms.Failed || ms.SourcePod == "" {
		return nil
	}
	var ended []*corev1.Pod
	for _, p := range pods {
		if p.Name == ms.SourcePod && p != active && vmispec.PodEnded(p) {
			ended = append(ended, p)
		}
	}
	_, syncErr := r.deletePods(ctx, vmi, ended, false)
	return syncErr
}

// deletePods deletes the pods not yet being deleted; onlyRunning keeps pods
// that already ended, so their logs stay readable.
func (r *VMIReconciler) deletePods(ctx context.Context, vmi *v1.VirtualMachineInstance, pods []*corev1.Pod, onlyRunning bool) (time.Duration, *syncError) {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if onlyRunning && vmispec.PodEnded(p) {
			continue
		}
		// Preconditions: delete exactly the pod we looked at, not a
		// namesake created in between.
		err := r.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			r.Recorder.Eventf(vmi, p, corev1.EventTypeWarning, ReasonFailedDelete, "DeletePod", "Error deleting pod %s: %v", p.Name, err)
			return 0, &syncError{reason: ReasonFailedDelete, err: fmt.Errorf("deleting pod %s/%s: %w", p.Namespace, p.Name, err), retry: true}
		}
		r.Recorder.Eventf(vmi, p, corev1.EventTypeNormal, ReasonSuccessfulDelete, "DeletePod", "Deleted virtual machine pod %s", p.Name)
	}
	return 0, nil
}

// updateStatus derives the VMI status from the pods it observed (decide)
// and writes what changed: the node label, then the status (write).
func (r *VMIReconciler) updateStatus(ctx context.Context, vmi *v1.VirtualMachineInstance, pod, target *corev1.Pod, pvcs map[string]vmispec.PVCInfo, hp *hotplugState, syncErr *syncError) error {
	st := decideVMIStatus(vmi, pod, target, pvcs, syncErr, r.now())
	if hp != nil {
		st.VolumeStatus = decideVolumeStatus(vmi, hp.claims, hp.pods)
	}
	// The node label follows status.nodeName, which virt-handler moves to
	// the target's node when a migration completes: the label is what
	// the handlers' caches select on.
	if st.NodeName != "" && vmi.Labels[v1.NodeNameLabel] != st.NodeName {
		orig := vmi.DeepCopy()
		if vmi.Labels == nil {
			vmi.Labels = map[string]string{}
		}
		vmi.Labels[v1.NodeNameLabel] = st.NodeName
		if err := r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("labelling VMI %s/%s with its node: %w", vmi.Namespace, vmi.Name, err)
		}
	}
	// virt-handler writes this status too; a conflict means we decided on
	// stale facts, and the retry sees fresh ones.
	before := vmi.Status.Phase
	if err := patch.VMIStatus(ctx, r.Client, vmi, st); err != nil {
		return err
	}
	if vmi.Status.Phase != before {
		log.FromContext(ctx).Info("VMI phase changed", "from", before, "to", vmi.Status.Phase, "node", vmi.Status.NodeName)
	}
	return nil
}

// decideVMIStatus is the VMI status the controller wants, from the VMI,
// its active launcher pod and its migration target pod (either may be nil),
// its claims (readPVCs) and the sync's failure, if any. It changes nothing
// it is given.
func decideVMIStatus(vmi *v1.VirtualMachineInstance, pod, target *corev1.Pod, pvcs map[string]vmispec.PVCInfo, syncErr *syncError, now metav1.Time) *v1.VirtualMachineInstanceStatus {
	st := vmi.Status.DeepCopy()
	podExists := pod != nil

	if st.Phase == v1.VmPhaseUnset {
		// Accepted. (KubeVirt's mutating webhook records this on create;
		// here it is the first thing the controller records.)
		st.SetPhase(v1.Pending, now)
	}
	switch st.Phase {
	case v1.Pending:
		switch {
		case podExists && vmispec.PodDown(pod):
			st.SetPhase(v1.Failed, now)
		case podExists && pod.Spec.NodeName != "":
			st.SetPhase(v1.Scheduled, now)
		case podExists:
			st.SetPhase(v1.Scheduling, now)
		case vmi.DeletionTimestamp != nil:
			// Deleted before it ever got a pod: it will never run.
			st.SetPhase(v1.Failed, now)
		default:
			st.SetPhase(v1.Pending, now)
		}
	case v1.Scheduling:
		switch {
		case !podExists || vmispec.PodDown(pod):
			st.SetPhase(v1.Failed, now)
		case pod.Spec.NodeName != "":
			st.SetPhase(v1.Scheduled, now)
		}
	case v1.Scheduled:
		// The handler has not taken over yet: if the pod goes away or ends
		// now, nobody else will ever report on this VMI.
		if !podExists || vmispec.PodDown(pod) {
			st.SetPhase(v1.Failed, now)
		}
	case v1.Running:
		// The handler reports the guest's end; a vanished pod it cannot.
		if !podExists {
			st.SetPhase(v1.Failed, now)
		}
	}

	if st.Phase == v1.Scheduled && vmi.Status.Phase != v1.Scheduled && podExists {
		st.NodeName = pod.Spec.NodeName
	}
	if podExists && !vmispec.PodDown(pod) {
		if pod.Status.QOSClass != "" {
			st.QOSClass = ptr.To(pod.Status.QOSClass)
		}
		st.ActivePods = map[types.UID]string{pod.UID: pod.Spec.NodeName}
		if target != nil && target.Spec.NodeName != "" {
			// Two during a migration, as in KubeVirt.
			st.ActivePods[target.UID] = target.Spec.NodeName
		}
		for _, c := range pod.Spec.Containers {
			if c.Name == ComputeContainerName {
				st.LauncherContainerImageVersion = c.Image
			}
		}
	} else if st.Phase == v1.Failed || st.Phase == v1.Succeeded {
		st.ActivePods = nil
	}

	// PodScheduled mirrors the pod while it waits for a node, so that
	// "0/1 nodes are available: ..." shows on the VMI (and the VM prints
	// ErrorUnschedulable).
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse {
		st.Conditions = v1.SetVMICondition(st.Conditions, v1.VirtualMachineInstanceCondition{
			Type: v1.VirtualMachineInstancePodScheduled, Status: c.Status, Reason: c.Reason, Message: c.Message,
		}, now)
	} else {
		st.Conditions = v1.RemoveVMICondition(st.Conditions, v1.VirtualMachineInstancePodScheduled)
	}

	st.Conditions = v1.SetVMICondition(st.Conditions, readyCondition(st.Phase, pod), now)
	st.Conditions = v1.SetVMICondition(st.Conditions, liveMigratableCondition(vmi, pvcs), now)

	if syncErr != nil {
		st.Conditions = v1.SetVMICondition(st.Conditions, v1.VirtualMachineInstanceCondition{
			Type: v1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse,
			Reason: syncErr.reason, Message: syncErr.err.Error(),
		}, now)
	} else {
		st.Conditions = v1.RemoveVMICondition(st.Conditions, v1.VirtualMachineInstanceSynchronized)
	}
	return st
}

// liveMigratableCondition says whether the VMI can be live-migrated (a
// fact of its spec and its claims: see vmispec.LiveMigratable).
func liveMigratableCondition(vmi *v1.VirtualMachineInstance, pvcs map[string]vmispec.PVCInfo) v1.VirtualMachineInstanceCondition {
	c := v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}
	if ok, reason, msg := vmispec.LiveMigratable(vmi.Annotations, &vmi.Spec, pvcs); !ok {
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, reason, msg
	}
	return c
}

// readyCondition: a VMI is ready when its guest runs and its launcher pod is
// ready (the launcher's readiness reflects the guest's).
func readyCondition(phase v1.VirtualMachineInstancePhase, pod *corev1.Pod) v1.VirtualMachineInstanceCondition {
	c := v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceReady, Status: corev1.ConditionFalse}
	switch {
	case pod == nil:
		c.Reason, c.Message = v1.PodNotExistsReason, "virt-launcher pod has not yet been scheduled"
	case pod.DeletionTimestamp != nil:
		c.Reason, c.Message = v1.PodTerminatingReason, "virt-launcher pod is terminating"
	case phase != v1.Running:
		c.Reason, c.Message = v1.GuestNotRunningReason, "Guest VM is not reported as running"
	default:
		pc := podCondition(pod, corev1.PodReady)
		if pc == nil {
			c.Reason, c.Message = v1.PodConditionMissingReason, "virt-launcher pod is missing the Ready condition"
			break
		}
		c.Status, c.Reason, c.Message = pc.Status, pc.Reason, pc.Message
	}
	return c
}
