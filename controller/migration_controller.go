package controller

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Event reasons of the migration controller (KubeVirt's spelling where it
// has one).
const (
	ReasonPreparingTarget     = "PreparingTarget"
	ReasonMigrationSucceeded  = "SuccessfulMigration"
	ReasonMigrationFailed     = "FailedMigration"
	ReasonMigrationThrottled  = "MigrationThrottled"
	ReasonAbortRequested      = "SuccessfulAbortMigration"
	ReasonFailedAbort         = "FailedAbortMigration"
	migrationVMIIndex         = "spec.vmiName"
	migrationThrottledRequeue = 5 * time.Second
	// migrationCacheRequeue: the cache's migration is older than the API
	// server's; the watch brings the newer one about now.
	migrationCacheRequeue = time.Second
)

// MigrationReconciler carries out VirtualMachineInstanceMigrations, as
// KubeVirt's migration controller does. Its part of a live migration:
//
//	Pending          accepted; checks (the VMI runs, can migrate, no other
//	                 migration of it is older and unfinished) and the limits
//	                 (parallel migrations per cluster and out of a node)
//	Scheduling       it created the target launcher pod (RenderMigrationTargetPod)
//	Scheduled        the pod has a node
//	PreparingTarget  the pod runs; it wrote the VMI's status.migrationState
//	                 (source and target node and pod, the configuration):
//	                 the handoff to the handlers
//	TargetReady      the target's handler says its launcher listens
//	                 (migrationState.targetNodeAddress)
//	Running          the source's handler started the migration
//	                 (migrationState.startTimestamp)
//	Succeeded        the source's handler saw it complete
//	                 (migrationState.completed): the target pod, unmarked,
//	                 is the VMI's launcher pod from now on
//	Failed           anything else: the target pod is deleted, the source
//	                 keeps its guest
//
// Who decides the outcome: before the handoff, this controller alone. From
// the handoff on, the migration may be running in the VMMs, and once the
// target confirmed the guest the source never resumes it: only the
// source's handler, which sees the VMM's result, can say how it ended.
// Ending it from here (the migration is deleted, the VMI is being deleted)
// is then a request, as in KubeVirt: migrationState.abortRequested on the
// VMI (and the migration's migrationAbortRequested condition). The
// source's handler cancels the VMM's migration and writes what it then
// observes: failed with abortStatus Succeeded (the source kept the guest:
// the target pod is deleted) or completed with abortStatus Failed (too
// late: the guest runs on the target, the migration Succeeded, the target
// pod is the VMI's). The finalizer holds a deleted migration until one of
// the two is recorded. Two cases stay this controller's after the
// handoff, because no guest can be lost by them: the target pod ended or
// vanished before the start (written with the optimistic lock against the
// handler's record of the start, so the two exclude each other), and a
// VMI that is final (its guest ended; no handler speaks for it any more).
//
// Every phase is derived from what the pass observes (the migration, the
// VMI, the target pod), so reconciling twice changes nothing.
type MigrationReconciler struct {
	Client client.Client
	// APIReader reads from the API server directly, before creating a
	// target pod (a cache behind our own create must not make a second).
	APIReader client.Reader
	Recorder  events.EventRecorder
	Launcher  LauncherConfig
	// Config is the cluster configuration (limits, feature gates); nil
	// means KubeVirt's defaults.
	Config func() (ClusterConfig, error)
	// Now is the clock; tests leave it nil.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch

// SetupWithManager registers the reconciler: migrations, the target pods
// (by their migration label) and the VMIs being migrated.
func (r *MigrationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.VirtualMachineInstanceMigration{}, migrationVMIIndex,
		func(o client.Object) []string { return []string{o.(*v1.VirtualMachineInstanceMigration).Spec.VMIName} }); err != nil {
		return fmt.Errorf("indexing migrations by VMI: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtualmachineinstancemigration").
		For(&v1.VirtualMachineInstanceMigration{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			name := o.GetAnnotations()[v1.MigrationJobNameAnnotation]
			if name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		}), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetAnnotations()[v1.MigrationJobNameAnnotation] != ""
		}))).
		Watches(&v1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(r.migrationsOfVMI)).
		Complete(r)
}

// migrationsOfVMI maps a VMI to its unfinished migrations.
func (r *MigrationReconciler) migrationsOfVMI(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1.VirtualMachineInstanceMigrationList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{migrationVMIIndex: o.GetName()}); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, m := range list.Items {
		if !m.IsFinal() || m.DeletionTimestamp != nil {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}})
		}
	}
	return out
}

func (r *MigrationReconciler) now() metav1.Time {
	if r.Now != nil {
		return metav1.NewTime(r.Now())
	}
	return metav1.Now()
}

func (r *MigrationReconciler) config() (ClusterConfig, error) {
	if r.Config == nil {
		return ClusterConfig{}, nil
	}
	return r.Config()
}

// Reconcile moves one migration along.
func (r *MigrationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return quiet(ctx)(r.reconcile(ctx, req))
}

// migrationPass is what one reconcile observed and decided.
type migrationPass struct {
	m      *v1.VirtualMachineInstanceMigration
	vmi    *v1.VirtualMachineInstance // nil: gone
	target *corev1.Pod                // nil: none (yet, or any more)
	pods   []*corev1.Pod              // every target pod of this migration
	st     *v1.VirtualMachineInstanceMigrationStatus
	now    metav1.Time
}

// handedOff: the VMI's migrationState is this migration's.
func (p *migrationPass) handedOff() *v1.VirtualMachineInstanceMigrationState {
	if p.vmi == nil {
		return nil
	}
	if ms := p.vmi.Status.MigrationState; ms != nil && ms.MigrationUID == p.m.UID {
		return ms
	}
	return nil
}

func (r *MigrationReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &v1.VirtualMachineInstanceMigration{}
	if err := r.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	cfg, err := r.config()
	if err != nil {
		return ctrl.Result{}, err
	}
	p := &migrationPass{m: m, st: m.Status.DeepCopy(), now: r.now()}
	if m.Spec.VMIName != "" {
		key := types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}
		for _, rd := range []client.Reader{r.Client, r.APIReader} {
			vmi := &v1.VirtualMachineInstance{}
			err := rd.Get(ctx, key, vmi)
			switch {
			case err == nil:
				p.vmi = vmi
			case apierrors.IsNotFound(err):
				p.vmi = nil
			default:
				return ctrl.Result{}, fmt.Errorf("reading VMI %s: %w", key, err)
			}
			// No VMI, or one not running, fails the migration: a verdict
			// not taken on the cache's word, which can lag a VMI that
			// just started (a migration created right after it would
			// fail for nothing). The API server's answer decides.
			if p.vmi != nil && p.vmi.IsRunning() {
				break
			}
		}
	}
	if p.pods, err = r.targetPods(ctx, r.Client, m); err != nil {
		return ctrl.Result{}, err
	}
	// The target is the pod this controller made for the migration, the
	// one its state names: a pod a tenant labels with the migration and
	// owns by the VMI is cleaned up with the rest (p.pods), never used.
	for _, pod := range p.pods {
		if createdTarget(m, pod) && (p.target == nil || pod.DeletionTimestamp == nil) {
			p.target = pod
		}
	}

	// Deleted, or over: clean up, then let it go.
	if m.DeletionTimestamp != nil || m.IsFinal() {
		if !m.IsFinal() {
			// The finalizer stays until the outcome is recorded: a
			// migration the handlers run ends only by their verdict
			// (see end), and its target pod may hold the guest by then.
			// Decided on the API server's VMI: a cache that has not
			// seen the handoff yet would let the target pod go under a
			// migration the handlers run.
			if err := r.refreshVMI(ctx, p); err != nil {
				return ctrl.Result{}, err
			}
			ended, err := r.end(ctx, p, "the migration was deleted before it ended")
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("cancelling migration %s: %w", req.NamespacedName, err)
			}
			if err := r.writeStatus(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, err
			}
			if !ended {
				// The source's handler answers in the VMI's status,
				// which brings this migration back (migrationsOfVMI).
				return ctrl.Result{}, nil
			}
		}
		if err := r.cleanup(ctx, p); err != nil {
			return ctrl.Result{}, err
		}
		if m.DeletionTimestamp != nil || len(p.pods) == 0 || m.Status.Phase == v1.MigrationSucceeded {
			return ctrl.Result{}, patch.RemoveFinalizer(ctx, r.Client, m, v1.VirtualMachineInstanceMigrationFinalizer)
		}
		return ctrl.Result{}, nil
	}
	if err := patch.AddFinalizer(ctx, r.Client, m, v1.VirtualMachineInstanceMigrationFinalizer); err != nil {
		return ctrl.Result{}, err
	}
	if p.st.Phase == v1.MigrationPhaseUnset {
		setMigrationPhase(p.st, v1.MigrationPending, p.now)
	}

	requeue, err := r.step(ctx, p, cfg)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.writeStatus(ctx, p); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// step decides the phase from what was observed and acts on it.
func (r *MigrationReconciler) step(ctx context.Context, p *migrationPass, cfg ClusterConfig) (time.Duration, error) {
	m, vmi, target := p.m, p.vmi, p.target
	ms := p.handedOff()
	started := ms != nil && ms.StartTimestamp != nil
	if ms != nil {
		p.st.MigrationState = ms.DeepCopy()
	}
	switch {
	case m.Spec.VMIName == "":
		r.fail(ctx, p, "spec.vmiName is empty")
		return 0, nil
	case vmi == nil:
		r.fail(ctx, p, fmt.Sprintf("VMI %s does not exist", m.Spec.VMIName))
		return 0, nil
	case ms != nil && ms.Completed && !ms.Failed:
		return 0, r.succeed(ctx, p)
	case ms != nil && ms.Failed:
		reason := ms.FailureReason
		if reason == "" {
			reason = "the migration failed"
		}
		r.fail(ctx, p, reason)
		return 0, nil
	case started && vmi.DeletionTimestamp != nil && !vmi.IsFinal():
		// The VMI goes, so finishing the migration is pointless; but
		// only the source's handler can stop it without losing the guest.
		setMigrationPhase(p.st, v1.MigrationRunning, p.now)
		if _, err := r.end(ctx, p, fmt.Sprintf("VMI %s is being deleted", vmi.Name)); err != nil {
			return 0, err
		}
		return 0, r.setTargetNodeLabel(ctx, vmi, ms.TargetNode)
	case vmi.DeletionTimestamp != nil || vmi.IsFinal():
		r.fail(ctx, p, fmt.Sprintf("VMI %s is not running (phase %s)", vmi.Name, vmi.Status.Phase))
		return 0, nil
	case started:
		// From here the source's handler gives the verdict: only it knows
		// whether the target confirmed the guest before anything broke.
		setMigrationPhase(p.st, v1.MigrationRunning, p.now)
		return 0, r.setTargetNodeLabel(ctx, vmi, ms.TargetNode)
	case target == nil && p.st.Phase != v1.MigrationPending:
		// The cache may not have caught up with our own create: only the
		// API server can say the pod is gone.
		live, err := r.targetPods(ctx, r.APIReader, m)
		if err != nil {
			return 0, err
		}
		if len(live) > 0 {
			return time.Second, nil
		}
		r.fail(ctx, p, "the target pod is gone")
		return 0, nil
	case target == nil:
		return r.start(ctx, p, cfg)
	case vmispec.PodDown(target):
		r.fail(ctx, p, fmt.Sprintf("the target pod %s ended before the migration started (%s)", target.Name, podEnd(target)))
		return 0, nil
	case ms != nil && ms.TargetNodeAddress != "":
		setMigrationPhase(p.st, v1.MigrationTargetReady, p.now)
		return 0, r.setTargetNodeLabel(ctx, vmi, ms.TargetNode)
	case ms != nil:
		// Handed off. The label is written after the status: a pass
		// that failed in between writes it now.
		setMigrationPhase(p.st, v1.MigrationPreparingTarget, p.now)
		return 0, r.setTargetNodeLabel(ctx, vmi, ms.TargetNode)
	}
	return r.awaitTarget(ctx, p, cfg)
}

// awaitTarget follows the target pod, which exists and has not been
// handed off yet, until it runs (then hands off) or its timeouts fail the
// migration.
func (r *MigrationReconciler) awaitTarget(ctx context.Context, p *migrationPass, cfg ClusterConfig) (time.Duration, error) {
	target := p.target
	lim := cfg.Limits()
	age := p.now.Sub(target.CreationTimestamp.Time)
	if c := podCondition(target, corev1.PodScheduled); target.Spec.NodeName == "" && c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		if age >= lim.UnschedulableTimeout {
			r.fail(ctx, p, fmt.Sprintf("the target pod %s was unschedulable for %v: %s", target.Name, lim.UnschedulableTimeout, c.Message))
			return 0, nil
		}
	}
	if target.Status.Phase != corev1.PodRunning && age >= lim.CatchAllTimeout {
		r.fail(ctx, p, fmt.Sprintf("the target pod %s did not run within %v (phase %s)", target.Name, lim.CatchAllTimeout, target.Status.Phase))
		return 0, nil
	}
	next := lim.CatchAllTimeout - age
	if target.Spec.NodeName == "" {
		setMigrationPhase(p.st, v1.MigrationScheduling, p.now)
		return min(next, max(lim.UnschedulableTimeout-age, 0)) + time.Second, nil
	}
	if target.Status.Phase != corev1.PodRunning {
		setMigrationPhase(p.st, v1.MigrationScheduled, p.now)
		return next + time.Second, nil
	}
	setMigrationPhase(p.st, v1.MigrationScheduled, p.now)
	return 0, r.handOff(ctx, p, cfg)
}

// start checks that the migration may begin now and creates its target
// pod; otherwise it stays Pending (or fails, if it never can).
func (r *MigrationReconciler) start(ctx context.Context, p *migrationPass, cfg ClusterConfig) (time.Duration, error) {
	m, vmi := p.m, p.vmi
	if !vmi.IsRunning() {
		r.fail(ctx, p, fmt.Sprintf("VMI %s is not running (phase %s)", vmi.Name, vmi.Status.Phase))
		return 0, nil
	}
	pvcs, syncErr := readPVCs(ctx, r.APIReader, vmi)
	if syncErr != nil {
		return 0, syncErr.err
	}
	if ok, reason, msg := vmispec.LiveMigratable(vmi.Annotations, &vmi.Spec, pvcs); !ok {
		r.fail(ctx, p, fmt.Sprintf("VMI %s is not live-migratable (%s): %s", vmi.Name, reason, msg))
		return 0, nil
	}
	all := &v1.VirtualMachineInstanceMigrationList{}
	if err := r.Client.List(ctx, all); err != nil {
		return 0, fmt.Errorf("listing migrations: %w", err)
	}
	lim := cfg.Limits()
	inCluster, fromNode := 0, 0
	for i := range all.Items {
		o := &all.Items[i]
		if o.UID == m.UID || o.IsFinal() {
			continue
		}
		if o.Namespace == m.Namespace && o.Spec.VMIName == m.Spec.VMIName && olderThan(o, m) {
			// One migration of a VMI at a time, oldest first.
			return migrationThrottledRequeue, nil
		}
		if o.Status.Phase == v1.MigrationPhaseUnset || o.Status.Phase == v1.MigrationPending {
			continue
		}
		inCluster++
		if o.Status.MigrationState != nil && o.Status.MigrationState.SourceNode == vmi.Status.NodeName {
			fromNode++
		}
	}
	if inCluster >= lim.PerCluster || fromNode >= lim.PerNode {
		if p.st.Phase == v1.MigrationPending && m.Status.Phase != v1.MigrationPending {
			r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, ReasonMigrationThrottled, "Migrate",
				"Waiting: %d migrations in flight in the cluster (limit %d), %d out of node %s (limit %d)", inCluster, lim.PerCluster, fromNode, vmi.Status.NodeName, lim.PerNode)
		}
		return migrationThrottledRequeue, nil
	}

	// The cache said there is no target pod; so must the API server.
	if pod, newer, err := r.liveTarget(ctx, m); err != nil || newer {
		return migrationCacheRequeue, err
	} else if pod != nil {
		p.target = pod
		setMigrationPhase(p.st, v1.MigrationScheduling, p.now)
		return 0, nil
	}
	pod, err := RenderMigrationTargetPod(vmi, m, r.Launcher, vmi.Status.NodeName, cfg.HasFeatureGate(FeatureGateSameNodeLiveMigration))
	if err != nil {
		r.fail(ctx, p, fmt.Sprintf("rendering the target pod: %v", err))
		return 0, nil
	}
	// The target mounts the (shared) claims the source has.
	if err := addDiskVolumes(pod, vmi, pvcs); err != nil {
		r.fail(ctx, p, fmt.Sprintf("the target pod's volumes: %v", err))
		return 0, nil
	}
	// The target gets the source's secondary networks (and their
	// resources), so the handler re-plumbs them before the guest runs.
	if err := addNetworks(ctx, r.APIReader, vmi, pod); err != nil {
		r.fail(ctx, p, fmt.Sprintf("the target pod's networks: %v", err))
		return 0, nil
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error creating the migration target pod: %v", err)
		return 0, fmt.Errorf("creating the target pod of migration %s/%s: %w", m.Namespace, m.Name, err)
	}
	r.Recorder.Eventf(m, pod, corev1.EventTypeNormal, ReasonSuccessfulCreate, "CreatePod", "Created migration target pod %s", pod.Name)
	p.target = pod
	p.st.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: m.UID, SourceNode: vmi.Status.NodeName, TargetPod: pod.Name}
	setMigrationPhase(p.st, v1.MigrationScheduling, p.now)
	return 0, nil
}

func olderThan(a, b *v1.VirtualMachineInstanceMigration) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// handOff writes the VMI's migrationState: from now on the handlers drive
// the migration (the target's prepares its launcher and says where it
// listens, the source's migrates to it).
func (r *MigrationReconciler) handOff(ctx context.Context, p *migrationPass, cfg ClusterConfig) error {
	m, vmi, target := p.m, p.vmi, p.target
	var source string
	if pods, err := r.vmiPods(ctx, vmi); err != nil {
		return err
	} else if sp := vmispec.ActiveLauncherPod(vmi, pods); sp != nil {
		source = sp.Name
	}
	lim := cfg.Limits()
	conf := &v1.MigrationConfiguration{
		ParallelMigrationsPerCluster:      ptr.To(uint32(lim.PerCluster)),
		ParallelOutboundMigrationsPerNode: ptr.To(uint32(lim.PerNode)),
		BandwidthPerMigration:             resource.NewQuantity(migrationBandwidth(m, lim), resource.BinarySI),
		CompletionTimeoutPerGiB:           ptr.To(lim.CompletionTimeoutPerGiB),
		ProgressTimeout:                   ptr.To(lim.ProgressTimeout),
		AllowAutoConverge:                 ptr.To(lim.AllowAutoConverge),
		AllowPostCopy:                     ptr.To(lim.AllowPostCopy),
	}
	orig := vmi.DeepCopy()
	vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{
		MigrationUID: m.UID,
		SourceNode:   vmi.Status.NodeName, SourcePod: source,
		TargetNode: target.Spec.NodeName, TargetPod: target.Name,
		MigrationConfiguration: conf,
	}
	if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("handing migration %s/%s to the handlers (VMI status): %w", m.Namespace, m.Name, err)
	}
	if err := r.setTargetNodeLabel(ctx, vmi, target.Spec.NodeName); err != nil {
		return err
	}
	r.Recorder.Eventf(m, target, corev1.EventTypeNormal, ReasonPreparingTarget, "Migrate",
		"Migrating VMI %s from node %s to pod %s on node %s", vmi.Name, vmi.Status.NodeName, target.Name, target.Spec.NodeName)
	p.st.MigrationState = vmi.Status.MigrationState.DeepCopy()
	setMigrationPhase(p.st, v1.MigrationPreparingTarget, p.now)
	return nil
}

// MigrationBandwidthAnnotation on a VirtualMachineInstanceMigration caps
// that migration's bandwidth (a quantity, bytes per second) below the
// cluster's bandwidthPerMigration: kubevmm's stand-in for a KubeVirt
// MigrationPolicy. It can only lower the cap.
const MigrationBandwidthAnnotation = "kubevmm.io/migration-bandwidth"

// migrationBandwidth is the cap for m: the cluster's, lowered by the
// migration's annotation if it has a valid one.
func migrationBandwidth(m *v1.VirtualMachineInstanceMigration, lim MigrationLimits) int64 {
	bw := lim.BandwidthBytesPerSecond
	if s, ok := m.Annotations[MigrationBandwidthAnnotation]; ok {
		if q, err := resource.ParseQuantity(s); err == nil && q.Value() > 0 && (bw == 0 || q.Value() < bw) {
			bw = q.Value()
		}
	}
	return bw
}

// succeed finishes a migration the source's handler saw complete: the
// target pod loses its target mark (it is the VMI's launcher pod now).
func (r *MigrationReconciler) succeed(ctx context.Context, p *migrationPass) error {
	if err := r.cleanupSucceeded(ctx, p); err != nil {
		return err
	}
	if p.st.Phase != v1.MigrationSucceeded {
		ms := p.st.MigrationState
		r.Recorder.Eventf(p.m, nil, corev1.EventTypeNormal, ReasonMigrationSucceeded, "Migrate",
			"VMI %s migrated from node %s to pod %s on node %s", p.m.Spec.VMIName, ms.SourceNode, ms.TargetPod, ms.TargetNode)
	}
	setMigrationPhase(p.st, v1.MigrationSucceeded, p.now)
	return nil
}

func (r *MigrationReconciler) cleanupSucceeded(ctx context.Context, p *migrationPass) error {
	for _, pod := range p.pods {
		if _, ok := pod.Labels[MigrationJobLabel]; !ok {
			continue
		}
		orig := pod.DeepCopy()
		delete(pod.Labels, MigrationJobLabel)
		if err := r.Client.Patch(ctx, pod, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("making %s the launcher pod of VMI %s: %w", pod.Name, p.m.Spec.VMIName, err)
		}
	}
	if p.vmi != nil {
		return r.setTargetNodeLabel(ctx, p.vmi, "")
	}
	return nil
}

// end ends the migration on this controller's initiative (why says what
// that is) and reports whether it has ended. Before the handoff, or when
// no handler will speak for the VMI any more (it is gone or final), it
// fails it at once. After the handoff the outcome is the source handler's:
// if it gave one, that is the outcome; if not, end asks it to abort
// (abortRequested) and reports false: the next pass after its answer
// ends the migration, failed or succeeded, as the handler saw it.
func (r *MigrationReconciler) end(ctx context.Context, p *migrationPass, why string) (bool, error) {
	ms := p.handedOff()
	switch {
	case ms == nil || p.vmi.IsFinal():
		if !r.fail(ctx, p, why) {
			return false, fmt.Errorf("the VMI's migration state changed meanwhile; deciding again")
		}
		return true, nil
	case ms.Completed && !ms.Failed:
		return true, r.succeed(ctx, p)
	case ms.Failed:
		reason := ms.FailureReason
		if reason == "" {
			reason = "the migration failed"
		}
		r.fail(ctx, p, reason)
		return true, nil
	}
	return false, r.requestAbort(ctx, p, why)
}

// requestAbort asks the source's handler to abort the migration it runs
// (or is about to start): migrationState.abortRequested on the VMI, with
// the optimistic lock (a handler that recorded something meanwhile makes
// this pass decide again), and the migration's migrationAbortRequested
// condition, which says why.
func (r *MigrationReconciler) requestAbort(ctx context.Context, p *migrationPass, why string) error {
	m, vmi := p.m, p.vmi
	if !vmi.Status.MigrationState.AbortRequested {
		orig := vmi.DeepCopy()
		vmi.Status.MigrationState.AbortRequested = true
		if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			p.vmi = orig
			if !apierrors.IsConflict(err) {
				// A conflict only means the handler wrote meanwhile: the
				// retry decides on what it wrote, nothing failed.
				r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ReasonFailedAbort, "Abort", "Failed to ask virt-handler to abort the migration of VMI %s: %v", vmi.Name, err)
			}
			return fmt.Errorf("asking for the abort of migration %s/%s (VMI status): %w", m.Namespace, m.Name, err)
		}
		r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, ReasonAbortRequested, "Abort", "Migration is ready to be canceled by virt-handler: %s", why)
	}
	p.st.MigrationState = vmi.Status.MigrationState.DeepCopy()
	p.st.Conditions = setMigrationCondition(p.st.Conditions, v1.VirtualMachineInstanceMigrationCondition{
		Type: v1.VirtualMachineInstanceMigrationAbortRequested, Status: corev1.ConditionTrue,
		Reason: ReasonAbortRequested, Message: why,
	}, p.now)
	return nil
}

// setMigrationCondition sets or replaces a migration condition; the
// transition time moves only with the status (idempotent passes).
func setMigrationCondition(conds []v1.VirtualMachineInstanceMigrationCondition, c v1.VirtualMachineInstanceMigrationCondition, now metav1.Time) []v1.VirtualMachineInstanceMigrationCondition {
	for i := range conds {
		if conds[i].Type != c.Type {
			continue
		}
		c.LastTransitionTime, c.LastProbeTime = conds[i].LastTransitionTime, conds[i].LastProbeTime
		if conds[i].Status != c.Status {
			c.LastTransitionTime = now
		}
		conds[i] = c
		return conds
	}
	c.LastTransitionTime, c.LastProbeTime = now, now
	return append(conds, c)
}

// fail ends the migration: the target pod goes; the VMI's migrationState,
// if it is this migration's and nobody gave a verdict yet, says it failed
// and why. The source's guest never stopped running. Errors of the
// clean-up are retried by the next pass (the migration is final, and
// final migrations are cleaned up until their finalizer goes). It reports
// false, changing nothing, when the VMI could not be told (it changed
// meanwhile: the next pass decides again on what it says then).
func (r *MigrationReconciler) fail(ctx context.Context, p *migrationPass, why string) bool {
	if ms := p.handedOff(); ms != nil && !ms.Completed && !ms.Failed {
		orig := p.vmi.DeepCopy()
		ms = p.vmi.Status.MigrationState
		ms.Failed, ms.FailureReason, ms.EndTimestamp = true, why, ptr.To(p.now)
		if err := r.Client.Status().Patch(ctx, p.vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			// Stale (the handler wrote meanwhile): decide again next pass.
			p.vmi = orig
			return false
		}
	}
	if ms := p.handedOff(); ms != nil {
		p.st.MigrationState = ms.DeepCopy()
	} else if p.st.MigrationState != nil {
		p.st.MigrationState.Failed, p.st.MigrationState.FailureReason = true, why
		p.st.MigrationState.EndTimestamp = ptr.To(p.now)
	}
	if p.st.Phase != v1.MigrationFailed {
		r.Recorder.Eventf(p.m, nil, corev1.EventTypeWarning, ReasonMigrationFailed, "Migrate", "Migration of VMI %s failed: %s", p.m.Spec.VMIName, why)
	}
	setMigrationPhase(p.st, v1.MigrationFailed, p.now)
	_ = r.cleanupFailed(ctx, p)
	return true
}

func (r *MigrationReconciler) cleanupFailed(ctx context.Context, p *migrationPass) error {
	for _, pod := range p.pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting target pod %s: %w", pod.Name, err)
		}
		r.Recorder.Eventf(p.m, pod, corev1.EventTypeNormal, ReasonSuccessfulDelete, "DeletePod", "Deleted migration target pod %s", pod.Name)
	}
	if p.vmi != nil && p.vmi.Labels[v1.MigrationTargetNodeNameLabel] != "" {
		if ms := p.vmi.Status.MigrationState; ms == nil || ms.MigrationUID == p.m.UID {
			return r.setTargetNodeLabel(ctx, p.vmi, "")
		}
	}
	return nil
}

// cleanup is the clean-up of a final (or deleted) migration, repeated
// until it holds.
func (r *MigrationReconciler) cleanup(ctx context.Context, p *migrationPass) error {
	// The finalizer goes once this holds: judge the VMI's labels on what
	// the API server says, not on a cache that may not have seen the
	// label the handoff wrote.
	if err := r.refreshVMI(ctx, p); err != nil {
		return err
	}
	if p.m.Status.Phase == v1.MigrationSucceeded {
		return r.cleanupSucceeded(ctx, p)
	}
	return r.cleanupFailed(ctx, p)
}

// refreshVMI replaces the pass's VMI by the API server's.
func (r *MigrationReconciler) refreshVMI(ctx context.Context, p *migrationPass) error {
	if p.vmi == nil {
		return nil
	}
	fresh := &v1.VirtualMachineInstance{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(p.vmi), fresh)
	switch {
	case apierrors.IsNotFound(err):
		p.vmi = nil
	case err != nil:
		return fmt.Errorf("reading VMI %s/%s: %w", p.m.Namespace, p.m.Spec.VMIName, err)
	default:
		p.vmi = fresh
	}
	return nil
}

// setTargetNodeLabel sets (or, with "", removes) the VMI's
// migrationTargetNodeName label.
func (r *MigrationReconciler) setTargetNodeLabel(ctx context.Context, vmi *v1.VirtualMachineInstance, node string) error {
	if vmi.Labels[v1.MigrationTargetNodeNameLabel] == node {
		return nil
	}
	orig := vmi.DeepCopy()
	if node == "" {
		delete(vmi.Labels, v1.MigrationTargetNodeNameLabel)
	} else {
		if vmi.Labels == nil {
			vmi.Labels = map[string]string{}
		}
		vmi.Labels[v1.MigrationTargetNodeNameLabel] = node
	}
	if err := r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("labelling VMI %s/%s with its migration target node: %w", vmi.Namespace, vmi.Name, err))
	}
	return nil
}

func (r *MigrationReconciler) writeStatus(ctx context.Context, p *migrationPass) error {
	was := p.m.Status.Phase
	if err := patch.Status(ctx, r.Client, p.m, &p.m.Status, *p.st, client.MergeFromWithOptimisticLock{}); err != nil {
		return err
	}
	if p.m.Status.Phase != was {
		log.FromContext(ctx).Info("migration phase changed", "from", was, "to", p.m.Status.Phase, "vmi", p.m.Spec.VMIName)
	}
	return nil
}

// createdTarget reports whether pod is the target pod this controller
// created for m: the one m's state names (written once it made it).
func createdTarget(m *v1.VirtualMachineInstanceMigration, pod *corev1.Pod) bool {
	ms := m.Status.MigrationState
	return ms != nil && ms.TargetPod != "" && pod.Name == ms.TargetPod
}

// liveTarget is m's target pod as the API server has it, or newer: the
// API server's migration names a target pod the cache's copy of m does not
// name yet. (The pass that made a target pod recorded its name in the
// migration, and a pod is only a target by that record: without this
// look a second pass on a stale cache made a second pod; seen in e2e.)
func (r *MigrationReconciler) liveTarget(ctx context.Context, m *v1.VirtualMachineInstanceMigration) (pod *corev1.Pod, newer bool, err error) {
	live, err := r.targetPods(ctx, r.APIReader, m)
	if err != nil || len(live) == 0 {
		return nil, false, err
	}
	for _, pod := range live {
		if createdTarget(m, pod) {
			return pod, false, nil
		}
	}
	fresh := &v1.VirtualMachineInstanceMigration{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(m), fresh); err != nil {
		return nil, false, fmt.Errorf("reading migration %s/%s: %w", m.Namespace, m.Name, err)
	}
	for _, pod := range live {
		if createdTarget(fresh, pod) {
			return nil, true, nil
		}
	}
	return nil, false, nil
}

// targetPods are the migration's target pods, oldest first.
func (r *MigrationReconciler) targetPods(ctx context.Context, reader client.Reader, m *v1.VirtualMachineInstanceMigration) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := reader.List(ctx, list, client.InNamespace(m.Namespace), client.MatchingLabels{MigrationJobLabel: string(m.UID)}); err != nil {
		return nil, fmt.Errorf("listing the target pods of migration %s/%s: %w", m.Namespace, m.Name, err)
	}
	// After a success the label is gone; the pod is still the one named
	// in the migration's state.
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out, nil
}

func (r *MigrationReconciler) vmiPods(ctx context.Context, vmi *v1.VirtualMachineInstance) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(vmi.Namespace), client.MatchingLabels{v1.CreatedByLabel: string(vmi.UID)}); err != nil {
		return nil, fmt.Errorf("listing the launcher pods of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	out := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// podEnd says how a pod ended, for messages.
func podEnd(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "deleted"
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("container %s: %s, exit code %d %s", cs.Name, t.Reason, t.ExitCode, t.Message)
		}
	}
	return "phase " + string(p.Status.Phase)
}

func setMigrationPhase(st *v1.VirtualMachineInstanceMigrationStatus, p v1.VirtualMachineInstanceMigrationPhase, now metav1.Time) {
	if st.Phase == p {
		return
	}
	st.Phase = p
	st.PhaseTransitionTimestamps = append(st.PhaseTransitionTimestamps,
		v1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: now})
}
