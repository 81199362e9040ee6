package handler

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

func TestCgroupOfPod(t *testing.T) {
	const uid = types.UID("11aee43f-4711-413e-b816-7431c377a424")
	for _, tc := range []struct {
		name, cgroup string
		want         bool
	}{
		{"cgroupfs driver, v1 and v2 lines", "9:name=systemd:/kubepods/burstable/pod11aee43f-4711-413e-b816-7431c377a424/3bdd\n" +
			"4:memory:/kubepods/burstable/pod11aee43f-4711-413e-b816-7431c377a424/3bdd\n0::/kubepods/burstable/pod11aee43f-4711-413e-b816-7431c377a424/3bdd\n", true},
		{"guaranteed QoS", "0::/kubepods/pod11aee43f-4711-413e-b816-7431c377a424/abc\n", true},
		{"systemd driver", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod11aee43f_4711_413e_b816_7431c377a424.slice/cri-containerd-abc.scope\n", true},
		{"v1 beside an unused unified hierarchy", "4:memory:/kubepods/pod11aee43f-4711-413e-b816-7431c377a424/abc\n0::/\n", true},
		{"another pod", "0::/kubepods/burstable/pod22aee43f-4711-413e-b816-7431c377a424/3bdd\n", false},
		{"the pod in one hierarchy only", "4:memory:/kubepods/pod11aee43f-4711-413e-b816-7431c377a424/abc\n3:pids:/user.slice\n", false},
		{"a UID as a prefix of a longer name", "0::/kubepods/pod11aee43f-4711-413e-b816-7431c377a424x/abc\n", false},
		{"the node's own process", "0::/system.slice/containerd.service\n", false},
		{"nothing", "", false},
		{"garbage", "kubepods/pod11aee43f-4711-413e-b816-7431c377a424", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, cgroupOfPod([]byte(tc.cgroup), uid))
		})
	}
	assert.False(t, cgroupOfPod([]byte("0::/kubepods/pod/abc\n"), ""), "no pod UID matches nothing")
}

// TestLauncherProcessOutsideItsPod: a process that serves a pod's control
// socket but is not in that pod's cgroup (here: the test, as a launcher
// of another pod that left its PID behind would be) is refused, and
// nothing is opened in its namespaces.
func TestLauncherProcessOutsideItsPod(t *testing.T) {
	d, _ := testSocketDir(t)
	l, err := d.listen(vmispec.ControlSocket, unix.Getuid(), unix.Getgid())
	require.NoError(t, err)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, err = launcherConn{dir: d}.process(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not in the cgroup of pod p")
}

// TestLauncherProcessExited: once the process a pidfd holds has exited,
// nothing more is opened for it, whoever has its PID by then.
func TestLauncherProcessExited(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	require.NoError(t, err)
	p := &launcherProcess{pid: cmd.Process.Pid, pidfd: pidfd}
	defer p.Close()
	require.NoError(t, p.alive())
	ns, err := p.netns()
	require.NoError(t, err, "a running process's namespace opens")
	ns.Close()
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	assert.ErrorContains(t, p.alive(), "exited")
	_, err = p.readFile("/etc/resolv.conf")
	assert.Error(t, err)
}

// TestPeerProcess: the peer of a unix socket is found and held, by
// SO_PEERPIDFD where the kernel has it, else SO_PEERCRED and pidfd_open.
func TestPeerProcess(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	p, err := peerProcess(fds[0])
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, unix.Getpid(), p.pid)
	assert.NoError(t, p.alive())
}

// TestHandedTo: the target reconciler acts for a pod only once
// virt-controller handed it the migration (its name in migrationState,
// its UID in activePods); labels and owner references, which a tenant
// writes on a pod of her own, are not enough.
func TestHandedTo(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm-tgt", UID: "tgt",
		Labels: map[string]string{v1.MigrationJobLabel: "m1"}}}
	for _, tc := range []struct {
		name         string
		st           v1.VirtualMachineInstanceStatus
		handed, wait bool
	}{
		{"handed over and recorded", v1.VirtualMachineInstanceStatus{
			MigrationState: &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", TargetPod: "virt-launcher-vm-tgt"},
			ActivePods:     map[types.UID]string{"src": "node01", "tgt": "node01"}}, true, true},
		{"not handed over yet", v1.VirtualMachineInstanceStatus{}, false, true},
		{"an older migration's state", v1.VirtualMachineInstanceStatus{
			MigrationState: &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m0", TargetPod: "old", Completed: true}}, false, true},
		{"handed to another pod", v1.VirtualMachineInstanceStatus{
			MigrationState: &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", TargetPod: "virt-launcher-vm-real"},
			ActivePods:     map[types.UID]string{"src": "node01", "real": "node01"}}, false, false},
		{"named, its UID not recorded yet", v1.VirtualMachineInstanceStatus{
			MigrationState: &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", TargetPod: "virt-launcher-vm-tgt"},
			ActivePods:     map[types.UID]string{"src": "node01"}}, false, true},
		{"recorded on another node", v1.VirtualMachineInstanceStatus{
			MigrationState: &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", TargetPod: "virt-launcher-vm-tgt"},
			ActivePods:     map[types.UID]string{"tgt": "node02"}}, false, true},
		{"failed", v1.VirtualMachineInstanceStatus{
			MigrationState: &v1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", TargetPod: "virt-launcher-vm-tgt", Failed: true},
			ActivePods:     map[types.UID]string{"tgt": "node01"}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handed, wait := handedTo(&v1.VirtualMachineInstance{Status: tc.st}, pod, "node01")
			assert.Equal(t, tc.handed, handed, "handed")
			if !handed {
				assert.Equal(t, tc.wait, wait, "wait")
			}
		})
	}
}

// TestActiveLauncherPodIsRecorded: a pod a tenant made with the VMI's
// label and a controller reference to it, older than the real launcher,
// is not taken for the launcher; without a record, no pod is.
func TestActiveLauncherPodIsRecorded(t *testing.T) {
	k8s := apiServer(t)
	ctx := context.Background()
	vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "default"}}
	require.NoError(t, k8s.Create(ctx, vmi))
	mk := func(name string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels:          map[string]string{v1.CreatedByLabel: string(vmi.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, v1.VirtualMachineInstanceGroupVersionKind)}},
			Spec: corev1.PodSpec{NodeName: "node01", Containers: []corev1.Container{{Name: "compute", Image: "launcher"}}}}
		require.NoError(t, k8s.Create(ctx, p))
		return p
	}
	forged := mk("forged")
	time.Sleep(1100 * time.Millisecond) // creation timestamps have a second's resolution
	real := mk("virt-launcher-vm-abcde")
	require.NotEqual(t, forged.CreationTimestamp, real.CreationTimestamp)

	got, err := activeLauncherPod(ctx, k8s, "node01", vmi)
	require.NoError(t, err)
	assert.Nil(t, got, "nothing recorded yet: no launcher")
	vmi.Status.ActivePods = map[types.UID]string{real.UID: "node01"}
	got, err = activeLauncherPod(ctx, k8s, "node01", vmi)
	require.NoError(t, err)
	require.NotNil(t, got)
	assert.Equal(t, real.Name, got.Name, "the recorded pod, not the older forged one")
}

// TestNotHandedPoll: a target pod not handed its migration is looked at
// again soon while it is new, and rarely once it is past the handoff
// window (a tenant's forged target pod is never handed anything).
func TestNotHandedPoll(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	for _, tc := range []struct {
		age  time.Duration
		want time.Duration
	}{
		{0, startingPoll},
		{handoffWindow - time.Second, startingPoll},
		{handoffWindow, lateHandoffPoll},
		{time.Hour, lateHandoffPoll},
	} {
		assert.Equal(t, tc.want, notHandedPoll(pod, created.Add(tc.age)), "pod %s old", tc.age)
	}
}
