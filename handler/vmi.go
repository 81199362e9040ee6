package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// Poll intervals. The launcher's control API has no event stream, so the
// handler asks: often while a launcher starts (a few seconds, and each
// question is one local HTTP request), less often once the guest runs (to
// notice its end). Both are what is read, never what is asserted.
const (
	startingPoll = 250 * time.Millisecond
	runningPoll  = 3 * time.Second
)

// Reasons of the conditions and events the handler writes.
const (
	ReasonPausedByUser   = "PausedByUser"
	ReasonStarted        = "Started"
	ReasonStopped        = "Stopped"
	ReasonShutdown       = "ShuttingDown"
	ReasonGuestFailed    = "GuestFailed"
	ReasonNetworkFailed  = "NetworkSetupFailed"
	ReasonLauncherFailed = "LauncherFailed"
)

// VMIReconciler is virt-handler's VMI loop: for every VMI on its node it
// asks the VMI's launcher (over the control socket in its pod's socket
// directory) what the guest does and writes that into the VMI status:
// phase Running/Succeeded/Failed, the Paused condition, interfaces, the
// active backend. It prepares the pod network the launcher waits for, and
// stops a deleted VMI's guest when its grace period is over.
//
// All it knows comes from the launchers and the API server, so a restarted
// handler simply reconciles every VMI again: the launchers run on,
// untouched, and the status is rebuilt from what they say.
type VMIReconciler struct {
	Client client.Client
	// APIReader reads what the manager's cache does not hold (the claims
	// of hot-plugged volumes).
	APIReader client.Reader
	NodeName  string
	// PodsDir is the kubelet's pods directory, where the launcher pods'
	// socket directories are (see socketDir).
	PodsDir string
	// PluginsDir is the kubelet's plugins directory, where CSI publishes
	// Block volumes for pods (hot-plugged volumes: openPublishedDevice).
	PluginsDir string
	Recorder   events.EventRecorder
	// Kick re-queues a VMI at once (after a pause/unpause the server did).
	Kick chan event.GenericEvent
	// MigrationTLS authenticates this handler to a migration target's.
	MigrationTLS *MigrationTLS
	// LauncherSocketDir is where a launcher sees its own socket directory
	// (empty: vmispec.SocketRootDir, as in its pod).
	LauncherSocketDir string
	// Now is the clock; tests leave it nil.
	Now func() time.Time

	mu      sync.Mutex
	pressed map[types.UID]bool // VMIs whose guest was asked to shut down
	proxies proxies            // the source ends of migration streams
	dhcp    dhcpServers        // for NICs bridge-bound on the pod network
}

// shutdownGuest asks the guest to shut down (through its agent when
// connected, else by the ACPI power button: the launcher decides), once
// per VMI (per handler: a restarted handler may ask once more).
func (r *VMIReconciler) shutdownGuest(ctx context.Context, vmi *v1.VirtualMachineInstance, l launcherConn) {
	r.mu.Lock()
	if r.pressed == nil {
		r.pressed = map[types.UID]bool{}
	}
	done := r.pressed[vmi.UID]
	r.pressed[vmi.UID] = true
	r.mu.Unlock()
	if done {
		return
	}
	qctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
	defer cancel()
	res, err := l.client().Shutdown(qctx)
	if err != nil {
		// the grace period runs anyway, and the guest is stopped after it
		log.FromContext(ctx).Info("asking the guest to shut down", "vmi", vmi.Name, "error", err)
		return
	}
	how := "Pressed the guest's ACPI power button"
	if res.Via == api.ShutdownViaAgent {
		how = "Asked the guest agent to shut the guest down"
	}
	r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonShutdown, "Shutdown", "%s", how)
}

// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=kubevirt.io,resources=virtualmachineinstances/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: VMIs on this node (the
// manager's cache only holds those), their launcher pods, and kicks.
func (r *VMIReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("virt-handler-vmi").
		For(&v1.VirtualMachineInstance{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if o.GetLabels()[v1.AppLabel] != "virt-launcher" {
				return nil
			}
			name := o.GetAnnotations()[v1.DomainAnnotation]
			if name == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
		}))
	if r.Kick != nil {
		b = b.WatchesRawSource(source.Channel(r.Kick, &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

func (r *VMIReconciler) now() metav1.Time {
	if r.Now != nil {
		return metav1.NewTime(r.Now())
	}
	return metav1.Now()
}

// Reconcile syncs one VMI with its launcher, in three steps: read (the
// VMI, its launcher pod, what its launcher says), decide (a pure function
// of what was read), write (the actions decided, then the status, once).
// A migration this node is the source of is driven first, by its own
// steps (see syncMigrationSource).
func (r *VMIReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, _ error) {
	logger := log.FromContext(ctx)
	vmi := &v1.VirtualMachineInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, vmi); err != nil {
		if apierrors.IsNotFound(err) {
			r.dhcp.stop(logger, req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vmi.Status.NodeName != r.NodeName {
		r.dhcp.stop(logger, req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if vmi.IsFinal() {
		r.dhcp.stop(logger, req.NamespacedName)
		return ctrl.Result{}, r.forgetFinal(ctx, vmi)
	}
	if vmi.Status.Phase != v1.Scheduled && vmi.Status.Phase != v1.Running {
		return ctrl.Result{}, nil
	}

	// Read.
	pod, err := r.launcherPod(ctx, vmi)
	if err != nil {
		return ctrl.Result{}, err
	}
	l := podLauncher(r.PodsDir, pod)
	info, live, err := l.info(ctx)
	obs := observation{vmi: vmi, pod: pod, info: info, live: live, answered: err == nil, now: r.now()}
	if err != nil && !errors.Is(err, errNoSocket) {
		logger.V(1).Info("launcher does not answer", "error", err.Error())
	}
	if obs.answered && live && hasHotplug(vmi) {
		obs.volumes, err = l.volumes(ctx)
		obs.volumesKnown = err == nil
		if err != nil {
			logger.Info("asking the launcher for its hot-plugged volumes", "error", err.Error())
		}
	}

	if obs.answered {
		// This node is the source of a migration in flight: drive it. Once
		// the guest runs on the target, this pass is over (the next one reads
		// the target's launcher).
		if ms := vmi.Status.MigrationState; ms != nil && ms.SourceNode == r.NodeName && ms.MigrationUID != "" && !ms.Completed && !ms.Failed {
			res, handedOver, err := r.syncMigrationSource(ctx, vmi, l, info, live)
			if err != nil || handedOver {
				return res, err
			}
			defer func() {
				if res.RequeueAfter > 0 && (result.RequeueAfter == 0 || res.RequeueAfter < result.RequeueAfter) {
					result.RequeueAfter = res.RequeueAfter
				}
			}()
		}

		// A migration of this source recorded failed while its stream still
		// runs (virt-controller fails one only before it started, so this is
		// a start whose request errored after the VMM began): stop the
		// stream, whose target pod goes. The VMM resumes the guest here,
		// unless the target confirmed it already.
		if ms := vmi.Status.MigrationState; ms != nil && ms.SourceNode == r.NodeName && ms.Failed && live && info.State == api.StateMigrating {
			qctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
			err := l.client().CancelMigration(qctx)
			cancel()
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("cancelling the failed migration of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
			}
			r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonMigrationFailed, "Migrate", "Cancelled the migration stream: %s", ms.FailureReason)
			return ctrl.Result{RequeueAfter: migrationPoll}, nil
		}
	}

	// Decide, then write.
	p := decide(obs)
	if err := r.apply(ctx, obs, l, p); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: p.requeue}, nil
}

// forgetFinal cleans up after a final VMI once its launcher pod is gone
// (the kubelet removes the pod's socket directory with it).
func (r *VMIReconciler) forgetFinal(ctx context.Context, vmi *v1.VirtualMachineInstance) error {
	pod, err := r.launcherPod(ctx, vmi)
	if err != nil || pod != nil {
		return err
	}
	r.mu.Lock()
	delete(r.pressed, vmi.UID)
	r.mu.Unlock()
	return nil
}

// observation is what one pass read.
type observation struct {
	vmi *v1.VirtualMachineInstance
	pod *corev1.Pod // the active launcher pod on this node, or nil
	// info is what the launcher said (live) or its exit record (!live);
	// answered is false when neither could be had.
	info     api.Info
	live     bool
	answered bool
	now      metav1.Time
	// volumes are the hot-plugged volumes the launcher has attached, when
	// volumesKnown (asked only of a live launcher whose VMI has some).
	volumes      []api.Volume
	volumesKnown bool
}

// plan is what one pass does, decided from an observation alone.
type plan struct {
	setupNetwork bool // prepare the pod network the starting launcher waits for
	// serveDHCP: the guest of a NIC bridge-bound on the pod network in
	// a launcher pod of an earlier version is served its lease
	// (legacydhcp.go; started if need be: a restarted handler);
	// stopDHCP: its guest or pod is gone.
	serveDHCP, stopDHCP bool
	shutdown            bool        // the VMI is deleted: ask the guest to shut down (agent or power button)
	hotplug             hotplugPlan // volumes to attach to or detach from the guest
	stopGuest           bool        // the VMI's grace period is over: stop the guest
	// status to write (with the backend annotation); nil: this launcher
	// does not speak for the VMI.
	status *v1.VirtualMachineInstanceStatus
	// quiet: no event for the phase change (the launcher said nothing the
	// event could repeat).
	quiet   bool
	requeue time.Duration
}

// decide is the handler's policy for one VMI.
func decide(o observation) plan {
	// Only a launcher from before the launchers served DHCP needs it.
	podBridge := false
	for _, n := range vmispec.PodNICs(&o.vmi.Spec) {
		podBridge = podBridge || n.PodBridge()
	}
	podBridge = podBridge && o.pod != nil && !vmispec.LauncherServesDHCP(o.pod)
	if !o.answered {
		// No answer. A pod that has ended will never give one: its guest
		// is gone, and nobody but us can say so.
		if o.pod != nil && vmispec.PodEnded(o.pod) {
			st := o.vmi.Status.DeepCopy()
			st.SetPhase(v1.Failed, o.now)
			st.Reason = ReasonLauncherFailed
			return plan{status: st, quiet: true, stopDHCP: podBridge}
		}
		return plan{requeue: startingPoll}
	}
	p := plan{serveDHCP: podBridge && o.live, stopDHCP: podBridge && !o.live}
	switch o.info.State {
	case api.State(vmispec.StateStarting):
		p.setupNetwork = o.live
		p.requeue = startingPoll
	case api.StateStopped:
		// final: nothing more to ask
		p.serveDHCP, p.stopDHCP = false, podBridge
	case api.StateMigrated:
		// A source whose guest left: the migration's pass (or, for an
		// older migration, nothing) speaks for the VMI, not this end.
		return plan{}
	default:
		p.requeue = runningPoll
		if o.volumesKnown && o.vmi.DeletionTimestamp == nil {
			p.hotplug = planHotplug(o.vmi, o.volumes)
		}
		if o.vmi.DeletionTimestamp != nil && o.live {
			// The guest is asked to shut down (agent or power button), gets its grace
			// period to power off, then it is stopped (see package
			// launcher).
			p.shutdown = true
			grace := time.Duration(vmispec.GracePeriodSeconds(&o.vmi.Spec)) * time.Second
			if left := o.vmi.DeletionTimestamp.Add(grace).Sub(o.now.Time); left > 0 {
				p.requeue = min(left, runningPoll)
			} else {
				p.stopGuest = true
				p.requeue = startingPoll
			}
		}
	}
	p.status = o.vmi.Status.DeepCopy()
	statusFromInfo(p.status, o.vmi, o.info, o.pod, o.now)
	return p
}

// apply carries out the plan: the actions on the launcher, then the VMI's
// backend annotation and status, and the event of a phase change.
func (r *VMIReconciler) apply(ctx context.Context, o observation, l launcherConn, p plan) error {
	vmi, info := o.vmi, o.info
	if p.setupNetwork {
		if err := r.setupNetwork(ctx, vmi, l); err != nil {
			r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonNetworkFailed, "SetupNetwork", "%v", err)
			return err
		}
	}
	if p.serveDHCP {
		if err := r.serveDHCP(ctx, vmi, l); err != nil {
			r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonNetworkFailed, "DHCP", "%v", err)
			return err
		}
	}
	if p.stopDHCP {
		r.dhcp.stop(log.FromContext(ctx), client.ObjectKeyFromObject(vmi))
	}
	if p.shutdown {
		r.shutdownGuest(ctx, vmi, l)
	}
	if p.stopGuest {
		qctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
		err := l.client().Stop(qctx)
		cancel()
		if err != nil {
			return fmt.Errorf("stopping the guest of deleted VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonShutdown, "Stop", "The grace period is over: the guest was stopped")
	}
	if p.status == nil {
		return nil
	}
	// A volume that failed to attach or detach is tried again on the next
	// pass (the error's backoff); the others' status is written first.
	var hotplugErr error
	if o.volumesKnown && p.status.Phase == v1.Running {
		attached := o.volumes
		if !p.hotplug.empty() {
			attached, hotplugErr = r.syncHotplug(ctx, vmi, o.pod, l, o.volumes, p.hotplug)
		}
		hotplugStatus(p.status, vmi, attached)
	}
	if err := r.syncBackendAnnotation(ctx, vmi, info); err != nil {
		return err
	}
	before := vmi.Status.Phase
	// Optimistic lock: virt-controller writes this status too.
	if err := patch.VMIStatus(ctx, r.Client, vmi, p.status); err != nil {
		return err
	}
	if after := vmi.Status.Phase; after != before {
		log.FromContext(ctx).Info("VMI phase changed", "from", before, "to", after, "reason", vmi.Status.Reason, "backend", info.Backend, "exit", info.Exit)
		switch after {
		case v1.Running:
			r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonStarted, "Start", "VirtualMachineInstance started on %s", info.Backend)
		case v1.Succeeded:
			r.Recorder.Eventf(vmi, nil, corev1.EventTypeNormal, ReasonStopped, "Stop", "The guest ended: %s", info.Exit)
		case v1.Failed:
			if p.quiet {
				break
			}
			why := info.Error
			if why == "" {
				why = info.Exit
			}
			r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonGuestFailed, "Stop", "The guest failed: %s", why)
		}
	}
	return hotplugErr
}

// statusFromInfo derives the status from what the launcher said.
func statusFromInfo(st *v1.VirtualMachineInstanceStatus, vmi *v1.VirtualMachineInstance, info api.Info, pod *corev1.Pod, now metav1.Time) {
	switch info.State {
	case api.State(vmispec.StateStarting):
		return
	case api.StateMigrated:
		// The guest runs elsewhere: this end says nothing about it.
		return
	case api.StateStopped:
		if info.Error != "" || vmispec.GuestExitFailed(info.Exit) {
			st.SetPhase(v1.Failed, now)
			st.Reason = ReasonGuestFailed
		} else {
			st.SetPhase(v1.Succeeded, now)
		}
		st.Conditions = v1.RemoveVMICondition(st.Conditions, v1.VirtualMachineInstancePaused)
		st.Conditions = v1.RemoveVMICondition(st.Conditions, v1.VirtualMachineInstanceAgentConnected)
		return
	}
	st.SetPhase(v1.Running, now)
	if info.State == api.StatePaused {
		st.Conditions = v1.SetVMICondition(st.Conditions, v1.VirtualMachineInstanceCondition{
			Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue,
			Reason: ReasonPausedByUser, Message: "VMI was paused by user",
		}, now)
	} else {
		st.Conditions = v1.RemoveVMICondition(st.Conditions, v1.VirtualMachineInstancePaused)
	}
	if info.CPUs > 0 {
		st.CurrentCPUTopology = &v1.CPUTopology{Sockets: uint32(info.CPUs), Cores: 1, Threads: 1}
		if c := vmi.Spec.Domain.CPU; c != nil && int(max(c.Sockets, 1)*max(c.Cores, 1)*max(c.Threads, 1)) == info.CPUs {
			st.CurrentCPUTopology = &v1.CPUTopology{Sockets: max(c.Sockets, 1), Cores: max(c.Cores, 1), Threads: max(c.Threads, 1)}
		}
	}
	if info.MemoryMiB > 0 {
		q := resource.NewQuantity(int64(info.MemoryMiB)<<20, resource.BinarySI)
		if st.Memory == nil {
			st.Memory = &v1.MemoryStatus{}
		}
		c1, c2 := q.DeepCopy(), q.DeepCopy()
		st.Memory.GuestAtBoot, st.Memory.GuestCurrent = q, &c1
		st.Memory.GuestRequested = &c2
	}
	st.Interfaces = interfaces(vmi, pod)
	agentStatus(st, info.GuestAgent, now)
}

// interfaces reports every NIC as KubeVirt does without a guest agent
// (infoSource "domain"): its name, MAC, link state and queues, the pod
// interface it is wired to; the NIC on the pod network has the pod's IPs
// (masquerade: behind them; bridge: the guest's own, by DHCP). A
// multus NIC whose pod interface Multus reports in the pod's
// network-status annotation adds "multus-status"; its addresses are the
// guest's own, which only the guest agent knows (mergeInterfaces).
func interfaces(vmi *v1.VirtualMachineInstance, pod *corev1.Pod) []v1.VirtualMachineInstanceNetworkInterface {
	var out []v1.VirtualMachineInstanceNetworkInterface
	attached := multusInterfaces(pod)
	for _, n := range vmispec.PodNICs(&vmi.Spec) {
		ifc := v1.VirtualMachineInstanceNetworkInterface{Name: n.Name, InfoSource: infoSourceDomain, PodInterfaceName: n.PodInterface,
			QueueCount: int32(n.Queues), LinkState: "up"}
		if n.LinkDown {
			ifc.LinkState = "down"
		}
		if n.TakesPodMAC() {
			ifc.MAC = podMAC(pod)
		} else if mac, err := n.MACFor(string(vmi.UID)); err == nil {
			ifc.MAC = mac.String()
		}
		if n.Multus != "" && attached[n.PodInterface] {
			ifc.InfoSource = infoSources(true, false, true)
		}
		if n.Multus == "" && pod != nil && pod.Status.PodIP != "" {
			ifc.IP = pod.Status.PodIP
			for _, ip := range pod.Status.PodIPs {
				ifc.IPs = append(ifc.IPs, ip.IP)
			}
		}
		out = append(out, ifc)
	}
	return out
}

// podMAC is the pod network interface's MAC as the pod's network-status
// annotation reports it (its CNI's, before virt-handler gave it to the
// guest: vmispec.PodNIC.TakesPodMAC); "" if it reports none.
func podMAC(pod *corev1.Pod) string {
	if pod == nil || pod.Annotations[nadv1.NetworkStatusAnnotation] == "" {
		return ""
	}
	var st []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(pod.Annotations[nadv1.NetworkStatusAnnotation]), &st); err != nil {
		return ""
	}
	for _, s := range st {
		if s.Default {
			return s.Mac
		}
	}
	return ""
}

// multusInterfaces are the pod interfaces of secondary networks that the
// pod's network-status annotation (written by Multus) reports. An
// annotation that does not parse reports none.
func multusInterfaces(pod *corev1.Pod) map[string]bool {
	out := map[string]bool{}
	if pod == nil || pod.Annotations[nadv1.NetworkStatusAnnotation] == "" {
		return out
	}
	var st []nadv1.NetworkStatus
	if err := json.Unmarshal([]byte(pod.Annotations[nadv1.NetworkStatusAnnotation]), &st); err != nil {
		return out
	}
	for _, s := range st {
		if !s.Default && s.Interface != "" {
			out[s.Interface] = true
		}
	}
	return out
}

// syncBackendAnnotation records the backend the launcher runs the guest
// on, and why.
func (r *VMIReconciler) syncBackendAnnotation(ctx context.Context, vmi *v1.VirtualMachineInstance, info api.Info) error {
	if info.Backend == "" || vmi.Annotations[vmispec.ActiveBackendAnnotation] == info.Backend && vmi.Annotations[vmispec.ActiveBackendReasonAnnotation] == info.BackendReason {
		return nil
	}
	orig := vmi.DeepCopy()
	if vmi.Annotations == nil {
		vmi.Annotations = map[string]string{}
	}
	vmi.Annotations[vmispec.ActiveBackendAnnotation] = info.Backend
	vmi.Annotations[vmispec.ActiveBackendReasonAnnotation] = info.BackendReason
	if err := r.Client.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("recording the backend of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// launcherPod is the VMI's active launcher pod (vmispec.ActiveLauncherPod),
// if it is on this node, among the pods virt-controller recorded as the
// VMI's (recordedLauncher). The cache holds this node's pods only.
func (r *VMIReconciler) launcherPod(ctx context.Context, vmi *v1.VirtualMachineInstance) (*corev1.Pod, error) {
	return activeLauncherPod(ctx, r.Client, r.NodeName, vmi)
}

func activeLauncherPod(ctx context.Context, c client.Reader, node string, vmi *v1.VirtualMachineInstance) (*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.InNamespace(vmi.Namespace), client.MatchingLabels{v1.CreatedByLabel: string(vmi.UID)}); err != nil {
		return nil, fmt.Errorf("listing the launcher pods of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	pods := make([]*corev1.Pod, 0, len(list.Items))
	for i := range list.Items {
		if p := &list.Items[i]; p.Spec.NodeName == node && recordedLauncher(vmi, p, node) {
			pods = append(pods, p)
		}
	}
	return vmispec.ActiveLauncherPod(vmi, pods), nil
}

// recordedLauncher reports whether virt-controller recorded pod as one of
// the VMI's launchers on this node: its UID, which the API server chose,
// in status.activePods, which no tenant can write. A label and an owner
// reference to the VMI are what the pod's creator chose; a tenant can put
// both on a pod of her own.
func recordedLauncher(vmi *v1.VirtualMachineInstance, pod *corev1.Pod, node string) bool {
	n, ok := vmi.Status.ActivePods[pod.UID]
	return ok && n == node
}

func (r *VMIReconciler) setupNetwork(ctx context.Context, vmi *v1.VirtualMachineInstance, l launcherConn) error {
	nics := vmispec.PodNICs(&vmi.Spec)
	if len(nics) == 0 {
		return nil
	}
	macs := make([]net.HardwareAddr, len(nics))
	for i, n := range nics {
		mac, err := n.MACFor(string(vmi.UID))
		if err != nil {
			return fmt.Errorf("VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
		}
		macs[i] = mac
	}
	proc, err := l.process(ctx)
	if err != nil {
		return fmt.Errorf("finding the launcher of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	defer proc.Close()
	ns, err := proc.netns()
	if err != nil {
		return fmt.Errorf("the launcher of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	defer ns.Close()
	if err := SetupPodNetwork(ns, nics, macs, vmispec.LauncherUID(vmi.UID)); err != nil {
		return fmt.Errorf("pod network of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return nil
}

// podLauncher is the connection to the launcher of pod (nil: none, which
// answers nothing), through the pod's socket directory.
func podLauncher(podsDir string, pod *corev1.Pod) launcherConn {
	l := launcherConn{dir: socketDir{podsDir: podsDir}}
	if pod != nil {
		l.dir.podUID = pod.UID
	}
	return l
}
