package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Pure functions, tested without an API server.

func TestLauncherResources(t *testing.T) {
	gi := resource.MustParse
	tests := []struct {
		name    string
		domain  v1.DomainSpec
		wantMem string // request, bytes as a quantity string
		wantLim string // "" = no memory limit
		wantCPU string
		wantErr string
	}{
		{
			name:    "guest memory plus overhead, default CPU per vCPU",
			domain:  v1.DomainSpec{Memory: &v1.Memory{Guest: ptr.To(gi("1Gi"))}, CPU: &v1.CPU{Sockets: 2, Cores: 2}},
			wantMem: "1154Mi", // 1024 + 96 fixed + 4*8 per vCPU + 1024/512
			wantCPU: "400m",
		},
		{
			name:    "request defines guest memory",
			domain:  v1.DomainSpec{Resources: v1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: gi("512Mi"), corev1.ResourceCPU: gi("2")}}},
			wantMem: "617Mi", // 512 + 96 + 8 + 1
			wantCPU: "2",
		},
		{
			name: "limit raised by the overhead too; CPU request from limit",
			domain: v1.DomainSpec{Resources: v1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: gi("1Gi"), corev1.ResourceCPU: gi("1")},
			}},
			wantMem: "1130Mi", wantLim: "1130Mi", wantCPU: "1",
		},
		{
			name: "overcommitGuestOverhead leaves the overhead out of the request",
			domain: v1.DomainSpec{Memory: &v1.Memory{Guest: ptr.To(gi("1Gi"))},
				Resources: v1.ResourceRequirements{OvercommitGuestOverhead: true}},
			wantMem: "1Gi", wantCPU: "100m",
		},
		{
			name:    "no memory at all",
			domain:  v1.DomainSpec{},
			wantErr: "no guest memory",
		},
		{
			name: "request above limit",
			domain: v1.DomainSpec{Resources: v1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: gi("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: gi("1Gi")},
			}},
			wantErr: "exceeds limit",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", UID: "u"}, Spec: v1.VirtualMachineInstanceSpec{Domain: tc.domain}}
			pod, err := RenderLauncherPod(vmi, LauncherConfig{Image: "img"})
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			r := pod.Spec.Containers[0].Resources
			val := func(l corev1.ResourceList, n corev1.ResourceName) int64 { q := l[n]; return q.MilliValue() }
			want := func(s string) int64 { q := gi(s); return q.MilliValue() }
			assert.Equal(t, want(tc.wantMem), val(r.Requests, corev1.ResourceMemory), "memory request")
			if tc.wantLim == "" {
				assert.NotContains(t, r.Limits, corev1.ResourceMemory)
			} else {
				assert.Equal(t, want(tc.wantLim), val(r.Limits, corev1.ResourceMemory), "memory limit")
			}
			assert.Equal(t, want(tc.wantCPU), val(r.Requests, corev1.ResourceCPU), "cpu request")
			assert.Equal(t, want("1"), val(r.Limits, v1.KVMResource))
			assert.Equal(t, want("1"), val(r.Limits, v1.TunResource))
			assert.Equal(t, want("1"), val(r.Limits, v1.UserfaultfdResource))
			assert.Equal(t, corev1.PullIfNotPresent, pod.Spec.Containers[0].ImagePullPolicy)
			assert.Equal(t, ptr.To(v1.DefaultGracePeriodSeconds+LauncherGraceMargin), pod.Spec.TerminationGracePeriodSeconds)
			assert.Equal(t, ptr.To(false), pod.Spec.AutomountServiceAccountToken)
		})
	}
}

func TestPrintableStatus(t *testing.T) {
	now := metav1.Now()
	vmiIn := func(p v1.VirtualMachineInstancePhase, conds ...v1.VirtualMachineInstanceCondition) *v1.VirtualMachineInstance {
		return &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: "vmi"}, Status: v1.VirtualMachineInstanceStatus{Phase: p, Conditions: conds}}
	}
	deleting := vmiIn(v1.Running)
	deleting.DeletionTimestamp = &now
	vmDeleting := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}
	uid := types.UID("vmi")
	tests := []struct {
		name     string
		vm       *v1.VirtualMachine
		vmi      *v1.VirtualMachineInstance
		strategy v1.VirtualMachineRunStrategy
		st       v1.VirtualMachineStatus
		stopping bool
		want     v1.VirtualMachinePrintableStatus
	}{
		{name: "no VMI", want: v1.VirtualMachineStatusStopped},
		{name: "VM deleted", vm: vmDeleting, vmi: vmiIn(v1.Running), want: v1.VirtualMachineStatusTerminating},
		{name: "VMI deleted", vmi: deleting, want: v1.VirtualMachineStatusStopping},
		{name: "stop issued this pass", vmi: vmiIn(v1.Running), stopping: true, want: v1.VirtualMachineStatusStopping},
		{name: "stop requested", vmi: vmiIn(v1.Running), st: v1.VirtualMachineStatus{StateChangeRequests: []v1.VirtualMachineStateChangeRequest{{Action: v1.StopRequest, UID: &uid}}}, want: v1.VirtualMachineStatusStopping},
		{name: "running", vmi: vmiIn(v1.Running), want: v1.VirtualMachineStatusRunning},
		{name: "paused", vmi: vmiIn(v1.Running, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue}), want: v1.VirtualMachineStatusPaused},
		{name: "just created", vmi: vmiIn(""), want: v1.VirtualMachineStatusStarting},
		{name: "scheduled", vmi: vmiIn(v1.Scheduled), want: v1.VirtualMachineStatusStarting},
		{name: "unschedulable", vmi: vmiIn(v1.Scheduling, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstancePodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}), want: v1.VirtualMachineStatusUnschedulable},
		{name: "image pull backoff", vmi: vmiIn(v1.Scheduled, v1.VirtualMachineInstanceCondition{Type: v1.VirtualMachineInstanceSynchronized, Status: corev1.ConditionFalse, Reason: ReasonImagePullBackOff}), want: v1.VirtualMachineStatusImagePullBackOff},
		{name: "ended", vmi: vmiIn(v1.Succeeded), want: v1.VirtualMachineStatusStopped},
		{name: "crash loop", strategy: v1.RunStrategyAlways, st: v1.VirtualMachineStatus{StartFailure: &v1.VirtualMachineStartFailure{ConsecutiveFailCount: 2}}, want: v1.VirtualMachineStatusCrashLoopBackOff},
		{name: "no crash loop under Manual", strategy: v1.RunStrategyManual, st: v1.VirtualMachineStatus{StartFailure: &v1.VirtualMachineStartFailure{ConsecutiveFailCount: 2}}, want: v1.VirtualMachineStatusStopped},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := tc.vm
			if vm == nil {
				vm = &v1.VirtualMachine{}
			}
			assert.Equal(t, tc.want, printableStatus(vm, tc.vmi, tc.strategy, &tc.st, tc.stopping))
		})
	}
}

func TestTrimStateChangeRequest(t *testing.T) {
	a, b := types.UID("a"), types.UID("b")
	vmiA := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: a}}
	endedA := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: a}, Status: v1.VirtualMachineInstanceStatus{Phase: v1.Failed}}
	stop := func(u *types.UID) v1.VirtualMachineStateChangeRequest {
		return v1.VirtualMachineStateChangeRequest{Action: v1.StopRequest, UID: u}
	}
	start := v1.VirtualMachineStateChangeRequest{Action: v1.StartRequest}
	tests := []struct {
		name string
		reqs []v1.VirtualMachineStateChangeRequest
		vmi  *v1.VirtualMachineInstance
		want int // requests left
	}{
		{name: "stop of the running VMI waits", reqs: []v1.VirtualMachineStateChangeRequest{stop(&a), start}, vmi: vmiA, want: 2},
		{name: "stop done once the VMI is gone", reqs: []v1.VirtualMachineStateChangeRequest{stop(&a), start}, want: 1},
		{name: "stop of another VMI is stale", reqs: []v1.VirtualMachineStateChangeRequest{stop(&b)}, vmi: vmiA, want: 0},
		{name: "stop without UID is dropped", reqs: []v1.VirtualMachineStateChangeRequest{stop(nil)}, vmi: vmiA, want: 0},
		{name: "start done once a VMI runs", reqs: []v1.VirtualMachineStateChangeRequest{start}, vmi: vmiA, want: 0},
		{name: "start waits while there is none", reqs: []v1.VirtualMachineStateChangeRequest{start}, want: 1},
		{name: "start waits while the old one is final", reqs: []v1.VirtualMachineStateChangeRequest{start}, vmi: endedA, want: 1},
		{name: "only the first request is considered", reqs: []v1.VirtualMachineStateChangeRequest{start, stop(&b)}, vmi: vmiA, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &v1.VirtualMachineStatus{StateChangeRequests: tc.reqs}
			trimStateChangeRequest(st, tc.vmi)
			assert.Len(t, st.StateChangeRequests, tc.want)
		})
	}
}

func TestStartBackoff(t *testing.T) {
	for count, min := range map[int]time.Duration{1: 10 * time.Second, 2: 40 * time.Second, 3: 90 * time.Second, 10: 300 * time.Second} {
		d := startBackoff(count)
		assert.GreaterOrEqual(t, d, min, "count %d", count)
		assert.LessOrEqual(t, d, 300*time.Second, "count %d", count)
	}
}

func TestSyncStartFailure(t *testing.T) {
	now := metav1.Now()
	failedEarly := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: "a"}, Status: v1.VirtualMachineInstanceStatus{Phase: v1.Failed}}
	st := &v1.VirtualMachineStatus{}
	syncStartFailure(st, failedEarly, v1.RunStrategyAlways, now)
	require.NotNil(t, st.StartFailure)
	assert.Equal(t, 1, st.StartFailure.ConsecutiveFailCount)
	syncStartFailure(st, failedEarly, v1.RunStrategyAlways, now)
	assert.Equal(t, 1, st.StartFailure.ConsecutiveFailCount, "the same VMI counts once")

	stopped := failedEarly.DeepCopy()
	stopped.UID = "b"
	stopped.DeletionTimestamp = &now
	syncStartFailure(st, stopped, v1.RunStrategyAlways, now)
	assert.Equal(t, 1, st.StartFailure.ConsecutiveFailCount, "a deleted VMI did not crash")

	ran := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: "c"}, Status: v1.VirtualMachineInstanceStatus{
		Phase:                     v1.Failed,
		PhaseTransitionTimestamps: []v1.VirtualMachineInstancePhaseTransitionTimestamp{{Phase: v1.Running}, {Phase: v1.Failed}},
	}}
	syncStartFailure(st, ran, v1.RunStrategyAlways, now)
	assert.Nil(t, st.StartFailure, "a guest that ran resets the count")
}

func TestDecideVMIStatus(t *testing.T) {
	now := metav1.NewTime(time.Unix(5000, 0))
	pod := func(node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{UID: "pod-1"},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: ComputeContainerName, Image: "launcher:1"}}},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	deleted := metav1.NewTime(now.Add(-time.Second))
	for _, tc := range []struct {
		name        string
		phase       v1.VirtualMachineInstancePhase
		deleted     bool
		pod, target *corev1.Pod
		syncErr     *syncError

		wantPhase  v1.VirtualMachineInstancePhase
		wantNode   string
		wantActive map[types.UID]string
		wantSync   string // reason of Synchronized=False, "" for none
	}{
		{name: "new, no pod yet", wantPhase: v1.Pending},
		{name: "pod created, not bound", phase: v1.Pending, pod: pod("", corev1.PodPending),
			wantPhase: v1.Scheduling, wantActive: map[types.UID]string{"pod-1": ""}},
		{name: "pod bound", phase: v1.Scheduling, pod: pod("node-a", corev1.PodPending),
			wantPhase: v1.Scheduled, wantNode: "node-a", wantActive: map[types.UID]string{"pod-1": "node-a"}},
		{name: "pod ended before the handler took over", phase: v1.Scheduled, pod: pod("node-a", corev1.PodFailed),
			wantPhase: v1.Failed},
		{name: "pod gone while scheduling", phase: v1.Scheduling, wantPhase: v1.Failed},
		{name: "running, pod ended: the handler reports that", phase: v1.Running, pod: pod("node-a", corev1.PodSucceeded),
			wantPhase: v1.Running},
		{name: "running, pod vanished", phase: v1.Running, wantPhase: v1.Failed},
		{name: "deleted before it got a pod", phase: v1.Pending, deleted: true, wantPhase: v1.Failed},
		{name: "migrating: both pods are active", phase: v1.Running, pod: pod("node-a", corev1.PodRunning),
			target:    &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "pod-2"}, Spec: corev1.PodSpec{NodeName: "node-b"}},
			wantPhase: v1.Running, wantActive: map[types.UID]string{"pod-1": "node-a", "pod-2": "node-b"}},
		{name: "a sync failure shows", phase: v1.Pending, syncErr: &syncError{reason: ReasonFailedCreate, err: assert.AnError},
			wantPhase: v1.Pending, wantSync: ReasonFailedCreate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: tc.phase}}
			if tc.deleted {
				vmi.DeletionTimestamp = &deleted
			}
			before := vmi.DeepCopy()
			st := decideVMIStatus(vmi, tc.pod, tc.target, nil, tc.syncErr, now)
			assert.Equal(t, before, vmi, "decide changes nothing it was given")
			assert.Equal(t, tc.wantPhase, st.Phase)
			assert.Equal(t, tc.wantNode, st.NodeName)
			assert.Equal(t, tc.wantActive, st.ActivePods)
			sync := (&v1.VirtualMachineInstance{Status: *st}).GetCondition(v1.VirtualMachineInstanceSynchronized)
			if tc.wantSync == "" {
				assert.Nil(t, sync)
			} else if assert.NotNil(t, sync) {
				assert.Equal(t, tc.wantSync, sync.Reason)
				assert.Equal(t, corev1.ConditionFalse, sync.Status)
			}
			ready := (&v1.VirtualMachineInstance{Status: *st}).GetCondition(v1.VirtualMachineInstanceReady)
			if assert.NotNil(t, ready, "Ready is always set") {
				assert.Equal(t, corev1.ConditionFalse, ready.Status, "no pod here is Ready")
			}
		})
	}
}
