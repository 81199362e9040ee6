package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// These tests run the launcher's QEMU backend with a real QEMU (TCG, so
// they do not depend on the host's KVM). A VMI without kernelBoot boots
// SeaBIOS, which finds nothing to boot and idles: a cheap QEMU that runs
// for as long as a test needs. The error paths are QEMU's own: a killed
// process, a stopped (hung) process, a command it refuses.

func needQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 not installed (hack/deps.sh qemu; make test installs it)")
	}
}

func qemuVMI() *v1.VirtualMachineInstance {
	g := resource.MustParse("64Mi")
	return &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "q1", Namespace: "ns", UID: "7e57-qemu",
			Annotations: map[string]string{vmispec.BackendAnnotation: "qemu", vmispec.QEMUAccelAnnotation: "tcg"}},
		Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &g}}},
	}
}

// launcherRun is one launcher.Run in the background.
type launcherRun struct {
	p    Paths
	c    *api.Client
	done chan struct{}
	code int
	err  error
}

func startRun(t *testing.T, vmi *v1.VirtualMachineInstance, p Paths, wd Watchdog) *launcherRun {
	t.Helper()
	b, _ := json.Marshal(vmi)
	vmiFile := filepath.Join(t.TempDir(), "vmi.json")
	if err := os.WriteFile(vmiFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &launcherRun{p: p, c: api.NewClient(filepath.Join(p.SocketDir, vmispec.ControlSocket)), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.code, r.err = Run(ctx, Options{VMIFile: vmiFile, Paths: p, Log: testLog{t}, Linger: time.Nanosecond, QEMUWatchdog: wd})
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// waitInfo polls the control API until cond holds. The bound only turns a
// hang into a failure.
func (r *launcherRun) waitInfo(t *testing.T, what string, cond func(api.Info) bool) api.Info {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last api.Info
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		i, err := r.c.Info(ctx)
		cancel()
		if err == nil && cond(i) {
			return i
		}
		last, lastErr = i, err
		select {
		case <-r.done:
			if rec, ok := readExit(r.p); ok && cond(rec) {
				return rec
			}
			t.Fatalf("launcher ended (%d, %v) before %s; last info %+v", r.code, r.err, what, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("waiting for %s: last info %+v, error %v", what, last, lastErr)
	return api.Info{}
}

func readExit(p Paths) (api.Info, bool) {
	b, err := os.ReadFile(filepath.Join(p.SocketDir, vmispec.ExitFile))
	if err != nil {
		return api.Info{}, false
	}
	var i api.Info
	return i, json.Unmarshal(b, &i) == nil
}

func (r *launcherRun) qemuPID(t *testing.T) int {
	t.Helper()
	m, err := r.c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pid, ok := m["pid"].(float64)
	if !ok || pid <= 0 {
		t.Fatalf("metrics %v: no QEMU pid", m)
	}
	return int(pid)
}

func (r *launcherRun) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the launcher did not end: it hangs")
	}
}

// TestQEMUCrash: QEMU killed by someone else (an OOM kill, a crash) ends
// the VM as failed, with how it ended; the launcher exits 1.
func TestQEMUCrash(t *testing.T) {
	needQEMU(t)
	r := startRun(t, qemuVMI(), testPaths(t), Watchdog{})
	r.waitInfo(t, "Running", func(i api.Info) bool { return i.State == api.StateRunning })
	pid := r.qemuPID(t)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.wait(t)
	if r.code != 1 {
		t.Errorf("launcher exit code %d, want 1", r.code)
	}
	rec, ok := readExit(r.p)
	if !ok {
		t.Fatal("no exit record")
	}
	t.Logf("exit record: %+v", rec)
	if rec.State != api.StateStopped || rec.Exit != string(qemu.ExitCrashed) || !strings.Contains(rec.Error, "QEMU crashed: killed by signal killed") {
		t.Errorf("exit record %+v: want Stopped, crashed, killed by signal", rec)
	}
}

// TestQEMUHungMonitor: a QEMU that stops answering (here: SIGSTOP) never
// hangs the launcher. The control API keeps answering at once, and the
// watchdog kills QEMU and reports the VM failed, saying why.
func TestQEMUHungMonitor(t *testing.T) {
	needQEMU(t)
	r := startRun(t, qemuVMI(), testPaths(t), Watchdog{Interval: 50 * time.Millisecond, Timeout: time.Second})
	r.waitInfo(t, "Running", func(i api.Info) bool { return i.State == api.StateRunning })
	pid := r.qemuPID(t)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Answered from what the watchdog last read, not from QEMU.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if _, err := r.c.Info(ctx); err != nil {
		t.Errorf("the control API did not answer while QEMU hangs: %v", err)
	}
	cancel()
	r.wait(t)
	if r.code != 1 {
		t.Errorf("launcher exit code %d, want 1", r.code)
	}
	rec, _ := readExit(r.p)
	t.Logf("exit record: %+v", rec)
	if rec.State != api.StateStopped || !strings.Contains(rec.Error, "monitor did not answer") {
		t.Errorf("exit record %+v: want Stopped with the hung monitor named", rec)
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("QEMU (pid %d) still exists", pid)
	}
}

// TestQEMURefusedCommand: a command QEMU refuses while the guest starts
// fails the start with QEMU's own words, and leaves no QEMU behind.
func TestQEMURefusedCommand(t *testing.T) {
	needQEMU(t)
	p := testPaths(t)
	vmi := qemuVMI()
	cfg, err := BuildVMConfig(vmi, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(p.RunDir, 0o700); err != nil {
		t.Fatal(err)
	}
	s, err := qemuStartConfig(cfg, vmi, Options{Paths: p, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	s.startCommands = []string{"no-such-command"}
	be, err := startQEMU(context.Background(), s, filepath.Join(p.SocketDir, vmispec.ConsoleSocket), &lineLog{}, t.Logf)
	if err == nil {
		be.Stop()
		t.Fatal("QEMU accepted a command it does not have")
	}
	t.Logf("start error: %v", err)
	if !strings.Contains(err.Error(), "CommandNotFound") || !strings.Contains(err.Error(), "no-such-command") {
		t.Errorf("error %q does not carry QEMU's refusal", err)
	}
	if pids := processesMentioning(p.RunDir); len(pids) > 0 {
		t.Errorf("QEMU processes left behind: %v", pids)
	}
	if _, err := os.Stat(filepath.Join(p.SocketDir, vmispec.ConsoleSocket)); err == nil {
		if c, err := net.Dial("unix", filepath.Join(p.SocketDir, vmispec.ConsoleSocket)); err == nil {
			c.Close()
			t.Error("the console socket still answers")
		}
	}
}

// processesMentioning lists the PIDs whose command line contains s.
func processesMentioning(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestQEMUGuestConsole boots the test guest in QEMU through the launcher:
// what /init prints before anyone attaches is replayed to a client that
// attaches late (the launcher's console hub, as with our VMM), input
// reaches the guest, and the guest's own end finishes the launcher with 0.
func TestQEMUGuestConsole(t *testing.T) {
	needQEMU(t)
	dir := guestimage.Dir(t)
	p := testPaths(t)
	for src, dst := range map[string]string{"vmlinux": vmispec.KernelFile, "initramfs.cpio": vmispec.InitrdFile} {
		if err := os.Symlink(filepath.Join(dir, src), filepath.Join(p.KernelBootDir, dst)); err != nil {
			t.Fatal(err)
		}
	}
	vmi := qemuVMI()
	vmi.Spec.Domain.Memory.Guest = ptrQ("128Mi")
	vmi.Spec.Domain.Firmware = &v1.Firmware{KernelBoot: &v1.KernelBoot{KernelArgs: "console=ttyS0 reboot=k panic=-1 kubevmm.mode=shell",
		Container: &v1.KernelBootContainer{Image: "img", KernelPath: "/boot/vmlinux", InitrdPath: "/boot/initramfs.cpio"}}}
	r := startRun(t, vmi, p, Watchdog{})
	r.waitInfo(t, "Running", func(i api.Info) bool { return i.State == api.StateRunning })

	conn, err := net.Dial("unix", filepath.Join(p.SocketDir, vmispec.ConsoleSocket))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Minute)) // a bound, not an expectation
	readUntil := func(want string) string {
		t.Helper()
		var seen bytes.Buffer
		buf := make([]byte, 4096)
		for !bytes.Contains(seen.Bytes(), []byte(want)) {
			n, err := conn.Read(buf)
			seen.Write(buf[:n])
			if err != nil {
				t.Fatalf("console ended before %q: %v\n%s", want, err, seen.String())
			}
		}
		return seen.String()
	}
	// The shell prompt line comes after the report: both are there,
	// whenever this client attached.
	out := readUntil("'reboot -f' ends the VM")
	if !strings.Contains(out, "kubevmm-guest: cpus=1") {
		t.Errorf("console history lacks /init's report:\n%s", out)
	}
	if _, err := conn.Write([]byte("echo QEMU-$((40+2))\n")); err != nil {
		t.Fatal(err)
	}
	readUntil("QEMU-42")
	// poweroff, not reboot: with rebootPolicy unset (Reboot, KubeVirt's
	// default) a guest's reboot boots it again in the VMI.
	if _, err := conn.Write([]byte("poweroff -f\n")); err != nil {
		t.Fatal(err)
	}
	r.wait(t)
	if r.code != 0 || r.err != nil {
		t.Fatalf("launcher ended with %d %v", r.code, r.err)
	}
	if rec, _ := readExit(p); rec.Exit != string(qemu.ExitGuestShutdown) {
		t.Errorf("exit %+v, want guest-shutdown", rec)
	}
}

func ptrQ(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func TestResolveQEMUAccel(t *testing.T) {
	for _, c := range []struct {
		ann  string
		want qemu.Accel
		bad  bool
	}{{ann: "kvm", want: qemu.AccelKVM}, {ann: "tcg", want: qemu.AccelTCG}, {ann: "fast", bad: true}} {
		a, _, err := ResolveQEMUAccel(map[string]string{vmispec.QEMUAccelAnnotation: c.ann})
		if (err != nil) != c.bad || a != c.want {
			t.Errorf("%q: %q %v", c.ann, a, err)
		}
	}
	a, why, err := ResolveQEMUAccel(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, pvm := os.Stat("/sys/module/kvm_pvm")
	if want := map[bool]qemu.Accel{true: qemu.AccelTCG, false: qemu.AccelKVM}[pvm == nil]; a != want {
		t.Errorf("auto: %s (%s), want %s on this host", a, why, want)
	}
}
