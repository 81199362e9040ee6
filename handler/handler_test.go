package handler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
)

func vmiWithPodNIC() *v1.VirtualMachineInstance {
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{UID: "uid-1"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain:   v1.DomainSpec{Devices: v1.Devices{Interfaces: []v1.Interface{{Name: "default", InterfaceBindingMethod: v1.InterfaceBindingMethod{Masquerade: &v1.InterfaceMasquerade{}}}}}},
			Networks: []v1.Network{{Name: "default", NetworkSource: v1.NetworkSource{Pod: &v1.PodNetwork{}}}},
		},
		Status: v1.VirtualMachineInstanceStatus{Phase: v1.Scheduled},
	}
}

func TestStatusFromInfo(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}}}
	vmi := vmiWithPodNIC()

	st := vmi.Status.DeepCopy()
	statusFromInfo(st, vmi, api.Info{State: vmispec.StateStarting}, pod, now)
	if st.Phase != v1.Scheduled {
		t.Fatalf("a starting launcher made the VMI %s", st.Phase)
	}

	statusFromInfo(st, vmi, api.Info{State: api.StatePaused, CPUs: 2, MemoryMiB: 128}, pod, now)
	if st.Phase != v1.Running || len(st.PhaseTransitionTimestamps) != 1 {
		t.Fatalf("phase %s (%v), want Running", st.Phase, st.PhaseTransitionTimestamps)
	}
	if c := (&v1.VirtualMachineInstance{Status: *st}).GetCondition(v1.VirtualMachineInstancePaused); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("no Paused condition: %+v", st.Conditions)
	}
	if len(st.Interfaces) != 1 || st.Interfaces[0].IP != "10.244.0.9" || st.Interfaces[0].MAC == "" {
		t.Fatalf("interfaces %+v", st.Interfaces)
	}
	if st.Memory == nil || st.Memory.GuestCurrent.String() != "128Mi" || st.CurrentCPUTopology.Sockets != 2 {
		t.Fatalf("memory %+v topology %+v", st.Memory, st.CurrentCPUTopology)
	}

	statusFromInfo(st, vmi, api.Info{State: api.StateRunning}, pod, now)
	if (&v1.VirtualMachineInstance{Status: *st}).GetCondition(v1.VirtualMachineInstancePaused) != nil {
		t.Fatal("Paused condition stays after resume")
	}

	end := st.DeepCopy()
	statusFromInfo(end, vmi, api.Info{State: api.StateStopped, Exit: "reset"}, pod, now)
	if end.Phase != v1.Succeeded {
		t.Fatalf("guest reboot (reboot=k): %s, want Succeeded", end.Phase)
	}
	end = st.DeepCopy()
	statusFromInfo(end, vmi, api.Info{State: api.StateStopped, Exit: "triple-fault", Error: "boom"}, pod, now)
	if end.Phase != v1.Failed {
		t.Fatalf("triple fault: %s, want Failed", end.Phase)
	}
}

func TestDevicePluginAllocate(t *testing.T) {
	p := &DevicePlugin{Resource: "devices.kubevirt.io/tun", DevPath: "/dev/null", Count: 3}
	if d := p.devices(); len(d) != 3 || d[0].Health != pluginapi.Healthy || d[0].ID == d[1].ID {
		t.Fatalf("devices %+v", d)
	}
	r, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"null0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ds := r.ContainerResponses[0].Devices
	if len(ds) != 1 || ds[0].HostPath != "/dev/null" || ds[0].ContainerPath != "/dev/null" || ds[0].Permissions != "rw" {
		t.Fatalf("allocation %+v", ds)
	}
	p.DevPath = "/dev/does-not-exist"
	if d := p.devices(); d[0].Health != pluginapi.Unhealthy {
		t.Fatal("missing device reported healthy")
	}
	if _, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"null0"}}}}); err == nil {
		t.Fatal("a missing device was allocated")
	}
}

// TestDevicePluginOptionalDevice: /dev/userfaultfd's resource is offered
// on a node without the device too, so launcher pods, which all request
// it, start there; they get no device node.
func TestDevicePluginOptionalDevice(t *testing.T) {
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"x0"}}}}
	for _, tc := range []struct {
		path string
		want []*pluginapi.DeviceSpec
	}{
		{"/dev/null", []*pluginapi.DeviceSpec{{ContainerPath: "/dev/null", HostPath: "/dev/null", Permissions: "rw"}}},
		{"/dev/does-not-exist", nil},
	} {
		p := &DevicePlugin{Resource: "devices.kubevirt.io/userfaultfd", DevPath: tc.path, Count: 2, Optional: true}
		d := p.devices()
		assert.Len(t, d, 2, tc.path)
		assert.Equal(t, pluginapi.Healthy, d[0].Health, tc.path)
		r, err := p.Allocate(context.Background(), req)
		require.NoError(t, err, tc.path)
		require.Len(t, r.ContainerResponses, 1)
		assert.Equal(t, tc.want, r.ContainerResponses[0].Devices, tc.path)
	}
}

func TestDecide(t *testing.T) {
	now := metav1.NewTime(time.Unix(10000, 0))
	running := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	failed := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}
	servesDHCP := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{
		Sysctls: []corev1.Sysctl{{Name: vmispec.UnprivilegedPortSysctl, Value: "67"}}}}, Status: running.Status}
	deletedAgo := func(d time.Duration, grace int64) func(*v1.VirtualMachineInstance) {
		return func(vmi *v1.VirtualMachineInstance) {
			at := metav1.NewTime(now.Add(-d))
			vmi.DeletionTimestamp = &at
			vmi.Spec.TerminationGracePeriodSeconds = &grace
		}
	}
	podBridge := func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}
	}
	for _, tc := range []struct {
		name     string
		mutate   func(*v1.VirtualMachineInstance)
		pod      *corev1.Pod
		info     api.Info
		live     bool
		answered bool

		want      plan // status is checked through phase and reason
		phase     v1.VirtualMachineInstancePhase
		reason    string
		hasStatus bool
	}{
		{name: "no answer yet: ask again soon", pod: running,
			want: plan{requeue: startingPoll}},
		{name: "no answer from an ended pod: the VMI failed", pod: failed,
			want: plan{quiet: true}, hasStatus: true, phase: v1.Failed, reason: ReasonLauncherFailed},
		{name: "starting: prepare the network", pod: running, info: api.Info{State: vmispec.StateStarting}, live: true, answered: true,
			want: plan{setupNetwork: true, requeue: startingPoll}, hasStatus: true, phase: v1.Scheduled},
		{name: "starting, from an exit record: no network for a gone launcher", pod: running, info: api.Info{State: vmispec.StateStarting}, answered: true,
			want: plan{requeue: startingPoll}, hasStatus: true, phase: v1.Scheduled},
		{name: "running", pod: running, info: api.Info{State: api.StateRunning}, live: true, answered: true,
			want: plan{requeue: runningPoll}, hasStatus: true, phase: v1.Running},
		{name: "the guest ended cleanly", pod: running, info: api.Info{State: api.StateStopped, Exit: "reset"}, live: true, answered: true,
			hasStatus: true, phase: v1.Succeeded},
		{name: "the guest crashed", pod: running, info: api.Info{State: api.StateStopped, Exit: "triple-fault"}, answered: true,
			hasStatus: true, phase: v1.Failed, reason: ReasonGuestFailed},
		{name: "migrated away: this end says nothing", pod: running, info: api.Info{State: api.StateMigrated}, live: true, answered: true},
		{name: "deleted, in its grace period: ask the guest, wait", mutate: deletedAgo(10*time.Second, 60), pod: running,
			info: api.Info{State: api.StateRunning}, live: true, answered: true,
			want: plan{shutdown: true, requeue: runningPoll}, hasStatus: true, phase: v1.Running},
		{name: "deleted, grace period nearly over: come back when it is", mutate: deletedAgo(59*time.Second, 60), pod: running,
			info: api.Info{State: api.StateRunning}, live: true, answered: true,
			want: plan{shutdown: true, requeue: time.Second}, hasStatus: true, phase: v1.Running},
		{name: "deleted, grace period over: stop the guest", mutate: deletedAgo(61*time.Second, 60), pod: running,
			info: api.Info{State: api.StateRunning}, live: true, answered: true,
			want: plan{shutdown: true, stopGuest: true, requeue: startingPoll}, hasStatus: true, phase: v1.Running},
		// A launcher pod of this version: its launcher serves DHCP.
		{name: "pod bridge, starting: the network (its DHCP is the launcher's)", mutate: podBridge, pod: servesDHCP, info: api.Info{State: vmispec.StateStarting}, live: true, answered: true,
			want: plan{setupNetwork: true, requeue: startingPoll}, hasStatus: true, phase: v1.Scheduled},
		{name: "pod bridge, running: nothing to do", mutate: podBridge, pod: servesDHCP, info: api.Info{State: api.StateRunning}, live: true, answered: true,
			want: plan{requeue: runningPoll}, hasStatus: true, phase: v1.Running},
		// One of an earlier version (no sysctl): virt-handler serves it.
		{name: "pod bridge, earlier launcher, starting: network and DHCP", mutate: podBridge, pod: running, info: api.Info{State: vmispec.StateStarting}, live: true, answered: true,
			want: plan{setupNetwork: true, serveDHCP: true, requeue: startingPoll}, hasStatus: true, phase: v1.Scheduled},
		{name: "pod bridge, earlier launcher, running: DHCP (again, after a handler restart)", mutate: podBridge, pod: running, info: api.Info{State: api.StateRunning}, live: true, answered: true,
			want: plan{serveDHCP: true, requeue: runningPoll}, hasStatus: true, phase: v1.Running},
		{name: "pod bridge, earlier launcher, no answer yet: the server stays", mutate: podBridge, pod: running,
			want: plan{requeue: startingPoll}},
		{name: "pod bridge, earlier launcher, the guest ended: no more DHCP", mutate: podBridge, pod: running, info: api.Info{State: api.StateStopped, Exit: "reset"}, live: true, answered: true,
			want: plan{stopDHCP: true}, hasStatus: true, phase: v1.Succeeded},
		{name: "pod bridge, earlier launcher, the pod ended: no more DHCP", mutate: podBridge, pod: failed,
			want: plan{quiet: true, stopDHCP: true}, hasStatus: true, phase: v1.Failed, reason: ReasonLauncherFailed},
		{name: "deleted, launcher not live: nothing to stop", mutate: deletedAgo(61*time.Second, 60), pod: running,
			info: api.Info{State: api.StateRunning}, answered: true,
			want: plan{requeue: runningPoll}, hasStatus: true, phase: v1.Running},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vmi := vmiWithPodNIC()
			if tc.mutate != nil {
				tc.mutate(vmi)
			}
			before := vmi.DeepCopy()
			got := decide(observation{vmi: vmi, pod: tc.pod, info: tc.info, live: tc.live, answered: tc.answered, now: now})
			assert.Equal(t, before, vmi, "decide changes nothing it was given")
			if !tc.hasStatus {
				assert.Nil(t, got.status)
				assert.Equal(t, tc.want, got)
				return
			}
			require.NotNil(t, got.status)
			assert.Equal(t, tc.phase, got.status.Phase)
			assert.Equal(t, tc.reason, got.status.Reason)
			got.status = nil
			assert.Equal(t, tc.want, got)
		})
	}
}
