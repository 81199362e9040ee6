// Package e2e tests kubevmm end to end on the real dev cluster (`make
// e2e`: cluster-up, cluster-sync, the test guest's kernelBoot image, then
// this with KUBEVMM_E2E=1). Everything goes through the user's tools:
// hack/kubectl.sh (kubectl v1.35.4) and hack/virtctl.sh.
//
// Guest boots cost minutes on the nested CI hosts, so TestVirtualMachineLifecycle
// boots the guest under our VMM twice only: once to read its console (that
// guest then serves the network, pause, virt-handler restart and live
// migration subtests, in that order), and once after `virtctl start` (to
// Running only; the guest's own boot is not waited for). The Windows-style
// VMI runs on QEMU with TCG, which boots the same guest in seconds here.
// TestRestrictedNamespace boots one more, in a namespace that enforces the
// "restricted" PodSecurity level.
// TestBootDiskVMI boots it once more, from a containerDisk's boot entry.
// TestMultiQueueVMI boots one more with two vCPUs, multi-queue NIC and
// disk, and migrates it.
// TestMetrics runs one more VMI to Running only, for a real Prometheus on
// the host to scrape.
// Every wait is for a condition; the bounds only turn a hang into a failure.
//
// Tests run one at a time, except those that keep to a namespace of their
// own (ownNamespace, or one they make) and change nothing outside it: they
// call t.Parallel, so they wait until every other test is done and then
// run two at a time (make e2e's -parallel). A guest's boot keeps one core
// busy, and the other core was mostly idle while it did. A test that
// uses freshNamespace (the one shared e2e namespace) or the helpers that
// work in it (wait, jsonpath, virtctl, console...; their *In forms take
// the namespace), or that changes the cluster, an operator's CR, a node
// or a component's pods, must not be parallel.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/controller"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

const (
	ns      = "kubevmm-e2e"
	vmName  = "testvm"
	marker  = "kubevmm-guest: cpus="
	envFlag = "KUBEVMM_E2E"
)

var repo = func() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(f), "..", ".."))
}()

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(repo, "hack", name), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(t, "kubectl.sh", args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func virtctl(t *testing.T, args ...string) string {
	t.Helper()
	return virtctlIn(t, ns, args...)
}

// virtctlIn is virtctl in namespace namespace.
func virtctlIn(t *testing.T, namespace string, args ...string) string {
	t.Helper()
	out, err := run(t, "virtctl.sh", append([]string{"-n", namespace}, args...)...)
	if err != nil {
		t.Fatalf("virtctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// wait is `kubectl wait` (a watch, not a poll loop of ours).
func wait(t *testing.T, what, cond string, bound time.Duration) {
	t.Helper()
	waitIn(t, ns, what, cond, bound)
}

// waitIn is wait in namespace namespace.
func waitIn(t *testing.T, namespace, what, cond string, bound time.Duration) {
	t.Helper()
	kubectl(t, "-n", namespace, "wait", what, "--for="+cond, "--timeout="+strconv.Itoa(int(bound.Seconds()))+"s")
}

func jsonpath(t *testing.T, obj, path string) string {
	t.Helper()
	return jsonpathIn(t, ns, obj, path)
}

// jsonpathIn is jsonpath in namespace namespace.
func jsonpathIn(t *testing.T, namespace, obj, path string) string {
	t.Helper()
	return kubectl(t, "-n", namespace, "get", obj, "-o", "jsonpath="+path)
}

// console runs `virtctl console` until its output holds marker, and
// returns the output. The guest's console history is replayed first, so a
// marker printed before attaching counts.
func console(t *testing.T, vmi string, bound time.Duration) string {
	t.Helper()
	return consoleUntil(t, ns, vmi, marker, bound)
}

// consoleUntil is console in namespace namespace, until the line holding
// marker is complete.
func consoleUntil(t *testing.T, namespace, vmi, marker string, bound time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "virtctl.sh"), "-n", namespace, "console", vmi)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	stdin, err := cmd.StdinPipe() // kept open: the console stays attached
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); pw.Close() }()
	var seen bytes.Buffer
	r := bufio.NewReader(pr)
	buf := make([]byte, 4096)
	for !bytes.Contains(seen.Bytes(), []byte(marker)) {
		n, err := r.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			t.Fatalf("virtctl console ended before the guest printed %q: %v\n%s", marker, err, seen.String())
		}
	}
	// The rest of the marker's line.
	for !bytes.Contains(afterMarker(seen.Bytes(), marker), []byte("\n")) {
		n, err := r.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			break
		}
	}
	cmd.Process.Kill()
	return seen.String()
}

// consoleRun types line on the guest's console and reads until want
// appears in what follows.
func consoleRun(t *testing.T, line, want string, bound time.Duration) string {
	t.Helper()
	return consoleRunThen(t, line, want, nil, "", bound)
}

// consoleRunThen is consoleRun, then, still attached, it calls then and
// reads on until more appears in what follows (with then nil: nothing).
func consoleRunThen(t *testing.T, line, want string, then func(), more string, bound time.Duration) string {
	t.Helper()
	return consoleRunThenIn(t, ns, vmName, line, want, then, more, bound)
}

// consoleRunThenIn is consoleRunThen on the console of another VMI.
func consoleRunThenIn(t *testing.T, namespace, vmi, line, want string, then func(), more string, bound time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "virtctl.sh"), "-n", namespace, "console", vmi)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	go func() { cmd.Wait(); pw.Close() }()
	if _, err := io.WriteString(stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
	var seen bytes.Buffer
	buf := make([]byte, 4096)
	readUntil := func(want string, from int) {
		for !bytes.Contains(seen.Bytes()[from:], []byte(want)) {
			n, err := pr.Read(buf)
			seen.Write(buf[:n])
			if err != nil {
				t.Fatalf("the console ended before %q appeared: %v\n%s", want, err, seen.String())
			}
		}
	}
	readUntil(want, 0)
	if then != nil {
		from := seen.Len()
		then()
		readUntil(more, from)
	}
	return seen.String()
}

// pingSummary is ping's "N packets transmitted, M received" line.
func pingSummary(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "packets transmitted") {
			return strings.TrimSpace(l)
		}
	}
	return "(no summary)"
}

// rssKiB sums a /proc/PID/status field (VmRSS, RssShmem) of the processes
// whose command name is comm.
func rssKiB(comm, field string) (int, int) {
	ents, _ := os.ReadDir("/proc")
	total, n := 0, 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				total += kb
				n++
			}
		}
	}
	return total, n
}

// podProcesses lists the PIDs of the processes with command name comm in
// the pod whose UID is podUID (from their cgroup, cgroupfs or systemd
// naming): this pod's, never another's with the same command.
func podProcesses(podUID, comm string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(c)) != comm {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil {
			continue
		}
		if strings.Contains(string(cg), "pod"+podUID) || strings.Contains(string(cg), "pod"+strings.ReplaceAll(podUID, "-", "_")) {
			out = append(out, pid)
		}
	}
	return out
}

// dialFromNetns connects to addr over TCP from the network namespace of
// process pid (a pod's, as any process in that pod would).
func dialFromNetns(pid int, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	pod, err := netns.GetFromPid(pid)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer pod.Close()
	if err := netns.Set(pod); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	c, err := net.DialTimeout("tcp", addr, 30*time.Second)
	if serr := netns.Set(orig); serr != nil {
		return nil, fmt.Errorf("back to the test's network namespace: %w", serr) // the thread stays locked and dies
	}
	runtime.UnlockOSThread()
	return c, err
}

// firstBytes keeps the first bytes read from a connection.
type firstBytes struct {
	net.Conn
	got []byte
}

func (c *firstBytes) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if len(c.got) < 8 {
		c.got = append(c.got, b[:min(n, 8-len(c.got))]...)
	}
	return n, err
}

// strangerHandshake starts a TLS handshake with addr from pid's network
// namespace, with no client certificate, and returns the first bytes the
// server sent and how the handshake (and a first read, where TLS 1.3 lets
// the client finish before the server judged it) ended.
func strangerHandshake(pid int, addr string) ([]byte, error) {
	raw, err := dialFromNetns(pid, addr)
	if err != nil {
		return nil, err
	}
	fb := &firstBytes{Conn: raw}
	c := tls.Client(fb, &tls.Config{InsecureSkipVerify: true})
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	err = c.Handshake()
	if err == nil {
		_, err = c.Read(make([]byte, 1))
	}
	return fb.got, err
}

// requireE2E skips the test outside `make e2e`: `make test` runs this
// package too, with no dev cluster (and perhaps a stale one's files in the
// cache). Every test here calls it, or freshNamespace, first
// (test/arch's TestE2ETestsRequireCluster checks).
func requireE2E(t *testing.T) {
	t.Helper()
	if os.Getenv(envFlag) == "" {
		t.Skipf("%s is not set: run `make e2e` (it brings up the dev cluster and deploys kubevmm)", envFlag)
	}
}

// freshNamespace skips the test outside `make e2e`, and gives it the e2e
// namespace, new, deleted after it unless it failed (then its state is
// logged and left for a look). Either way the pods the scheduler failed
// to place are logged (FailedScheduling events): a pod that waited for a
// retry cost the test its backoff.
func freshNamespace(t *testing.T) {
	requireE2E(t)
	newNamespace(t, ns)
}

// ownNamespace is freshNamespace, in namespace name, for a parallel test
// (see the package comment): the test passes the name it returns to
// kubectl and the *In helpers.
func ownNamespace(t *testing.T, name string) string {
	t.Helper()
	newNamespace(t, name)
	return name
}

// newNamespace is freshNamespace in namespace.
func newNamespace(t *testing.T, namespace string) {
	t.Helper()
	kubectl(t, "delete", "namespace", namespace, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", namespace)
	t.Cleanup(func() {
		if out, _ := run(t, "kubectl.sh", "-n", namespace, "get", "events", "--field-selector", "reason=FailedScheduling",
			"-o", "custom-columns=TIME:.metadata.creationTimestamp,OBJECT:.involvedObject.name,MESSAGE:.message", "--no-headers"); out != "" && !strings.HasPrefix(out, "No resources found") {
			t.Logf("FailedScheduling events:\n%s", out)
		}
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", namespace, "get", "vm,vmi,vmim,pods,events", "-o", "wide")
			t.Logf("state at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", namespace, "get", "vmi,vmim", "-o", "yaml")
			t.Logf("objects at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "kubevirt", "logs", "ds/virt-handler", "--tail=60")
			t.Logf("virt-handler:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", "kubevirt", "logs", "deploy/virt-controller", "--tail=40")
			t.Logf("virt-controller:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", namespace, "logs", "-l", "kubevirt.io/created-by", "--all-containers", "--prefix", "--tail=40")
			t.Logf("launcher pods:\n%s", out)
			return
		}
		kubectl(t, "delete", "namespace", namespace, "--wait=true", "--timeout=180s")
	})
}

func TestVirtualMachineLifecycle(t *testing.T) {
	freshNamespace(t)

	t.Run("webhook refuses an unsupported field, naming it", func(t *testing.T) {
		out, err := run(t, "kubectl.sh", "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm-unsupported.yaml"))
		if err == nil {
			t.Fatalf("the VM with a SCSI disk was accepted:\n%s", out)
		}
		// The webhook answers as KubeVirt's do, an Invalid status with one
		// cause per field, which kubectl prints as "The request is invalid:
		// <field>: <message>".
		want := `spec.template.spec.domain.devices.disks[0].disk.bus: "scsi" is not supported by kubevmm`
		if !strings.Contains(out, want) || !strings.Contains(out, "The request is invalid") {
			t.Fatalf("refusal does not name the field (want %q):\n%s", want, out)
		}
	})

	t.Run("a Windows-style VMI runs on QEMU; QEMU's end fails it", func(t *testing.T) {
		// SATA disk, e1000 NIC, Hyper-V features: admitted, and routed to
		// the launcher's QEMU (TCG on this host kind, see vmi-windows.yaml).
		const name = "win-style"
		t0 := time.Now()
		kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-windows.yaml"))
		wait(t, "vmi/"+name, "jsonpath={.status.phase}=Running", 5*time.Minute)
		t.Logf("MEASURED kubectl apply -> QEMU VMI Running: %v", time.Since(t0).Round(time.Millisecond))
		if got := jsonpath(t, "vmi/"+name, "{.metadata.annotations.kubevmm\\.io/active-backend}"); got != "qemu" {
			t.Fatalf("active backend %q, want qemu", got)
		}
		out := console(t, name, 5*time.Minute)
		line, _, _ := strings.Cut(marker+string(afterMarker([]byte(out), marker)), "\n")
		t.Logf("guest on QEMU: %s (%v after apply)", strings.TrimSpace(line), time.Since(t0).Round(time.Millisecond))

		// QEMU ends under the launcher (as an OOM kill or a crash would
		// end it): found from the host by its pod's cgroup, killed.
		uid := jsonpath(t, "vmi/"+name, "{.metadata.uid}")
		podUID := strings.TrimSpace(kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io/created-by="+uid, "-o", "jsonpath={.items[*].metadata.uid}"))
		if podUID == "" || strings.Contains(podUID, " ") {
			t.Fatalf("want one launcher pod of VMI %s, got UIDs %q", name, podUID)
		}
		pids := podProcesses(podUID, "qemu-system-x86")
		if len(pids) != 1 {
			t.Fatalf("want one QEMU process in pod %s, got %v", podUID, pids)
		}
		if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
			t.Fatalf("killing QEMU (pid %d): %v", pids[0], err)
		}
		wait(t, "vmi/"+name, "jsonpath={.status.phase}=Failed", 3*time.Minute)
		if got := jsonpath(t, "vmi/"+name, "{.status.reason}"); got != "GuestFailed" {
			t.Errorf("status.reason %q, want GuestFailed", got)
		}
		ev := kubectl(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.kind=VirtualMachineInstance,involvedObject.name="+name+",reason=GuestFailed",
			"-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		t.Logf("after QEMU was killed: %s", strings.TrimSpace(ev))
		if !strings.Contains(ev, "QEMU crashed: killed by signal") {
			t.Errorf("the VMI's GuestFailed event does not say QEMU was killed: %q", ev)
		}
		kubectl(t, "-n", ns, "delete", "vmi", name, "--wait=true", "--timeout=120s")
	})

	// apply -> Running: the VMM's vCPUs run (the guest's boot is not in it).
	t0 := time.Now()
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm.yaml"))
	wait(t, "vmi/"+vmName, "create", 2*time.Minute)
	wait(t, "vmi/"+vmName, "jsonpath={.status.phase}=Running", 5*time.Minute)
	applyToRunning := time.Since(t0)
	t.Logf("MEASURED kubectl apply -> VMI Running: %v", applyToRunning.Round(time.Millisecond))
	if got := jsonpath(t, "vmi/"+vmName, "{.status.nodeName}"); got == "" {
		t.Fatalf("Running VMI has no nodeName")
	}
	if got := jsonpath(t, "vmi/"+vmName, "{.metadata.annotations.kubevmm\\.io/active-backend}"); got != "kubevmm" {
		t.Fatalf("active backend %q, want kubevmm", got)
	}
	wait(t, "vm/"+vmName, "condition=Ready", 2*time.Minute)

	t.Run("virtctl console shows the guest's /init output", func(t *testing.T) {
		t0 := time.Now()
		out := console(t, vmName, 15*time.Minute)
		line, _, _ := strings.Cut(marker+string(afterMarker([]byte(out), marker)), "\n")
		t.Logf("guest: %s (console connected, marker after %v)", strings.TrimSpace(line), time.Since(t0).Round(time.Second))
	})

	t.Run("masquerade: the guest takes its lease by DHCP, reaches the node, the pod IP reaches the guest", func(t *testing.T) {
		// The guest's DHCP client (busybox udhcpc) gets KubeVirt's
		// masquerade lease from the launcher and applies it with a script
		// as a distribution's would. The tokens are computed by the
		// guest's shell, so the echoed command line cannot match them.
		script := `printf '#!/bin/sh\n[ "$1" = bound ] || exit 0\nip addr add $ip/$mask dev $interface\nip route add default via $router\n` +
			`echo LEASE ip=$ip router=$router mtu=$mtu hostname=$hostname\n' >/tmp/dhcp && chmod +x /tmp/dhcp`
		out := consoleRun(t, script+" && ip link set eth0 up && udhcpc -i eth0 -f -q -n -t 30 -T 2 -O mtu -s /tmp/dhcp && "+
			"ping -c 1 -W 10 10.200.0.1 && echo NET-$((40+2))", "NET-42", 5*time.Minute)
		lease := regexp.MustCompile(`LEASE ip=(\d+\.\d+\.\d+\.\d+) router=(\d+\.\d+\.\d+\.\d+) mtu=(\d*) hostname=([a-z0-9-]+)`).FindStringSubmatch(out)
		if lease == nil {
			t.Fatalf("the guest printed no lease:\n%s", out)
		}
		t.Logf("guest's lease: %s", lease[0])
		if lease[1] != vmispec.GuestIP || lease[2] != vmispec.GatewayIP || lease[4] != vmName {
			t.Errorf("lease %q: want ip %s, router %s, hostname %s", lease[0], vmispec.GuestIP, vmispec.GatewayIP, vmName)
		}
		t.Logf("guest -> node: %s", pingSummary(out))
		podIP := jsonpath(t, "vmi/"+vmName, "{.status.interfaces[0].ipAddress}")
		ping, err := exec.Command(hosttools.Require(t, "ping"), "-c", "3", "-W", "10", podIP).CombinedOutput()
		if err != nil {
			t.Fatalf("ping %s (the pod IP, DNATed to the guest): %v\n%s", podIP, err, ping)
		}
		t.Logf("node -> pod IP -> guest: %s", pingSummary(string(ping)))
	})

	t.Run("pause and unpause", func(t *testing.T) {
		virtctl(t, "pause", "vm", vmName)
		wait(t, "vmi/"+vmName, "condition=Paused", 2*time.Minute)
		wait(t, "vm/"+vmName, "jsonpath={.status.printableStatus}=Paused", 2*time.Minute)
		virtctl(t, "unpause", "vm", vmName)
		// Unpaused, the VMI has no Paused condition at all (as in
		// KubeVirt); the VM's status says Running again.
		wait(t, "vm/"+vmName, "jsonpath={.status.printableStatus}=Running", 2*time.Minute)
	})

	t.Run("virt-handler restart leaves the VM running and re-syncs its status", func(t *testing.T) {
		launcher := jsonpath(t, "pods", "{.items[0].metadata.uid}")
		handlerPod := kubectl(t, "-n", "kubevirt", "get", "pod", "-l", "kubevirt.io=virt-handler", "-o", "name")
		kubectl(t, "-n", "kubevirt", "delete", strings.TrimSpace(handlerPod), "--wait=true")
		// With no handler, a status fact goes missing; only a handler that
		// reads the launcher again can bring it back.
		kubectl(t, "-n", ns, "patch", "vmi", vmName, "--subresource=status", "--type=json", "-p", `[{"op":"remove","path":"/status/interfaces"}]`)
		kubectl(t, "-n", "kubevirt", "rollout", "status", "ds/virt-handler", "--timeout=180s")
		wait(t, "vmi/"+vmName, "jsonpath={.status.interfaces[0].name}=default", 2*time.Minute)
		if got := jsonpath(t, "vmi/"+vmName, "{.status.phase}"); got != "Running" {
			t.Fatalf("phase %q after the handler restart", got)
		}
		if got := jsonpath(t, "pods", "{.items[0].metadata.uid} {.items[0].status.containerStatuses[0].restartCount}"); got != launcher+" 0" {
			t.Fatalf("the launcher changed: %q, was %q with no restarts", got, launcher)
		}
		// The guest was not rebooted: its console (through the new
		// handler) holds exactly one boot report.
		out := console(t, vmName, 5*time.Minute)
		if n := strings.Count(out, marker); n != 1 {
			t.Fatalf("the guest reported %d boots on its console, want 1", n)
		}
	})

	t.Run("virtctl migrate moves the running guest to a new launcher pod, in post-copy", func(t *testing.T) {
		// Something only this guest's memory holds: a rebooted or
		// re-created guest would not have it.
		consoleRun(t, "echo pre-$((6*7)) > /tmp/migrated && echo MARK-$((1+2))", "MARK-3", 2*time.Minute)
		// The guest rewrites megabytes of its memory far faster than the
		// 4 MiB/s cap: pre-copy cannot converge, the migration goes
		// post-copy, and the target launcher (not root) handles the
		// guest's faults through /dev/userfaultfd, which the node's
		// vm.unprivileged_userfaultfd=0 leaves as its only way.
		allowPostCopy(t, "4Mi")
		consoleRun(t, "awk 'BEGIN { while (1) { for (i = 0; i < 100000; i++) a[i] = i + n; n++ } }' >/dev/null 2>&1 & echo $! > /tmp/dirty; echo DIRTY-$((2+3))", "DIRTY-5", 2*time.Minute)
		uid := jsonpath(t, "vmi/"+vmName, "{.metadata.uid}")
		source := strings.TrimSpace(kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io/created-by="+uid, "-o", "jsonpath={.items[*].metadata.name}"))
		if source == "" || strings.Contains(source, " ") {
			t.Fatalf("want one launcher pod before the migration, got %q", source)
		}
		// A stranger in the source launcher pod's own network namespace
		// (where a guest that broke out would be) does not reach the
		// handler's migration port: its NetworkPolicy lets only the
		// other handlers in. Strangers on the node, which policies do
		// not restrict, reach it before the source does: one starts a
		// TLS handshake without virt-handler's certificate, one connects
		// and stalls. The port speaks TLS, refuses the first, and
		// neither keeps the migration from succeeding.
		handlerIP := strings.TrimSpace(kubectl(t, "-n", "kubevirt", "get", "pods", "-l", "kubevirt.io=virt-handler", "-o", "jsonpath={.items[0].status.podIP}"))
		migAddr := net.JoinHostPort(handlerIP, strconv.Itoa(vmispec.HandlerMigrationPort))
		srcPIDs := podProcesses(jsonpath(t, "pod/"+source, "{.metadata.uid}"), "virt-launcher")
		if len(srcPIDs) == 0 {
			t.Fatalf("no virt-launcher process in pod %s", source)
		}
		if c, err := dialFromNetns(srcPIDs[0], migAddr); err == nil {
			c.Close()
			t.Fatalf("pod %s reached the handler's migration port %s, which its NetworkPolicy closes to it", source, migAddr)
		}
		stalled, err := dialFromNetns(os.Getpid(), migAddr)
		if err != nil {
			t.Fatalf("connecting to %s from the node: %v", migAddr, err)
		}
		defer stalled.Close()
		first, herr := strangerHandshake(os.Getpid(), migAddr)
		t.Logf("a stranger's handshake with %s: first bytes % x, %v", migAddr, first, herr)
		if len(first) < 2 || first[0] != 0x16 || first[1] != 0x03 {
			t.Fatalf("the migration port did not answer with a TLS handshake record: % x", first)
		}
		if herr == nil {
			t.Fatalf("a client without virt-handler's certificate completed the handshake with %s", migAddr)
		}

		t0 := time.Now()
		virtctl(t, "migrate", vmName)
		mig := strings.TrimSpace(jsonpath(t, "vmim", "{.items[*].metadata.name}"))
		if mig == "" || strings.Contains(mig, " ") {
			t.Fatalf("want the one migration virtctl created, got %q", mig)
		}
		wait(t, "vmim/"+mig, "jsonpath={.status.phase}=Succeeded", 10*time.Minute)
		t.Logf("MEASURED virtctl migrate -> migration Succeeded: %v", time.Since(t0).Round(time.Millisecond))
		ms := jsonpath(t, "vmi/"+vmName, "{.status.migrationState.completed} {.status.migrationState.failed} {.status.migrationState.mode} {.status.migrationState.sourcePod} {.status.migrationState.targetPod}")
		f := strings.Fields(ms)
		if len(f) != 4 || f[0] != "true" || f[1] != string(v1.MigrationPostCopy) || f[2] != source || f[3] == source {
			t.Fatalf("migrationState (completed failed mode sourcePod targetPod) = %q: want completed, not failed, in post-copy, from %s to another pod", ms, source)
		}
		target := f[3]
		if got := jsonpath(t, "vmi/"+vmName, "{.status.phase} {.status.nodeName}"); len(strings.Fields(got)) != 2 || strings.Fields(got)[0] != "Running" {
			t.Fatalf("VMI phase and node after the migration: %q, want Running on a node", got)
		}
		ev := kubectl(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.kind=VirtualMachineInstance,involvedObject.name="+vmName+",reason=Migrated",
			"-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		t.Logf("MEASURED migration (virt-handler's account): %s", strings.TrimSpace(ev))

		// The source's launcher exited when its guest left; its pod goes.
		wait(t, "pod/"+source, "delete", 3*time.Minute)
		wait(t, "pod/"+target, "condition=Ready", 2*time.Minute)
		if got := strings.TrimSpace(kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io/created-by="+uid, "-o", "jsonpath={.items[*].metadata.name}")); got != target {
			t.Fatalf("launcher pods after the migration: %q, want only %s", got, target)
		}

		// The same guest answers on its console, through the new pod
		// (and stops rewriting its memory)...
		out := consoleRun(t, "kill $(cat /tmp/dirty); cat /tmp/migrated", "pre-42", 2*time.Minute)
		if strings.Contains(out, "No such file") {
			t.Fatalf("the guest lost its memory in the migration:\n%s", out)
		}
		// ...and on the network: the VMI reports the new pod's IP, and
		// it reaches the guest (same masquerade, new pod).
		podIP := jsonpath(t, "pod/"+target, "{.status.podIP}")
		wait(t, "vmi/"+vmName, "jsonpath={.status.interfaces[0].ipAddress}="+podIP, 2*time.Minute)
		ping, err := exec.Command(hosttools.Require(t, "ping"), "-c", "3", "-W", "10", podIP).CombinedOutput()
		if err != nil {
			t.Fatalf("ping %s (the target pod's IP, DNATed to the guest): %v\n%s", podIP, err, ping)
		}
		t.Logf("node -> new pod IP -> migrated guest: %s", pingSummary(string(ping)))
		if got := jsonpath(t, "vm/"+vmName, "{.status.printableStatus}"); got != "Running" {
			t.Errorf("VM status %q after the migration, want Running", got)
		}
	})

	rss := map[string]string{}
	for _, c := range []string{"virt-api", "virt-controller", "virt-handler", "virt-launcher"} {
		kb, n := rssKiB(c, "VmRSS")
		rss[c] = fmt.Sprintf("%d KiB in %d process(es)", kb, n)
		if c == "virt-launcher" {
			// Guest RAM is a shared memfd (RssShmem); the rest is the
			// launcher's and the VMM's own.
			shm, _ := rssKiB(c, "RssShmem")
			rss[c] += fmt.Sprintf(" (guest RAM touched %d KiB, launcher+VMM %d KiB)", shm, kb-shm)
		}
		t.Logf("MEASURED RSS %s: %s", c, rss[c])
	}

	t.Run("virtctl stop ends the VM and its VMI goes away", func(t *testing.T) {
		// Attached to the console, so what the guest prints as it goes
		// down is seen: the power button reached its /init.
		var t0 time.Time
		consoleRunThen(t, "echo STOPPING-$((4+5))", "STOPPING-9", func() {
			t0 = time.Now()
			virtctl(t, "stop", vmName)
		}, "kubevmm-guest: shutdown requested", 3*time.Minute)
		wait(t, "vmi/"+vmName, "delete", 3*time.Minute)
		t.Logf("MEASURED virtctl stop -> VMI gone: %v", time.Since(t0).Round(time.Millisecond))
		// The graceful path: the power button made the guest power off
		// (ACPI S5: the VM's end) before its grace period was over, so
		// it was never stopped by force.
		ev := kubectl(t, "-n", ns, "get", "events", "--field-selector", "involvedObject.kind=VirtualMachineInstance,involvedObject.name="+vmName+",reason=Stopped",
			"-o", "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}")
		t.Logf("the guest's end: %s", strings.TrimSpace(ev))
		if !strings.Contains(ev, "The guest ended: shutdown") {
			t.Fatalf("the guest did not power off by itself (want \"The guest ended: shutdown\"): %q", ev)
		}
		wait(t, "vm/"+vmName, "jsonpath={.status.printableStatus}=Stopped", 2*time.Minute)
	})

	t.Run("virtctl start brings it back", func(t *testing.T) {
		t0 := time.Now()
		virtctl(t, "start", vmName)
		wait(t, "vmi/"+vmName, "create", 2*time.Minute)
		wait(t, "vmi/"+vmName, "jsonpath={.status.phase}=Running", 5*time.Minute)
		t.Logf("MEASURED virtctl start -> VMI Running: %v", time.Since(t0).Round(time.Millisecond))
	})

	kubectl(t, "-n", ns, "delete", "vm", vmName, "--wait=true", "--timeout=180s")
}

// allowPostCopy sets migrations.allowPostCopy and bandwidthPerMigration in
// the cluster configuration until the test ends (liveMigrationConfig).
func allowPostCopy(t *testing.T, bandwidth string) {
	t.Helper()
	liveMigrationConfig(t, map[string]any{"allowPostCopy": true, "bandwidthPerMigration": bandwidth}, func(m v1.MigrationConfiguration) bool {
		return m.AllowPostCopy != nil && *m.AllowPostCopy && m.BandwidthPerMigration != nil && m.BandwidthPerMigration.Cmp(resource.MustParse(bandwidth)) == 0
	})
}

// liveMigrationConfig sets the HyperConverged CR's liveMigrationConfig
// fields of m (which the HCO passes on to the KubeVirt CR's
// spec.configuration, which virt-operator renders into the ConfigMap
// kubevmm-config) until the test ends (then back to what they were), and
// returns once applied says
// virt-controller's copy of the file has them: it reads the file again
// for each migration.
func liveMigrationConfig(t *testing.T, m map[string]any, applied func(v1.MigrationConfiguration) bool) {
	t.Helper()
	migrations := func(m map[string]any) {
		p, err := json.Marshal(map[string]any{"spec": map[string]any{"virtualization": map[string]any{"liveMigrationConfig": m}}})
		if err != nil {
			t.Fatal(err)
		}
		kubectl(t, "-n", "kubevirt", "patch", "hco", "kubevirt-hyperconverged", "--type=merge", "-p", string(p))
	}
	// Put back as it was (sync.sh sets some), absent fields removed.
	prev := map[string]any{}
	if b := kubectl(t, "-n", "kubevirt", "get", "hco", "kubevirt-hyperconverged", "-o", "jsonpath={.spec.virtualization.liveMigrationConfig}"); b != "" {
		if err := json.Unmarshal([]byte(b), &prev); err != nil {
			t.Fatalf("liveMigrationConfig %q: %v", b, err)
		}
	}
	reset := map[string]any{}
	for k := range m {
		reset[k] = prev[k]
	}
	migrations(m)
	t.Cleanup(func() { migrations(reset) })
	var want []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got := kubectl(t, "-n", "kubevirt", "get", "configmap", "kubevmm-config", "-o", `jsonpath={.data.config\.yaml}`)
		cc, err := controller.ParseClusterConfig([]byte(got))
		if err != nil {
			t.Fatal(err)
		}
		if applied(cc.Migrations) {
			// virt-operator writes the file as this marshals it.
			if want, err = yaml.Marshal(cc); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("virt-operator did not render liveMigrationConfig %v into kubevmm-config:\n%s", m, got)
		}
	}
	// The kubelet updates a ConfigMap volume on its periodic sync of the
	// pod, or at once when the pod changes: an annotation changes it.
	pod := strings.Fields(kubectl(t, "-n", "kubevirt", "get", "pods", "-l", "kubevirt.io=virt-controller", "-o", "jsonpath={.items[*].metadata.name} {.items[*].metadata.uid}"))
	if len(pod) != 2 {
		t.Fatalf("want one virt-controller pod, got %q", pod)
	}
	kubectl(t, "-n", "kubevirt", "annotate", "--overwrite", "pod", pod[0], "kubevmm.io/e2e-config="+strconv.FormatInt(time.Now().UnixNano(), 10))
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		if pids := podProcesses(pod[1], "virt-controller"); len(pids) == 1 {
			// The manifests mount the ConfigMap at /etc/kubevmm/config.
			got, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/etc/kubevmm/config/config.yaml", pids[0]))
			if err == nil && bytes.Equal(got, want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("virt-controller's configuration file did not become:\n%s", want)
		}
	}
}

// afterMarker is what follows the first marker in b (nothing if absent).
// TestBootDiskVMI: a VMI with only a containerDisk (BIOS, no kernelBoot)
// whose image has a Linux boot entry runs on our VMM, which boots the
// entry; the VMI says so and why, and the guest's /init reports on its
// console.
func TestBootDiskVMI(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	ns := ownNamespace(t, "kubevmm-e2e-bootdisk")
	const name = "bootdisk"
	t0 := time.Now()
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-bootdisk.yaml"))
	waitIn(t, ns, "vmi/"+name, "jsonpath={.status.phase}=Running", 5*time.Minute)
	t.Logf("MEASURED kubectl apply -> disk-booted VMI Running: %v", time.Since(t0).Round(time.Millisecond))
	if got := jsonpathIn(t, ns, "vmi/"+name, "{.metadata.annotations.kubevmm\\.io/active-backend}"); got != "kubevmm" {
		t.Fatalf("active backend %q, want kubevmm", got)
	}
	why := jsonpathIn(t, ns, "vmi/"+name, "{.metadata.annotations.kubevmm\\.io/active-backend-reason}")
	if !strings.Contains(why, "boots its disk's Linux boot entry") {
		t.Errorf("backend reason %q does not say the disk's boot entry is booted", why)
	}
	out := consoleUntil(t, ns, name, marker, 15*time.Minute)
	line, _, _ := strings.Cut(marker+string(afterMarker([]byte(out), marker)), "\n")
	t.Logf("disk-booted guest: %s (%v after apply)", strings.TrimSpace(line), time.Since(t0).Round(time.Second))
	kubectl(t, "-n", ns, "delete", "vmi", name, "--wait=true", "--timeout=120s")
}

func afterMarker(b []byte, marker string) []byte {
	_, after, _ := bytes.Cut(b, []byte(marker))
	return after
}
