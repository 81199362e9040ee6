package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// WorkloadUpdater moves running VMIs onto virt-controller's current
// launcher image after an update, as KubeVirt's workload updater does. It
// reconciles the installation's KubeVirt CR; each pass:
//
//   - labels each running VMI whose active launcher pod's compute
//     container runs another image with v1.OutdatedLauncherImageLabel, and
//     removes the label from one whose launcher is current;
//   - writes their number to the CR's
//     status.outdatedVirtualMachineInstanceWorkloads;
//   - once the installation is deployed at its target version (phase
//     Deployed, observed version = target), per the CR's
//     spec.workloadUpdateStrategy: LiveMigrate creates a migration
//     (annotated v1.WorkloadUpdateMigrationAnnotation) for each outdated
//     migratable VMI, Evict deletes the outdated VMIs that cannot migrate
//     (all of them without LiveMigrate), at most batchEvictionSize of both
//     per batchEvictionInterval (planWorkloadUpdate). No methods: VMIs are
//     only marked.
//
// The batch budget is counted from what the last interval left: the
// updater's migrations created in it as the API server lists them (not a
// cache that could lag one just made; after a restart they are all this
// process knows), and the migrations and evictions this process made in
// it. A migration deleted before its interval ends still counts, as in
// KubeVirt, whose budget is a rate limiter: cancelling a workload-update
// migration must not start another at once.
type WorkloadUpdater struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	Launcher  LauncherConfig
	// Now is the clock; tests leave it nil.
	Now func() time.Time

	mu sync.Mutex
	// done holds, per KubeVirt CR, when this process migrated or evicted
	// each object (by the migration's or the evicted VMI's UID).
	done map[types.UID]map[types.UID]time.Time
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubevirt.io,resources=kubevirts/status,verbs=get;patch
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstancemigrations,verbs=create
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=delete

// SetupWithManager registers the updater: the KubeVirt CRs, and every
// change of a VMI, a launcher pod or a migration mapped to them.
func (r *WorkloadUpdater) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		l := &v1.KubeVirtList{}
		if err := mgr.GetClient().List(ctx, l); err != nil {
			logf.FromContext(ctx).Error(err, "listing KubeVirt CRs")
			return nil
		}
		out := make([]reconcile.Request, 0, len(l.Items))
		for _, kv := range l.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&kv)})
		}
		return out
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("workload-updater").
		For(&v1.KubeVirt{}).
		Watches(&v1.VirtualMachineInstance{}, all).
		Watches(&corev1.Pod{}, all, builder.WithPredicates(predicate.NewPredicateFuncs(isLauncherPod))).
		Watches(&v1.VirtualMachineInstanceMigration{}, all).
		Complete(r)
}

func (r *WorkloadUpdater) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// updateVMI is one running VMI as the updater sees it.
type updateVMI struct {
	Key types.NamespacedName
	// Known: its active launcher pod was found; Outdated: that pod runs
	// another launcher image.
	Known, Outdated bool
	// Labelled: it carries v1.OutdatedLauncherImageLabel.
	Labelled   bool
	Migratable bool
	// Migrating: an unfinished migration of it exists.
	Migrating bool
}

// updateInput is what planWorkloadUpdate decides from.
type updateInput struct {
	VMIs     []updateVMI
	Strategy v1.KubeVirtWorkloadUpdateStrategy
	// Deployed: the installation runs its target version.
	Deployed bool
	// Recent are when the updater's migrations and evictions happened
	// (those older than the interval do not count).
	Recent []time.Time
	Now    time.Time
	// UIDs are the VMIs' UIDs, for the record of evictions.
	UIDs map[types.NamespacedName]types.UID
}

// updatePlan is what a pass does.
type updatePlan struct {
	Label, Unlabel []types.NamespacedName
	Outdated       int
	Migrate, Evict []types.NamespacedName
	// Requeue: outdated VMIs wait for the next batch, due then.
	Requeue time.Duration
}

// planWorkloadUpdate is the updater's decision, a pure function.
func planWorkloadUpdate(in updateInput) updatePlan {
	var p updatePlan
	var migrate, evict []types.NamespacedName
	lm := slices.Contains(in.Strategy.WorkloadUpdateMethods, v1.WorkloadUpdateMethodLiveMigrate)
	ev := slices.Contains(in.Strategy.WorkloadUpdateMethods, v1.WorkloadUpdateMethodEvict)
	for _, v := range in.VMIs {
		outdated := v.Labelled
		if v.Known {
			outdated = v.Outdated
			switch {
			case v.Outdated && !v.Labelled:
				p.Label = append(p.Label, v.Key)
			case !v.Outdated && v.Labelled:
				p.Unlabel = append(p.Unlabel, v.Key)
			}
		}
		if !outdated {
			continue
		}
		p.Outdated++
		switch {
		case v.Migrating:
		case lm && v.Migratable:
			migrate = append(migrate, v.Key)
		case ev:
			evict = append(evict, v.Key)
		}
	}
	if !in.Deployed || len(migrate)+len(evict) == 0 {
		return p
	}
	size := in.Strategy.BatchEvictionSize
	interval := in.Strategy.BatchEvictionInterval
	budget, every := v1.DefaultBatchEvictionSize, v1.DefaultBatchEvictionInterval.Duration
	if size != nil {
		budget = *size
	}
	if interval != nil {
		every = interval.Duration
	}
	var oldest time.Time
	for _, t := range in.Recent {
		if t.After(in.Now.Add(-every)) {
			budget--
			if oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		}
	}
	byName := func(s []types.NamespacedName) {
		sort.Slice(s, func(i, j int) bool { return s[i].String() < s[j].String() })
	}
	byName(migrate)
	byName(evict)
	if n := min(max(budget, 0), len(migrate)); n > 0 {
		p.Migrate, budget = migrate[:n], budget-n
	}
	if n := min(max(budget, 0), len(evict)); n > 0 {
		p.Evict = evict[:n]
	}
	if len(p.Migrate)+len(p.Evict) < len(migrate)+len(evict) {
		// The next batch: when the oldest of this interval's leaves it (a
		// batch made now leaves a full interval).
		if oldest.IsZero() {
			oldest = in.Now
		}
		p.Requeue = max(oldest.Add(every).Sub(in.Now), time.Second)
	}
	return p
}

// Reconcile is one pass over the installation's VMIs.
func (r *WorkloadUpdater) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return quiet(ctx)(r.reconcile(ctx, req))
}

func (r *WorkloadUpdater) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	kv := &v1.KubeVirt{}
	if err := r.Client.Get(ctx, req.NamespacedName, kv); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Only the installation: virt-operator ignores another CR.
	if c := kv.GetCondition(v1.KubeVirtConditionSynchronized); kv.DeletionTimestamp != nil || (c != nil && c.Status == corev1.ConditionFalse) {
		return ctrl.Result{}, nil
	}
	in, err := r.observe(ctx, kv)
	if err != nil {
		return ctrl.Result{}, err
	}
	p := planWorkloadUpdate(in)
	for _, k := range p.Label {
		if err := r.setOutdatedLabel(ctx, k, true); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("launcher outdated", "vmi", k.String(), "image", r.Launcher.Image)
	}
	for _, k := range p.Unlabel {
		if err := r.setOutdatedLabel(ctx, k, false); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("launcher current", "vmi", k.String())
	}
	if n := kv.Status.OutdatedVirtualMachineInstanceWorkloads; n == nil || *n != p.Outdated {
		orig := kv.DeepCopy()
		kv.Status.OutdatedVirtualMachineInstanceWorkloads = &p.Outdated
		if err := r.Client.Status().Patch(ctx, kv, client.MergeFrom(orig)); err != nil {
			return ctrl.Result{}, fmt.Errorf("writing status.outdatedVirtualMachineInstanceWorkloads of KubeVirt %s: %w", kv.Name, err)
		}
	}
	for _, k := range p.Migrate {
		m := &v1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, GenerateName: "kubevirt-workload-update-",
			Annotations: map[string]string{v1.WorkloadUpdateMigrationAnnotation: ""}}, Spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: k.Name}}
		if err := r.Client.Create(ctx, m); err != nil {
			return ctrl.Result{}, fmt.Errorf("creating a migration of VMI %s for the workload update: %w", k, err)
		}
		r.record(kv.UID, m.UID, in.Now)
		log.Info("workload update: migrating", "vmi", k.String(), "migration", m.Name)
		r.Recorder.Eventf(m, nil, corev1.EventTypeNormal, ReasonSuccessfulCreate, "WorkloadUpdate",
			"Created migration %s of VMI %s onto launcher image %s", m.Name, k.Name, r.Launcher.Image)
	}
	for _, k := range p.Evict {
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
		if err := r.Client.Delete(ctx, vmi); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("evicting VMI %s for the workload update: %w", k, err)
		}
		r.record(kv.UID, in.UIDs[k], in.Now)
		log.Info("workload update: evicted", "vmi", k.String())
	}
	return ctrl.Result{RequeueAfter: p.Requeue}, nil
}

// observe reads the VMIs, their launcher pods, the migrations and the
// recent batch.
func (r *WorkloadUpdater) observe(ctx context.Context, kv *v1.KubeVirt) (updateInput, error) {
	now := r.now()
	in := updateInput{Strategy: kv.Spec.WorkloadUpdateStrategy, Now: now,
		Deployed: kv.Status.Phase == v1.KubeVirtPhaseDeployed && kv.Status.ObservedKubeVirtVersion == kv.Status.TargetKubeVirtVersion &&
			kv.Status.ObservedKubeVirtRegistry == kv.Status.TargetKubeVirtRegistry}
	vmis := &v1.VirtualMachineInstanceList{}
	if err := r.Client.List(ctx, vmis); err != nil {
		return in, fmt.Errorf("listing VMIs: %w", err)
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.MatchingLabels{v1.AppLabel: LauncherLabelValue}); err != nil {
		return in, fmt.Errorf("listing launcher pods: %w", err)
	}
	byVMI := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		byVMI[p.Labels[v1.CreatedByLabel]] = append(byVMI[p.Labels[v1.CreatedByLabel]], p)
	}
	// Migrations from the API server: one this updater just created must
	// count, in the batch and as the VMI's migration in flight.
	migs := &v1.VirtualMachineInstanceMigrationList{}
	if err := r.APIReader.List(ctx, migs); err != nil {
		return in, fmt.Errorf("listing migrations: %w", err)
	}
	every := v1.DefaultBatchEvictionInterval.Duration
	if i := in.Strategy.BatchEvictionInterval; i != nil {
		every = i.Duration
	}
	recent := r.recent(kv.UID, now.Add(-every))
	migrating := map[types.NamespacedName]bool{}
	for _, m := range migs.Items {
		if !m.IsFinal() {
			migrating[types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}] = true
		}
		if _, ok := m.Annotations[v1.WorkloadUpdateMigrationAnnotation]; ok {
			if _, mine := recent[m.UID]; !mine {
				recent[m.UID] = m.CreationTimestamp.Time
			}
		}
	}
	for _, t := range recent {
		in.Recent = append(in.Recent, t)
	}
	in.UIDs = map[types.NamespacedName]types.UID{}
	for i := range vmis.Items {
		vmi := &vmis.Items[i]
		if !vmi.IsRunning() || vmi.DeletionTimestamp != nil {
			continue
		}
		k := client.ObjectKeyFromObject(vmi)
		in.UIDs[k] = vmi.UID
		_, labelled := vmi.Labels[v1.OutdatedLauncherImageLabel]
		c := vmi.GetCondition(v1.VirtualMachineInstanceIsMigratable)
		u := updateVMI{Key: k, Labelled: labelled, Migratable: c != nil && c.Status == corev1.ConditionTrue,
			Migrating: migrating[k] || (vmi.Status.MigrationState != nil && !vmi.Status.MigrationState.Completed && !vmi.Status.MigrationState.Failed)}
		if pod := vmispec.ActiveLauncherPod(vmi, byVMI[string(vmi.UID)]); pod != nil {
			for _, ct := range pod.Spec.Containers {
				if ct.Name == ComputeContainerName {
					u.Known, u.Outdated = true, ct.Image != r.Launcher.Image
				}
			}
		}
		in.VMIs = append(in.VMIs, u)
	}
	return in, nil
}

// setOutdatedLabel adds or removes the VMI's outdated-launcher label (a
// merge patch with optimistic locking: virt-handler writes the VMI too).
func (r *WorkloadUpdater) setOutdatedLabel(ctx context.Context, k types.NamespacedName, outdated bool) error {
	vmi := &v1.VirtualMachineInstance{}
	if err := r.Client.Get(ctx, k, vmi); err != nil {
		return client.IgnoreNotFound(err)
	}
	orig := vmi.DeepCopy()
	if outdated {
		if vmi.Labels == nil {
			vmi.Labels = map[string]string{}
		}
		vmi.Labels[v1.OutdatedLauncherImageLabel] = ""
	} else {
		delete(vmi.Labels, v1.OutdatedLauncherImageLabel)
	}
	if err := r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("labelling VMI %s: %w", k, err)
	}
	return nil
}

// record notes that this process migrated or evicted uid at t for the
// KubeVirt CR kv.
func (r *WorkloadUpdater) record(kv, uid types.UID, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = map[types.UID]map[types.UID]time.Time{}
	}
	if r.done[kv] == nil {
		r.done[kv] = map[types.UID]time.Time{}
	}
	r.done[kv][uid] = t
}

// recent forgets what this process did for kv before since and returns a
// copy of the rest.
func (r *WorkloadUpdater) recent(kv types.UID, since time.Time) map[types.UID]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[types.UID]time.Time{}
	for uid, t := range r.done[kv] {
		if t.Before(since) {
			delete(r.done[kv], uid)
			continue
		}
		out[uid] = t
	}
	if len(r.done[kv]) == 0 {
		delete(r.done, kv)
	}
	return out
}
