package handler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// Both ends of a live migration, as KubeVirt's virt-handler does them. The
// migration controller hands a migration over by writing the VMI's
// status.migrationState (source and target node and pod, the
// configuration); from there:
//
//   - the target's handler (MigrationTargetReconciler, driven by the target
//     pod on its node) reads the target launcher in its pod's own socket
//     directory and gives it its pod network, exactly as for any launcher,
//     and once the launcher
//     waits for the guest (state Incoming, on vmispec.MigrationInSocket)
//     opens its end of the stream (migration_proxy.go) and writes where:
//     migrationState.targetNodeAddress, this handler's pod IP, and the
//     proxy's port in targetDirectMigrationNodePorts;
//   - the source's handler (syncMigrationSource, part of the VMI loop)
//     then records the start (startTimestamp, mode), opens its end of the
//     stream and tells its launcher to migrate into it (vmm/api Migrate to
//     vmispec.MigrationOutSocket, with the bandwidth cap and timeouts of the
//     configuration), follows it, and writes the verdict:
//     completed (the VMI's node becomes the target's; the source's VMM,
//     whose guest left, is stopped and its launcher exits) or failed (the
//     VMM resumed its guest; the reason is recorded).
//
// Only the source's handler gives the verdict once the controller handed
// the migration over: the VMM's migration commits when the target confirms
// the guest, and from then on the source never resumes it. So when
// virt-controller wants a migration ended (it was deleted, its VMI is being
// deleted) it sets migrationState.abortRequested, as in KubeVirt, and the
// source's handler answers with what it observes: not started yet, it
// fails it without starting; running, it cancels the VMM's migration
// (abortStatus Aborting) and then records the VMM's result, failed with
// abortStatus Succeeded (the guest stayed here) or completed with
// abortStatus Failed (the target had confirmed it: too late to abort).
//
// The stream goes from launcher to handler over a unix socket, between
// the handlers over TLS with both ends authenticated as virt-handler, as
// in KubeVirt: no launcher listens on the network, and whatever else
// connects to the target's port is refused (migration_proxy.go).

// Event reasons on the VMI, as KubeVirt's handler spells them.
const (
	ReasonMigrating       = "Migrating"
	ReasonMigrated        = "Migrated"
	ReasonMigrationFailed = "MigrationFailed"
)

// abortedReason is the failure reason of a migration aborted at
// virt-controller's request (the migration's migrationAbortRequested
// condition says why it asked).
const abortedReason = "the migration was aborted at virt-controller's request"

// migrationPoll is how often the source asks its launcher how the
// migration goes (the control API has no event stream).
const migrationPoll = 500 * time.Millisecond

// syncMigrationSource drives the source end. handedOver is true when the
// guest now runs on the target and the VMI was updated to say so: the
// caller's pass ends there.
func (r *VMIReconciler) syncMigrationSource(ctx context.Context, vmi *v1.VirtualMachineInstance, l launcherConn, info api.Info, live bool) (res ctrl.Result, handedOver bool, err error) {
	ms := vmi.Status.MigrationState
	c := l.client()
	if info.State == api.StateMigrated {
		// The target confirmed the guest (a launcher is Migrated only
		// then). Whatever this handler saw before, that is the verdict.
		var st api.MigrationStatus
		if live {
			qctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
			st, _ = c.Migration(qctx)
			cancel()
		}
		if err := r.stopMigratedSource(ctx, vmi, l, live); err != nil {
			return ctrl.Result{}, false, err
		}
		return ctrl.Result{}, true, r.completeMigration(ctx, vmi, st)
	}
	if ms.AbortRequested && ms.StartTimestamp == nil {
		// Not started, and now it never will be: the start is recorded
		// with the optimistic lock, so a start that raced this request
		// made this pass read again and take the branch below instead.
		return ctrl.Result{}, false, r.failMigration(ctx, vmi, abortedReason+" before it started")
	}
	if ms.TargetNodeAddress == "" {
		// The target is not ready yet; its handler writes the address.
		return ctrl.Result{}, false, nil
	}
	if ms.StartTimestamp == nil {
		if !live {
			return ctrl.Result{}, false, nil
		}
		if info.State != api.StateRunning {
			return ctrl.Result{}, false, r.failMigration(ctx, vmi, fmt.Sprintf("the guest is %s, not running: only a running guest is migrated", info.State))
		}
		return r.startMigration(ctx, vmi, l)
	}
	if !live {
		// Mid-migration and the launcher is gone: so is the guest; the
		// VMI's own status says so (the pod ended).
		return ctrl.Result{}, false, r.failMigration(ctx, vmi, "the source launcher ended during the migration")
	}
	qctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
	st, err := c.Migration(qctx)
	cancel()
	if err != nil {
		return ctrl.Result{}, false, fmt.Errorf("migration status of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	switch {
	case st.Active && st.Stats.PostCopy:
		// Past the point of no return: the guest runs on the target and
		// neither side can give it up (an abort is too late now, as after
		// the commit). KubeVirt says so with the mode.
		if ms.Mode == v1.MigrationPostCopy {
			return ctrl.Result{RequeueAfter: migrationPoll}, false, nil
		}
		return ctrl.Result{RequeueAfter: migrationPoll}, false, r.patchMigrationState(ctx, vmi, func(ms *v1.VirtualMachineInstanceMigrationState) {
			ms.Mode = v1.MigrationPostCopy
		})
	case st.Active && ms.AbortRequested:
		return ctrl.Result{RequeueAfter: migrationPoll}, false, r.abortMigration(ctx, vmi, l)
	case st.Active:
		return ctrl.Result{RequeueAfter: migrationPoll}, false, nil
	case st.Stats.Phase == "completed":
		// Migrated: the state above catches it on the next read; read it now.
		if err := r.stopMigratedSource(ctx, vmi, l, true); err != nil {
			return ctrl.Result{}, false, err
		}
		return ctrl.Result{}, true, r.completeMigration(ctx, vmi, st)
	case st.Stats.Phase == "":
		return ctrl.Result{}, false, r.failMigration(ctx, vmi, "the migration was recorded as started but the source launcher never began it (virt-handler restarted in between)")
	default:
		why := st.Stats.Error
		if why == "" {
			why = "the migration ended in phase " + st.Stats.Phase
		}
		if st.Stats.PostCopy {
			return ctrl.Result{}, false, r.loseGuest(ctx, vmi, l, why)
		}
		if ms.AbortRequested {
			why = abortedReason + ": " + why
		}
		return ctrl.Result{}, false, r.failMigration(ctx, vmi, why)
	}
}

// startMigration records the start and asks the source launcher to
// migrate through a TLS proxy to the target's handler.
func (r *VMIReconciler) startMigration(ctx context.Context, vmi *v1.VirtualMachineInstance, l launcherConn) (ctrl.Result, bool, error) {
	ms := vmi.Status.MigrationState
	c := l.client()
	// Recorded before the launcher is asked, with the optimistic lock:
	// the controller may be failing the migration at this moment, and
	// only one of us may win. A start that is recorded but never
	// reached the launcher is found by syncMigrationSource, which fails
	// the migration.
	now := metav1.NewTime(r.now().Time)
	if err := r.patchMigrationState(ctx, vmi, func(ms *v1.VirtualMachineInstanceMigrationState) {
		ms.StartTimestamp, ms.Mode = &now, v1.MigrationPreCopy
	}); err != nil {
		return ctrl.Result{}, false, err
	}
	req := migrateRequest(vmi)
	target := strings.TrimPrefix(req.To, "tcp:")
	logger := log.FromContext(ctx)
	if _, err := r.proxies.get(sourceProxyKey(ms), func() (*migrationProxy, error) {
		return listenSource(l.dir, vmispec.LauncherUID(vmi.UID), target, string(ms.MigrationUID), r.MigrationTLS.Client,
			func(f string, a ...any) { logger.Info(fmt.Sprintf(f, a...)) })
	}); err != nil {
		return ctrl.Result{}, false, r.failMigration(ctx, vmi, err.Error())
	}
	req.To = "unix:" + filepath.Join(r.launcherSocketDir(), vmispec.MigrationOutSocket)
	qctx, cancel := context.WithTimeout(ctx, time.Minute) // includes the connect
	err := c.Migrate(qctx, req)
	cancel()
	if err != nil {
		return ctrl.Result{}, false, r.failMigration(ctx, vmi, fmt.Sprintf("starting the migration to %s: %v", target, err))
	}
	r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonMigrating, "Migrate",
		"Migrating to pod %s on node %s (%s, over TLS between the handlers)", ms.TargetPod, ms.TargetNode, target)
	return ctrl.Result{RequeueAfter: migrationPoll}, false, nil
}

// loseGuest records a migration that failed in post-copy: the guest's
// memory was split between the two sides and neither can run it any more
// (KubeVirt's post-copy has the same risk). The source VMM, which kept
// the guest paused, is stopped; its launcher then ends and the VMI fails
// with it.
func (r *VMIReconciler) loseGuest(ctx context.Context, vmi *v1.VirtualMachineInstance, l launcherConn, why string) error {
	r.proxies.drop(sourceProxyKey(vmi.Status.MigrationState))
	qctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
	err := l.client().Stop(qctx)
	cancel()
	if err != nil {
		return fmt.Errorf("stopping the source of VMI %s/%s after its post-copy migration failed: %w", vmi.Namespace, vmi.Name, err)
	}
	now := metav1.NewTime(r.now().Time)
	if err := r.patchMigrationState(ctx, vmi, func(ms *v1.VirtualMachineInstanceMigrationState) {
		ms.Failed, ms.FailureReason, ms.EndTimestamp = true, why, &now
		if ms.AbortRequested {
			ms.AbortStatus = v1.MigrationAbortFailed
		}
	}); err != nil {
		return err
	}
	r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonMigrationFailed, "Migrate",
		"Migration to %s failed in post-copy; the guest is lost: %s", vmi.Status.MigrationState.TargetNode, why)
	return nil
}

// abortMigration cancels the VMM's migration virt-controller wants ended.
// It asks on every pass while the migration runs (a cancel is cheap and
// idempotent in the VMM) and says so once (abortStatus Aborting). The
// outcome is not decided here: the VMM either resumes the guest (the
// migration then reads failed) or had its commit confirmed already
// (completed), and the next pass records which.
func (r *VMIReconciler) abortMigration(ctx context.Context, vmi *v1.VirtualMachineInstance, l launcherConn) error {
	qctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
	err := l.client().CancelMigration(qctx)
	cancel()
	var apiErr *api.Error
	if err != nil && (!errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict) {
		// A conflict is a migration that ended meanwhile: its outcome
		// is read on the next pass.
		return fmt.Errorf("aborting the migration of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	if vmi.Status.MigrationState.AbortStatus == v1.MigrationAbortInProgress {
		return nil
	}
	if err := r.patchMigrationState(ctx, vmi, func(ms *v1.VirtualMachineInstanceMigrationState) {
		ms.AbortStatus = v1.MigrationAbortInProgress
	}); err != nil {
		return err
	}
	r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonMigrating, "Abort", "VirtualMachineInstance is aborting migration.")
	return nil
}

// migrateRequest is the launcher's migrate request from the VMI's
// migrationState: the target's address and the configuration's limits.
func migrateRequest(vmi *v1.VirtualMachineInstance) api.MigrateRequest {
	ms := vmi.Status.MigrationState
	port := vmispec.MigrationPort
	for p := range ms.TargetDirectMigrationNodePorts {
		if n, err := strconv.Atoi(p); err == nil && n > 0 {
			port = n
		}
	}
	req := api.MigrateRequest{To: "tcp:" + net.JoinHostPort(ms.TargetNodeAddress, strconv.Itoa(port))}
	if c := ms.MigrationConfiguration; c != nil {
		if c.BandwidthPerMigration != nil {
			if b := c.BandwidthPerMigration.Value(); b > 0 {
				// The VMM takes MiB/s; never round a cap away.
				req.BandwidthMBps = max(1, b>>20)
			}
		}
		if c.ProgressTimeout != nil {
			req.ProgressTimeout = *c.ProgressTimeout
		}
		if c.CompletionTimeoutPerGiB != nil {
			req.Timeout = int64(vmispec.CompletionTimeout(&vmi.Spec, *c.CompletionTimeoutPerGiB).Seconds())
		}
		req.AutoConverge = ptr.Deref(c.AllowAutoConverge, false)
		req.PostCopy = ptr.Deref(c.AllowPostCopy, false)
	}
	return req
}

// stopMigratedSource ends the source VMM whose guest left; its launcher
// then exits.
func (r *VMIReconciler) stopMigratedSource(ctx context.Context, vmi *v1.VirtualMachineInstance, l launcherConn, live bool) error {
	if !live {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
	defer cancel()
	if err := l.client().Stop(qctx); err != nil {
		return fmt.Errorf("stopping the migrated source of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// completeMigration records the verdict: the guest runs on the target
// node now (virt-controller moves the VMI's node label after it).
func (r *VMIReconciler) completeMigration(ctx context.Context, vmi *v1.VirtualMachineInstance, st api.MigrationStatus) error {
	ms := vmi.Status.MigrationState
	r.proxies.drop(sourceProxyKey(ms))
	target := ms.TargetNode
	now := metav1.NewTime(r.now().Time)
	orig := vmi.DeepCopy()
	vmi.Status.MigrationState.Completed = true
	vmi.Status.MigrationState.EndTimestamp = &now
	if st.Stats.PostCopy {
		// A post-copy phase shorter than a poll was never seen running.
		vmi.Status.MigrationState.Mode = v1.MigrationPostCopy
	}
	if vmi.Status.MigrationState.AbortRequested {
		// Asked too late: the target had confirmed the guest.
		vmi.Status.MigrationState.AbortStatus = v1.MigrationAbortFailed
	}
	vmi.Status.NodeName = target
	if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("recording the completed migration of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	log.FromContext(ctx).Info("migration completed: the guest runs on the target", "migration", ms.MigrationUID, "targetNode", target, "targetPod", ms.TargetPod)
	msg := fmt.Sprintf("The VirtualMachineInstance migrated to node %s (pod %s)", target, ms.TargetPod)
	if s := st.Stats; s.Phase == "completed" {
		msg += fmt.Sprintf(" in %v: %d rounds, %.1f MiB sent, downtime %v",
			s.Total.Round(time.Millisecond), s.Rounds, float64(s.BytesSent)/(1<<20), s.Downtime.Round(time.Microsecond))
	}
	r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonMigrated, "Migrate", "%s", msg)
	return nil
}

// failMigration records that the migration failed and why; the guest
// keeps running here.
func (r *VMIReconciler) failMigration(ctx context.Context, vmi *v1.VirtualMachineInstance, why string) error {
	r.proxies.drop(sourceProxyKey(vmi.Status.MigrationState))
	now := metav1.NewTime(r.now().Time)
	if err := r.patchMigrationState(ctx, vmi, func(ms *v1.VirtualMachineInstanceMigrationState) {
		ms.Failed, ms.FailureReason, ms.EndTimestamp = true, why, &now
		if ms.AbortRequested {
			// The guest stayed here: whatever ended the migration, the
			// abort that was asked for holds.
			ms.AbortStatus = v1.MigrationAbortSucceeded
		}
	}); err != nil {
		return err
	}
	log.FromContext(ctx).Info("migration failed: the guest stays here", "migration", vmi.Status.MigrationState.MigrationUID, "targetNode", vmi.Status.MigrationState.TargetNode, "reason", why)
	r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonMigrationFailed, "Migrate", "Migration to %s failed, the guest keeps running here: %s", vmi.Status.MigrationState.TargetNode, why)
	return nil
}

// sourceProxyKey names the source end of a migration's stream.
func sourceProxyKey(ms *v1.VirtualMachineInstanceMigrationState) string {
	return "source/" + string(ms.MigrationUID)
}

// launcherSocketDir is where a launcher sees its own socket directory.
func (r *VMIReconciler) launcherSocketDir() string {
	if r.LauncherSocketDir != "" {
		return r.LauncherSocketDir
	}
	return vmispec.SocketRootDir
}

func (r *VMIReconciler) patchMigrationState(ctx context.Context, vmi *v1.VirtualMachineInstance, f func(*v1.VirtualMachineInstanceMigrationState)) error {
	orig := vmi.DeepCopy()
	f(vmi.Status.MigrationState)
	if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("updating the migration state of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// MigrationTargetReconciler is the target end: it follows the migration
// target pods on this node (until the migration controller unmarks a pod
// whose migration succeeded: from then on it is an ordinary launcher pod
// and VMIReconciler's). It reads the VMI from the API server, not from the
// cache: the cache holds this node's VMIs, and the VMI is still the
// source node's.
type MigrationTargetReconciler struct {
	Client    client.Client
	APIReader client.Reader
	NodeName  string
	PodsDir   string // the kubelet's pods directory (see socketDir)
	Recorder  events.EventRecorder
	// PodIP is this handler's address: the source's handler connects to
	// Migrations there, on MigrationPort.
	PodIP      string
	Migrations *MigrationServer
	// Now is the clock; tests leave it nil.
	Now func() time.Time
}

// SetupWithManager registers the reconciler for the target pods on this
// node (the manager's pod cache holds this node's pods only).
func (r *MigrationTargetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("virt-handler-migration-target").
		For(&corev1.Pod{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, ok := o.GetLabels()[v1.MigrationJobLabel]
			return ok
		}))).
		Complete(r)
}

// Reconcile prepares one target launcher and reports it ready.
func (r *MigrationTargetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			r.Migrations.Forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !vmispec.IsMigrationTarget(pod) || pod.Spec.NodeName != r.NodeName || vmispec.PodDown(pod) {
		// The migration is over for this pod: no stream may come for it.
		r.Migrations.Forget(req.String())
		return ctrl.Result{}, nil
	}
	vmi := &v1.VirtualMachineInstance{}
	name := pod.Annotations[v1.DomainAnnotation]
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, vmi); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if string(vmi.UID) != pod.Labels[v1.CreatedByLabel] {
		return ctrl.Result{}, nil
	}
	if handed, wait := handedTo(vmi, pod, r.NodeName); !handed {
		// Nothing is done for a pod virt-controller has not handed the
		// migration to: one a tenant labels as a target gets no network
		// set up, no stream expected, no status written.
		if wait {
			return ctrl.Result{RequeueAfter: notHandedPoll(pod, r.now().Time)}, nil
		}
		return ctrl.Result{}, nil
	}
	l := podLauncher(r.PodsDir, pod)
	info, live, err := l.info(ctx)
	if err != nil {
		if !errors.Is(err, errNoSocket) {
			logger.V(1).Info("migration target launcher does not answer", "error", err.Error())
		}
		return ctrl.Result{RequeueAfter: startingPoll}, nil
	}
	ms := vmi.Status.MigrationState
	mine := ms != nil && string(ms.MigrationUID) == pod.Labels[v1.MigrationJobLabel] && !ms.Completed && !ms.Failed
	switch info.State {
	case api.State(vmispec.StateStarting):
		if live {
			if err := (&VMIReconciler{NodeName: r.NodeName}).setupNetwork(ctx, vmi, l); err != nil {
				r.Recorder.Eventf(vmi, pod, corev1.EventTypeWarning, ReasonNetworkFailed, "SetupNetwork", "migration target pod %s: %v", pod.Name, err)
				return ctrl.Result{}, err
			}
		}
		return ctrl.Result{RequeueAfter: startingPoll}, nil
	case api.StateIncoming:
		if !mine {
			// Not handed over yet: look again.
			return ctrl.Result{RequeueAfter: startingPoll}, nil
		}
		// On every pass, not once: a restarted handler must expect the
		// stream again before the source's handler connects.
		r.Migrations.Expect(string(ms.MigrationUID), req.String(), l.dir)
		if ms.TargetNodeAddress != "" {
			return ctrl.Result{RequeueAfter: startingPoll}, nil
		}
		orig := vmi.DeepCopy()
		vmi.Status.MigrationState.TargetNodeAddress = r.PodIP
		vmi.Status.MigrationState.TargetDirectMigrationNodePorts = map[string]int{strconv.Itoa(vmispec.HandlerMigrationPort): 0}
		if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("reporting the migration target of VMI %s/%s ready: %w", vmi.Namespace, vmi.Name, err)
		}
		// Next: the guest arrives (Running), or the migration fails.
		return ctrl.Result{RequeueAfter: startingPoll}, nil
	case api.StateRunning, api.StatePaused:
		if mine && !ms.TargetNodeDomainDetected {
			now := r.now()
			orig := vmi.DeepCopy()
			vmi.Status.MigrationState.TargetNodeDomainDetected = true
			vmi.Status.MigrationState.TargetNodeDomainReadyTimestamp = &now
			if err := r.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
				return ctrl.Result{}, fmt.Errorf("reporting the migrated guest of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
			}
		}
		if mine {
			// Until the source's verdict and the controller unmark the pod.
			return ctrl.Result{RequeueAfter: startingPoll}, nil
		}
	}
	return ctrl.Result{}, nil
}

func (r *MigrationTargetReconciler) now() metav1.Time {
	if r.Now != nil {
		return metav1.NewTime(r.Now())
	}
	return metav1.Now()
}

// Until virt-controller hands a target pod its migration, the pod is
// looked at again every startingPoll while it is younger than
// handoffWindow (the handoff comes seconds after it runs), then every
// lateHandoffPoll: a pod a tenant labelled as a target is never handed
// anything, and would otherwise cost an API read four times a second for
// as long as it exists.
const (
	handoffWindow   = 2 * time.Minute
	lateHandoffPoll = 10 * time.Second
)

func notHandedPoll(pod *corev1.Pod, now time.Time) time.Duration {
	if now.Sub(pod.CreationTimestamp.Time) < handoffWindow {
		return startingPoll
	}
	return lateHandoffPoll
}

// handedTo reports whether virt-controller handed the VMI's migration to
// the target pod on this node: the VMI's migrationState names the pod's
// migration and the pod, and status.activePods holds the pod's UID. No
// tenant writes the VMI's status, nor chooses a pod's UID. wait: not yet,
// but it may be (the handoff comes once the pod runs, its UID at the
// controller's next pass).
func handedTo(vmi *v1.VirtualMachineInstance, pod *corev1.Pod, node string) (handed, wait bool) {
	ms := vmi.Status.MigrationState
	if ms == nil || string(ms.MigrationUID) != pod.Labels[v1.MigrationJobLabel] {
		return false, true // an older migration's state: not handed off yet
	}
	if ms.TargetPod != pod.Name || ms.Completed || ms.Failed {
		return false, false
	}
	return recordedLauncher(vmi, pod, node), true
}
