package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
)

var vmmBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vmm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	vmmBin = filepath.Join(dir, "vmm")
	if out, err := exec.Command("go", "build", "-o", vmmBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building vmm: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// vmmCommand is exec.Command for the vmm under test. The VMM dies with
// the test binary: a test that times out panics without running its
// cleanups, and must not leave a VM running on the machine.
func vmmCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(vmmBin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
}

func vmm(t *testing.T, args ...string) result {
	t.Helper()
	return runCmd(t, vmmCommand(args...))
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return result{code, out.String(), errb.String()}
}

// assertOneLineError checks the contract for bad input: status 2, one line
// on stderr naming the problem, and no Go panic.
func assertOneLineError(t *testing.T, r result, want string) {
	t.Helper()
	assert.Equal(t, exitConfig, r.code, "stderr: %s", r.stderr)
	assert.NotContains(t, r.stderr, "panic")
	assert.NotContains(t, r.stderr, "goroutine")
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	assert.Len(t, lines, 1, "one line: %q", r.stderr)
	assert.True(t, strings.HasPrefix(r.stderr, "vmm: "), "%q", r.stderr)
	assert.Contains(t, r.stderr, want)
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	return p
}

func TestBadInputIsOneLineAndStatus2(t *testing.T) {
	garbage := writeFile(t, "garbage", bytes.Repeat([]byte("not a kernel "), 1000))
	truncatedELF := writeFile(t, "trunc.elf", append([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1}, make([]byte, 40)...))
	fakeBz := make([]byte, 4096)
	fakeBz[0x1fe], fakeBz[0x1ff] = 0x55, 0xaa
	copy(fakeBz[0x202:], "HdrS")
	fakeBz[0x206], fakeBz[0x207] = 0x00, 0x02 // boot protocol 2.00
	oldBz := writeFile(t, "old.bz", fakeBz)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no kernel flag", []string{"run"}, "--kernel is required"},
		{"kernel missing", []string{"run", "--kernel", "/nonexistent/vmlinux"}, "no such file"},
		{"garbage kernel", []string{"run", "--kernel", garbage}, "not a bootable x86-64 Linux kernel"},
		{"truncated ELF", []string{"run", "--kernel", truncatedELF}, "not a bootable x86-64 Linux kernel"},
		{"ancient bzImage", []string{"run", "--kernel", oldBz}, "boot protocol 2.00"},
		{"memory too small", []string{"run", "--kernel", garbage, "--memory", "8M"}, "too small"},
		{"memory not a size", []string{"run", "--kernel", garbage, "--memory", "lots"}, "--memory \"lots\""},
		{"zero cpus", []string{"run", "--kernel", garbage, "--cpus", "0"}, "--cpus 0"},
		{"rtc offset beyond a century", []string{"run", "--kernel", garbage, "--rtc-offset", "900000h"}, "--rtc-offset 900000h0m0s: at most"},
		{"rtc offset not a duration", []string{"run", "--kernel", garbage, "--rtc-offset", "3 days"}, "rtc-offset"},
		{"rtc offset for an incoming VM", []string{"run", "--incoming", "tcp:127.0.0.1:0", "--rtc-offset", "1h"}, "drop --kernel/--initrd/--boot-disk/--disk/--net/--rtc-offset"},
		{"too many cpus", []string{"run", "--kernel", garbage, "--cpus", "999"}, "999 vCPUs"},
		{"bad console", []string{"run", "--kernel", garbage, "--console", "tty"}, "--console \"tty\""},
		{"unknown flag", []string{"run", "--frobnicate"}, "frobnicate"},
		{"stray argument", []string{"run", "--kernel", garbage, "extra"}, "unexpected argument"},
		{"unknown command", []string{"fly"}, "unknown command"},
		{"bad on-reboot", []string{"run", "--kernel", garbage, "--on-reboot", "halt"}, "--on-reboot \"halt\""},
		{"restore reset without kernel", []string{"restore", "--snapshot", "/nonexistent", "--on-reboot", "reset"}, "needs --kernel"},
		{"initrd missing", []string{"run", "--kernel", garbage, "--initrd", "/nonexistent/initrd"}, "--initrd"},
		{"no pre-copy rounds", []string{"migrate", "--api", "/nonexistent.api", "--to", "unix:/nonexistent.mig", "--max-rounds", "0"}, "--max-rounds 0: want at least 1"},
		{"bandwidth under 1M", []string{"migrate", "--api", "/nonexistent.api", "--to", "unix:/nonexistent.mig", "--bandwidth", "64K"}, "--bandwidth \"64K\": want at least 1M"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assertOneLineError(t, vmm(t, tc.args...), tc.want)
		})
	}
}

func TestHelp(t *testing.T) {
	r := vmm(t, "run", "--help")
	assert.Equal(t, 0, r.code)
	for _, f := range []string{"-kernel", "-initrd", "-cmdline", "-cpus", "-memory", "-console"} {
		assert.Contains(t, r.stdout, f)
	}
}

// TestMissingKVM runs vmm in a mount namespace whose /dev has no kvm node.
func TestMissingKVM(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to hide /dev/kvm in a private mount namespace")
	}
	kernel := writeFile(t, "k", []byte("irrelevant: KVM is checked first"))
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs tmpfs /dev && exec "$0" "$@"`, vmmBin, "run", "--kernel", kernel)
	r := runCmd(t, cmd)
	assertOneLineError(t, r, "/dev/kvm")
	assert.Contains(t, r.stderr, "KVM is not available")
}

// TestBootLinuxTwoCPUs is the end-to-end check of the VMM core: the test
// guest boots with 2 vCPUs to its /init, reports what Linux sees, takes
// input typed on the console and powers off; vmm exits 0. The console is a
// unix socket the test attaches to, detaches from and re-attaches to while
// the guest runs.
func TestBootLinuxTwoCPUs(t *testing.T) {
	t.Parallel()
	initrd := guestimage.InitrdWithRun(t, `echo "kubevmm-test: type something"
read -r line
echo "kubevmm-test: got [$line]"
`, nil)
	sock := filepath.Join(t.TempDir(), "console.sock")
	cmd := vmmCommand("run", "--kernel", guestimage.Kernel(t), "--initrd", initrd,
		"--cpus", "2", "--memory", "256M", "--console", "socket:"+sock)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer cmd.Process.Kill()

	// First client: attach as soon as the socket exists, read the first
	// kernel message, then detach mid-boot.
	c1 := dialWhenReady(t, sock, waited)
	r1 := bufio.NewReader(c1)
	line, err := r1.ReadString('\n')
	require.NoError(t, err)
	t.Logf("first console line: %q", line)
	c1.Close()

	// Second client: sees the history (including what it missed while
	// detached) and answers the guest's prompt.
	c2 := dialWhenReady(t, sock, waited)
	defer c2.Close()
	out := &bytes.Buffer{}
	r2 := bufio.NewReader(c2)
	require.NoError(t, readUntil(r2, out, "kubevmm-test: type something"), "console so far:\n%s", out)
	_, err = c2.Write([]byte("hello from the host\n"))
	require.NoError(t, err)
	require.NoError(t, readUntil(r2, out, "kubevmm-guest: powering off"), "console so far:\n%s", out)

	select {
	case err := <-waited:
		require.NoError(t, err, "vmm exits 0 when the guest powers off; stderr: %s", stderr.String())
	case <-time.After(5 * time.Minute):
		t.Fatalf("vmm did not exit after the guest powered off; console:\n%s", out)
	}

	console := out.String()
	assert.Contains(t, console, line, "history replays output sent before the client attached")
	m := regexp.MustCompile(`kubevmm-guest: cpus=(\d+) online=(\S+) mem_kib=(\d+)`).FindStringSubmatch(console)
	require.NotNil(t, m, "guest /init reports CPUs and memory; console:\n%s", console)
	assert.Equal(t, "2", m[1], "Linux brought both vCPUs online")
	assert.Equal(t, "0-1", m[2])
	memKiB, _ := strconv.Atoi(m[3])
	assert.Greater(t, memKiB, 200*1024, "MemTotal close to the 256 MiB given")
	assert.LessOrEqual(t, memKiB, 256*1024)
	assert.Contains(t, console, "kubevmm-test: got [hello from the host]", "console input reached the guest")
}

// dialWhenReady connects to the console socket once vmm has created it.
func dialWhenReady(t *testing.T, path string, exited <-chan error) net.Conn {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.Dial("unix", path)
		if err == nil {
			return c
		}
		select {
		case err := <-exited:
			t.Fatalf("vmm exited before its console socket appeared: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("console socket %s: %v", path, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for a file another process creates
	}
}

// readUntil copies from r into out until out contains s. Guest boots take
// minutes on hosts that emulate kernel mode; a closed connection ends it.
func readUntil(r *bufio.Reader, out *bytes.Buffer, s string) error {
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), s) {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return fmt.Errorf("console closed before %q: %w", s, err)
		}
	}
	return nil
}

// TestBootBzImage boots the compressed kernel through the bzImage path of
// the boot protocol (setup header, 64-bit entry of the decompressor) until
// the decompressed kernel prints its banner, then stops the VM with
// SIGTERM, which ends vmm cleanly. The ELF path is the one taken to /init
// above; the rest of the boot is the same kernel either way.
func TestBootBzImage(t *testing.T) {
	t.Parallel()
	cmd := vmmCommand("run", "--kernel", guestimage.BzImage(t), "--initrd", guestimage.Initramfs(t),
		"--memory", "128M", "--console", "stdio")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	defer cmd.Process.Kill()
	out := &bytes.Buffer{}
	r := bufio.NewReader(stdout)
	require.NoError(t, readUntil(r, out, "Linux version 6.1"), "stderr: %s", stderr.String())
	go io.Copy(io.Discard, r)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "SIGTERM stops the VM and vmm exits 0; stderr: %s", stderr.String())
}
