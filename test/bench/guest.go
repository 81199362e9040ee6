package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

// guestScript is the guest's /etc/kubevmm/run in the storage, network and
// migration sections: helpers the bench calls by name over the console,
// then a loop that runs one command line at a time and reports its status.
// Shell builtins wherever it matters: on hosts that emulate guest kernel
// mode every fork+exec costs most of a second.
const guestScript = `#!/bin/sh
stty -echo # keep the bench's command lines out of the output

# timed CMD...: run CMD, again until a second has passed (the clock ticks in
# 10 ms), and print the guest's clock before and after and the count
timed() {
	read -r t0 _ < /proc/uptime
	n=0
	while :; do
		"$@" || return
		n=$((n + 1))
		read -r t1 _ < /proc/uptime
		# centiseconds; "1${frac} - 100" keeps a fraction such as 08 from
		# reading as octal (a guest up for less than a second, as QEMU's)
		[ $((${t1%.*} * 100 + 1${t1#*.} - ${t0%.*} * 100 - 1${t0#*.})) -ge 100 ] && break
	done
	echo "bench-time $t0 $t1 $n"
}

# ticker_start: print a line ten times a second; read -t on a fifo nobody
# writes sleeps without starting a process
ticker_start() {
	mkfifo /tmp/tick
	(exec 3<>/tmp/tick; while :; do echo bench-tick; read -t 0.1 x <&3; done) &
	ticker=$!
}

# dirty RATE SET: in the background, rewrite a SET MiB working set at about
# RATE MiB/s. The rate comes from busy work between writes, calibrated to
# this guest's speed, so the writer is CPU-bound and slows down when the
# VMM throttles the vCPU (auto-converge).
dirty() {
	awk -v rate="$1" -v set="$2" -f /etc/kubevmm/dirty.awk &
	dirtier=$!
}

# wstat: the guest's clock, the MiB the writer has written so far and its
# process state (R, S, ..., Z; gone once reaped), builtins only
wstat() {
	read -r up _ < /proc/uptime
	st=gone
	if read -r s 2>/dev/null < /proc/$dirtier/stat; then
		set -- $s
		st=$3
	fi
	read -r mib < /tmp/dirty.mib && echo "bench-wstat $up $mib $st"
}

echo bench-ready
# each line is "ID COMMAND"; the ID comes back with the status, so the bench
# matches answers to commands across snapshot, restore and migration
while read -r id line; do
	eval "$line"
	echo "bench-done $id $?"
done
`

// dirtyAWK is the memory writer behind the guest's dirty helper. Its
// working set is a numeric array, whose elements awk rewrites in place: no
// allocation, system call or page fault once it is built (each of those
// costs milliseconds where guest kernel mode is emulated). now() is the
// guest's clock in seconds, read in user mode (srand returns the previous
// seed, the time of the first call).
const dirtyAWK = `function now() { srand(); return srand() }
function heap(  l, f, r) {
	while ((getline l < "/proc/self/status") > 0)
		if (l ~ /^RssAnon:/) { split(l, f); r = f[2] * 1024 }
	close("/proc/self/status")
	return r
}
BEGIN {
	h = heap()
	for (n = 0; heap() - h < set * 1048576; n += 4096)
		for (i = n; i < n + 4096; i++) a[i] = i
	per = set * 1048576 / n
	# elements written per second, then busy iterations per second, 2 s each
	t = now(); while (now() == t) {}
	t = now(); w = 1
	while (now() < t + 2) { for (j = 0; j < 4096; j++) { a[k] = j; if (++k == n) k = 0 }; w += 4096 }
	t = now(); loops = 1
	while (now() < t + 2) { for (j = 0; j < 1000; j++) x++; loops += 1000 }
	# busy iterations per 64 elements written
	busy = int((64 * per / (rate * 1048576) - 64 * 2 / w) * loops / 2)
	if (busy < 0) busy = 0
	# about four times a second at the aimed rate, the MiB written so far
	# into a file, for the bench (a few system calls)
	every = int(rate * 1048576 / per / 4 / 64) * 64
	if (every < 64) every = 64
	print 0 > "/tmp/dirty.mib"; close("/tmp/dirty.mib")
	printf "bench-dirty max=%.1f busy=%d elements=%d\n", w / 2 * per / 1048576, busy, n; fflush()
	for (;;) {
		for (j = 0; j < 64; j++) { a[k] = j; if (++k == n) k = 0 }
		for (j = 0; j < busy; j++) x++
		if ((c += 64) % every == 0) { printf "%.4f\n", c * per / 1048576 > "/tmp/dirty.mib"; close("/tmp/dirty.mib") }
	}
}
`

// writeInitrd writes the base initramfs plus a cpio with the guest script
// into dir.
func writeInitrd(guestDir, dir string) (string, error) {
	base, err := os.ReadFile(filepath.Join(guestDir, "initramfs.cpio"))
	if err != nil {
		return "", fmt.Errorf("guest initramfs: %w", err)
	}
	extra := guestimage.CPIO([]guestimage.File{
		{Name: "etc/kubevmm/run", Mode: 0o100755, Data: []byte(guestScript)},
		{Name: "etc/kubevmm/dirty.awk", Mode: 0o100644, Data: []byte(dirtyAWK)},
	})
	out := filepath.Join(dir, "bench-initrd.cpio")
	if err := os.WriteFile(out, append(base, extra...), 0o644); err != nil {
		return "", fmt.Errorf("write initrd: %w", err)
	}
	return out, nil
}

// guestCmdline is the command line of the section guests: quiet, so kernel
// messages stay out of the command output.
const guestCmdline = "console=ttyS0 reboot=k panic=-1 quiet"

var readyRE = regexp.MustCompile(`bench-ready\r?\n`)

// kvm is one kubevmm process running (or receiving) a guest, with its
// console socket, control socket and report file.
type kvm struct {
	name   string
	p      *proc
	con    *console
	api    *api.Client
	report string
	memMiB int
	start  time.Time
}

// kvmOpts configures startKubevmm.
type kvmOpts struct {
	name   string
	args   []string // what to run: run --kernel ..., restore ...
	netns  string   // run inside this network namespace (for its taps)
	memMiB int
}

// startKubevmm starts `vmm ARGS --console socket:... --api ... --report ...`
// in e.work and connects to its console.
func (e *env) startKubevmm(ctx context.Context, o kvmOpts) (*kvm, error) {
	dir := filepath.Join(e.work, o.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("%s: %w", o.name, err)
	}
	k := &kvm{name: o.name, report: filepath.Join(dir, "report.json"), memMiB: o.memMiB,
		api: api.NewClient(filepath.Join(dir, "api.sock"))}
	args := append(append([]string(nil), o.args...),
		"--console", "socket:"+filepath.Join(dir, "console.sock"),
		"--api", filepath.Join(dir, "api.sock"), "--report", k.report)
	cmd := exec.Command(e.vmm, args...)
	if o.netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", o.netns, e.vmm}, args...)...)
	}
	k.start = time.Now()
	p, err := startProc(&e.cl, cmd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.name, err)
	}
	k.p = p
	if err := k.attach(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// attach connects to the VM's console.
func (k *kvm) attach(ctx context.Context) error {
	if k.con != nil {
		k.con.close()
	}
	c, err := dialConsole(ctx, filepath.Join(filepath.Dir(k.report), "console.sock"), k.p.exited)
	if err != nil {
		return fmt.Errorf("%s: %w", k.name, err)
	}
	k.con = c
	return nil
}

// bootKubevmm boots the test guest with the bench's guest script and waits
// until the script is ready for commands.
func (e *env) bootKubevmm(ctx context.Context, name string, memMiB int, netns string, devices ...string) (*kvm, error) {
	args := append([]string{"run", "--kernel", e.kernel, "--initrd", e.initrd, "--cmdline", guestCmdline,
		"--memory", fmt.Sprintf("%dM", memMiB), "--cpus", "1"}, devices...)
	k, err := e.startKubevmm(ctx, kvmOpts{name: name, args: args, netns: netns, memMiB: memMiB})
	if err != nil {
		return nil, err
	}
	log("%s: booting kubevmm guest (%d MiB)", name, memMiB)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if _, err := k.con.waitFor(bctx, readyRE); err != nil {
		return nil, fmt.Errorf("%s: boot: %w", name, err)
	}
	log("%s: guest ready after %v", name, time.Since(k.start).Round(time.Second))
	return k, nil
}

// stop ends the VM through its control API and waits for the process.
func (k *kvm) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.api.Stop(ctx); err != nil {
		k.p.kill()
		return fmt.Errorf("%s: stop: %w", k.name, err)
	}
	if k.con != nil {
		k.con.close()
	}
	return k.p.wait(time.Minute)
}

// kvmReport is the part of `vmm --report` the bench reads.
type kvmReport struct {
	VCPUEntryMs   float64          `json:"vcpu_entry_ms"`
	FirstOutputMs float64          `json:"first_output_ms"`
	Phases        []phase          `json:"phases_ms"`
	Migration     *migration.Stats `json:"migration"`
}

func (k *kvm) readReport() (kvmReport, error) {
	var r kvmReport
	b, err := os.ReadFile(k.report)
	if err != nil {
		return r, fmt.Errorf("%s: report: %w", k.name, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: report: %w", k.name, err)
	}
	return r, nil
}

var listeningRE = regexp.MustCompile(`msg="waiting for a migration".* address=(\S+)`)

// incomingKubevmm starts `vmm run --incoming tcp:127.0.0.1:0` and returns
// it with the address it listens on (from its -v log: the kernel picks
// the port, so no port is guessed).
func (e *env) incomingKubevmm(ctx context.Context, name string, memMiB int) (*kvm, string, error) {
	dir := filepath.Join(e.work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	args := []string{"run", "--incoming", "tcp:127.0.0.1:0", "-v",
		"--console", "socket:" + filepath.Join(dir, "console.sock"),
		"--api", filepath.Join(dir, "api.sock"), "--report", filepath.Join(dir, "report.json")}
	cmd := exec.Command(e.vmm, args...)
	cmd.Stderr = pw
	p, err := startProc(&e.cl, cmd)
	// The pipe's ends are in-process: closing them loses nothing.
	_ = pw.Close() // the child holds its own copy
	if err != nil {
		_ = pr.Close()
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	k := &kvm{name: name, p: p, report: filepath.Join(dir, "report.json"), memMiB: memMiB,
		api: api.NewClient(filepath.Join(dir, "api.sock")), start: time.Now()}
	addr := make(chan string, 1)
	go func() {
		// keep draining: the VMM logs to stderr for as long as it runs
		defer func() { _ = pr.Close() }()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			_, _ = p.stderr.Write([]byte(sc.Text() + "\n")) // an in-memory buffer
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- "tcp:" + m[1]
			}
		}
	}()
	select {
	case a := <-addr:
		return k, a, nil
	case <-p.done:
		return nil, "", fmt.Errorf("%s: %v", name, p.exited())
	case <-ctx.Done():
		return nil, "", fmt.Errorf("%s: waiting for the listening address: %w", name, context.Cause(ctx))
	}
}

// migrate runs `vmm migrate` from src to dst (listening at addr) with the
// given extra flags. On success src exits and its report carries the
// statistics; on failure the guest stays on src, whose control API has
// them.
func (e *env) migrate(ctx context.Context, src, dst *kvm, addr string, flags ...string) (migration.Stats, error) {
	args := append([]string{"migrate", "--api", filepath.Join(filepath.Dir(src.report), "api.sock"), "--to", addr}, flags...)
	cmd := exec.CommandContext(ctx, e.vmm, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		st, serr := src.api.Migration(ctx)
		if serr != nil {
			return migration.Stats{}, fmt.Errorf("vmm migrate: %v: %s (and migration status: %v)", err, lastLines(string(out), 2), serr)
		}
		return st.Stats, fmt.Errorf("vmm migrate: %v: %s", err, lastLines(strings.TrimSpace(string(out)), 1))
	}
	if err := src.p.wait(time.Minute); err != nil {
		return migration.Stats{}, fmt.Errorf("%s: after migration: %w", src.name, err)
	}
	r, err := src.readReport()
	if err != nil {
		return migration.Stats{}, err
	}
	if r.Migration == nil {
		return migration.Stats{}, fmt.Errorf("%s: report has no migration statistics", src.name)
	}
	return *r.Migration, nil
}
