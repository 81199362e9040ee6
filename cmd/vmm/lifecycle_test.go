package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/guestagent"
	"github.com/kubevmm/kubevmm/vmm/snapshot"
)

// lifecycleScript runs in the guest: a userspace counter on the console, a
// program that keeps dirtying memory (awk rewriting a big array: user mode,
// native speed, few syscalls), a fixed 1 MiB region whose checksum must
// survive everything, a vsock echo server that starts over when its
// session ends, and a console command loop.
const lifecycleScript = `
n=0; for d in /sys/block/vd*; do n=$((n+1)); done; echo "disks $n"
dd if=/dev/urandom of=/tmp/region bs=64k count=16 2>/dev/null
set -- $(sha256sum /tmp/region); echo "region $1"
(i=0; while true; do i=$((i+1)); echo "count $i"; sleep 1; done) &
(while true; do /bin/guestvsock echo 5000; echo "vsock session ended"; done) &
awk 'BEGIN { while (1) { for (i = 0; i < 200000; i++) a[i] = i + n; n++ } }' &
while read -r line; do
  case "$line" in
    sum) set -- $(sha256sum /tmp/region); echo "region $1" ;;
    quit) reboot -f ;;
    *) echo "echo: $line" ;;
  esac
done
`

// vmmProc is one vmm process under test.
type vmmProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stderr bytes.Buffer
	exited chan error
}

func startVMM(t *testing.T, args ...string) *vmmProc {
	t.Helper()
	p := &vmmProc{t: t, cmd: vmmCommand(args...), exited: make(chan error, 1)}
	p.cmd.Stderr = &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// wait waits for the process to exit and returns its status.
func (p *vmmProc) wait(d time.Duration) int {
	p.t.Helper()
	select {
	case err := <-p.exited:
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		require.NoError(p.t, err)
		return 0
	case <-time.After(d):
		p.t.Fatalf("vmm did not exit; stderr: %s", p.stderr.String())
		return -1
	}
}

// consoleClient is a client of a VM's console socket collecting its output.
type consoleClient struct {
	t    *testing.T
	conn net.Conn
	mu   sync.Mutex
	out  bytes.Buffer
	more chan struct{}
	// closed is closed when the console's stream ends: the VMM exited
	// or handed its guest over to a migration target.
	closed chan struct{}
}

func attach(t *testing.T, path string, p *vmmProc) *consoleClient {
	t.Helper()
	c := &consoleClient{t: t, conn: dialWhenReady(t, path, p.exited), more: make(chan struct{}, 1), closed: make(chan struct{})}
	t.Cleanup(func() { c.conn.Close() })
	go func() {
		defer close(c.closed)
		buf := make([]byte, 4096)
		for {
			n, err := c.conn.Read(buf)
			c.mu.Lock()
			c.out.Write(buf[:n])
			c.mu.Unlock()
			select {
			case c.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return c
}

// waitFor returns the submatches of the first match of re in output that
// starts at or after offset from, waiting for it.
func (c *consoleClient) waitFor(re *regexp.Regexp, from int) ([]string, int) {
	c.t.Helper()
	m, pos, ok := c.waitOrEnd(re, from)
	if !ok {
		c.t.Fatalf("the console closed (the VMM exited or handed its guest over) before showing %v; output:\n%s", re, c.String())
	}
	return m, pos
}

func (c *consoleClient) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// waitOrEnd is waitFor, but reports (ok false) a console that closed
// first instead of failing.
func (c *consoleClient) waitOrEnd(re *regexp.Regexp, from int) ([]string, int, bool) {
	c.t.Helper()
	// a deadline for a hung guest, not a speed limit: boots take minutes
	// on hosts that emulate guest kernel mode, and `make test` boots
	// several guests at once on two cores
	deadline := time.After(20 * time.Minute)
	ended := false
	for {
		c.mu.Lock()
		s := c.out.String()
		c.mu.Unlock()
		if from < len(s) {
			if loc := re.FindStringSubmatchIndex(s[from:]); loc != nil {
				m := make([]string, len(loc)/2)
				for i := range m {
					if loc[2*i] >= 0 {
						m[i] = s[from+loc[2*i] : from+loc[2*i+1]]
					}
				}
				return m, from + loc[1], true
			}
		}
		if ended {
			return nil, from, false
		}
		select {
		case <-c.more:
		case <-c.closed:
			ended = true // look once more at what came before the end
		case <-deadline:
			c.t.Fatalf("console never showed %v; output:\n%s", re, s)
		}
	}
}

func (c *consoleClient) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Len()
}

func (c *consoleClient) send(line string) {
	c.t.Helper()
	_, err := c.conn.Write([]byte(line + "\n"))
	require.NoError(c.t, err)
}

var (
	countRE          = regexp.MustCompile(`count (\d+)\r?\n`)
	regionRE         = regexp.MustCompile(`region ([0-9a-f]{64})`)
	vsockListeningRE = regexp.MustCompile(`KV vsock_listening=1`)
	vsockEndedRE     = regexp.MustCompile(`vsock session ended`)
)

// vsockEcho opens a stream to the guest's echo server (port 5000) through
// a VMM's vsock socket and checks that it echoes line.
func vsockEcho(t *testing.T, path, line string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Write([]byte("CONNECT 5000\n"))
	require.NoError(t, err)
	reply := readLine(t, c)
	require.Regexp(t, `^OK \d+$`, reply, "CONNECT through %s", path)
	vsockSend(t, c, line)
	return c
}

// vsockSend sends line on an open stream and checks the echo.
func vsockSend(t *testing.T, c net.Conn, line string) {
	t.Helper()
	_, err := c.Write([]byte(line + "\n"))
	require.NoError(t, err)
	assert.Equal(t, line, readLine(t, c))
}

// readLine reads up to a newline, byte by byte so nothing after it is
// consumed; a guest that stopped answering fails the test, not hangs it.
func readLine(t *testing.T, c net.Conn) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(2*time.Minute)))
	var b []byte
	one := make([]byte, 1)
	for {
		_, err := c.Read(one)
		require.NoError(t, err, "reading from the vsock stream after %q", b)
		if one[0] == '\n' {
			return string(b)
		}
		b = append(b, one[0])
	}
}

// lastCount waits for a count line after offset from and returns it.
func (c *consoleClient) nextCount(from int) (int, int) {
	m, end := c.waitFor(countRE, from)
	n, _ := strconv.Atoi(m[1])
	return n, end
}

// TestSnapshotMigrateRestoreLinuxGuest boots one Linux guest and takes it
// through a snapshot, a live migration to a second VMM process, a failed
// migration whose target is killed, and a restore of the snapshot in a
// third process. Each time the guest's userspace counter continues (it
// never restarts), the checksum of a memory region stays the same and the
// console keeps answering.
func TestSnapshotMigrateRestoreLinuxGuest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := func(name string) string { return filepath.Join(dir, name) }
	tool := filepath.Join(dir, "guestvsock")
	build := exec.Command("go", "build", "-o", tool, "../../vmm/virtio/vsock/testdata/guestvsock")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	toolBin, err := os.ReadFile(tool)
	require.NoError(t, err)
	initrd := guestimage.InitrdWithRun(t, lifecycleScript, map[string]string{"bin/guestvsock": string(toolBin)})
	// Eleven small disks: device state for all of them travels with the
	// VM, and the eleventh sits on IOAPIC pin 16, past the ISA range.
	args := []string{"run", "--kernel", guestimage.Kernel(t), "--initrd", initrd, "--memory", "256M",
		"--console", "socket:" + sock("a.con"), "--api", sock("a.api"), "--vsock", "cid=3,socket=" + sock("a.vsock")}
	for i := 0; i < 11; i++ {
		img := sock(fmt.Sprintf("disk%d.img", i))
		require.NoError(t, os.WriteFile(img, make([]byte, 64<<10), 0o644))
		args = append(args, "--disk", img+",ro")
	}
	a := startVMM(t, args...)
	ca := attach(t, sock("a.con"), a)
	m, pos := ca.waitFor(regexp.MustCompile(`disks (\d+)\r?\n`), 0)
	assert.Equal(t, "11", m[1], "the guest found every virtio disk")
	m, pos = ca.waitFor(regionRE, pos)
	region := m[1]
	// the vsock server starts beside the counter: it may say so before
	// or after any count line
	_, listening := ca.waitFor(vsockListeningRE, pos)
	first, pos := ca.nextCount(pos)
	t.Logf("guest up; counter at %d, region %s", first, region[:12])
	_, pos = ca.nextCount(pos) // the counter is advancing
	pos = max(pos, listening)
	// A vsock stream open across the snapshot and the migration: neither
	// can take it along (its host end is in this process), so the guest
	// must see it reset rather than hang.
	stream := vsockEcho(t, sock("a.vsock"), "before snapshot")
	// The test guest's agent, which /init starts, on the same device.
	assert.Equal(t, "kubevmm test guest (busybox)", agentOSInfo(t, sock("a.vsock")).PrettyName)

	// Snapshot while running; the VM goes on.
	snapDir := filepath.Join(dir, "snap")
	r := vmm(t, "snapshot", "--api", sock("a.api"), "--dir", snapDir)
	require.Equal(t, 0, r.code, "snapshot: %s%s", r.stdout, r.stderr)
	t.Log(r.stdout)
	atSnapshot, pos := ca.nextCount(pos)
	vsockSend(t, stream, "after snapshot") // the source VM's stream goes on

	// Live migration A -> B over a unix socket.
	b := startVMM(t, "run", "--incoming", "unix:"+sock("b.mig"), "--console", "socket:"+sock("b.con"), "--api", sock("b.api"),
		"--vsock-socket", sock("b.vsock"))
	waitForFile(t, sock("b.mig"), b)
	beforeMigration, _ := ca.nextCount(pos)
	r = vmm(t, "migrate", "--api", sock("a.api"), "--to", "unix:"+sock("b.mig"))
	require.Equal(t, 0, r.code, "migrate: %s%s", r.stdout, r.stderr)
	t.Log(r.stdout)
	assert.Contains(t, r.stdout, "migrate: completed")
	assert.Equal(t, 0, a.wait(time.Minute), "the source VMM exits 0 once its guest runs on the target; stderr: %s", a.stderr.String())

	cb := attach(t, sock("b.con"), b)
	afterMigration, bpos := cb.nextCount(cb.len())
	assert.Greater(t, afterMigration, beforeMigration, "the counter continues on the target, no reset")
	cb.send("sum")
	m, bpos = cb.waitFor(regionRE, bpos)
	assert.Equal(t, region, m[1], "memory region intact after migration")
	cb.send("hello after migration")
	cb.waitFor(regexp.MustCompile(`echo: hello after migration`), bpos)
	// The guest learnt that its stream is gone, and serves new ones.
	_, bpos = cb.waitFor(vsockEndedRE, 0)
	cb.waitFor(vsockListeningRE, bpos)
	vsockEcho(t, sock("b.vsock"), "after migration").Close()
	// the agent's listener came along: it answers on the target's socket
	assert.Equal(t, "kubevmm test guest (busybox)", agentOSInfo(t, sock("b.vsock")).PrettyName)

	// A migration whose target dies half-way: the source keeps its guest.
	// Its own vsock socket: B still serves the one B's VM was saved with.
	d := startVMM(t, "run", "--incoming", "unix:"+sock("d.mig"), "--console", "none", "--vsock-socket", sock("d.vsock"))
	waitForFile(t, sock("d.mig"), d)
	mig := vmmCommand("migrate", "--api", sock("b.api"), "--to", "unix:"+sock("d.mig"), "--bandwidth", "1M")
	var migOut bytes.Buffer
	mig.Stdout, mig.Stderr = &migOut, &migOut
	require.NoError(t, mig.Start())
	waitMigrating(t, sock("b.api"))
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGKILL))
	err = mig.Wait()
	require.Error(t, err, "migrate reports the failure: %s", migOut.String())
	assert.Contains(t, migOut.String(), "keeps running here")
	stillCounting, bpos := cb.nextCount(cb.len())
	next, _ := cb.nextCount(bpos)
	assert.Greater(t, next, stillCounting, "the source's counter still advances after the failed migration")
	r = vmm(t, "status", "--api", sock("b.api"))
	assert.Contains(t, r.stdout, `"state": "Running"`)

	// Restore the snapshot in a third process: it continues from the
	// snapshot, not from boot.
	c := startVMM(t, "restore", "--snapshot", snapDir, "--console", "socket:"+sock("c.con"), "--vsock-socket", sock("c.vsock"))
	cc := attach(t, sock("c.con"), c)
	restored, cpos := cc.nextCount(cc.len())
	assert.GreaterOrEqual(t, restored, atSnapshot-1, "the restored counter continues from the snapshot, not from boot")
	assert.LessOrEqual(t, restored, beforeMigration, "it is the snapshot's guest, taken before the migration")
	cc.send("sum")
	m, _ = cc.waitFor(regionRE, cpos)
	assert.Equal(t, region, m[1], "memory region intact after restore")
	_, cpos = cc.waitFor(vsockEndedRE, 0)
	cc.waitFor(vsockListeningRE, cpos)
	vsockEcho(t, sock("c.vsock"), "after restore").Close()
	cc.send("quit")
	assert.Equal(t, 0, c.wait(3*time.Minute), "restored guest powers off cleanly; stderr: %s", c.stderr.String())

	cb.send("quit")
	assert.Equal(t, 0, b.wait(3*time.Minute), "migrated guest powers off cleanly; stderr: %s", b.stderr.String())

	// The snapshot's files damaged: a clear error, status 2.
	broken := filepath.Join(dir, "broken")
	require.NoError(t, os.MkdirAll(broken, 0o700))
	copyFile(t, filepath.Join(snapDir, snapshot.ManifestFile), filepath.Join(broken, snapshot.ManifestFile))
	require.NoError(t, os.WriteFile(filepath.Join(broken, snapshot.MemoryFile), []byte("short"), 0o600))
	assertOneLineError(t, vmm(t, "restore", "--snapshot", broken), "truncated")
}

// agentOSInfo asks the guest agent behind the vsock socket path for
// guest-get-osinfo. The agent may still be starting: until it answers,
// the question is asked again.
func agentOSInfo(t *testing.T, path string) guestagent.OSInfo {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		conn, err := guestagent.DialVsock(ctx, path, guestagent.Port)
		if err == nil {
			c := guestagent.NewClient(conn)
			var info guestagent.OSInfo
			err = c.Execute(ctx, guestagent.CmdOSInfo, nil, &info)
			c.Close()
			if err == nil {
				cancel()
				return info
			}
		}
		cancel()
		require.True(t, time.Now().Before(deadline), "the guest agent never answered: %v", err)
		time.Sleep(100 * time.Millisecond) // the agent is starting
	}
}

func waitForFile(t *testing.T, path string, p *vmmProc) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case err := <-p.exited:
			t.Fatalf("vmm exited early: %v: %s", err, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(20 * time.Millisecond) // polling for a file another process creates
	}
}

// waitMigrating waits until the VMM reports a migration in progress.
func waitMigrating(t *testing.T, api string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		r := vmm(t, "status", "--api", api)
		if bytes.Contains([]byte(r.stdout), []byte(`"Migrating"`)) {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling the control API
	}
	t.Fatal("migration never started")
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
}
