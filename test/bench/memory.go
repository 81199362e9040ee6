package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/procmem"
)

// The memory section: where the VMM's resident memory goes beyond guest
// RAM, for a booted guest with every kind of device and for the same
// guest restored from a snapshot, and where the restore's time to its
// first vCPU entry goes.

const memGuestMiB = 128

// Figures of the previous runs (the full bench of 2026-11-22), beside
// which the section prints its own.
const (
	prevOverheadKiB    = 29212 // boot section: RSS minus guest RAM at /init
	prevRestoreRSSKiB  = 24464 // restore: RSS at first output, guest RAM included
	prevRestoreEntry   = 7400 * time.Microsecond
	prevRestoreFirstMs = 119.6
)

type memRun struct {
	mem         procmem.Breakdown // idle, from the control API
	vcpuEntry   time.Duration
	firstOutput time.Duration
	phases      []phase
	err         error
}

type phase struct {
	Name string  `json:"name"`
	Ms   float64 `json:"ms"`
}

type memResults struct {
	booted   memRun
	restored []memRun // restores of the booted guest's snapshot
	idle     time.Duration
}

// memIdle is how long the guest idles before the VMM's memory is read.
const memIdle = 5 * time.Second

func (e *env) memorySection(ctx context.Context) memResults {
	res := memResults{idle: memIdle}
	fail := func(err error) memResults {
		res.booted.err = err
		return res
	}
	nn, err := e.newNetns(1)
	if err != nil {
		return fail(fmt.Errorf("network namespace: %w", err))
	}
	img := filepath.Join(e.work, "memory-disk.img")
	if err := writeDiskImage(img); err != nil {
		return fail(err)
	}
	devices := []string{"--disk", img, "--net", "tap=" + nn.taps[0] + ",mac=52:54:00:12:34:56", "--rng",
		"--vsock", "cid=3,socket=" + filepath.Join(e.work, "vsock.sock")}
	k, err := e.bootKubevmm(ctx, "mem128", memGuestMiB, nn.ns.Name, devices...)
	if err != nil {
		return fail(err)
	}
	res.booted = idleMeasure(ctx, k)
	log("memory: booted: %s", describeMem(res.booted))
	// The snapshot is taken with the ticker running, so that the restored
	// guest prints at once.
	dir := filepath.Join(e.work, "mem-snapshot")
	err = snapshotTicking(ctx, k, dir)
	if serr := k.stop(); err == nil {
		err = serr
	}
	if err != nil {
		res.restored = []memRun{{err: err}}
		return res
	}
	// The booted VMM has let go of the disk and the vsock socket.
	for i := 0; i < e.runs; i++ {
		run := e.restoreMeasured(ctx, dir, nn.ns.Name)
		log("memory: restore %d: %s", i, describeMem(run))
		res.restored = append(res.restored, run)
	}
	return res
}

// snapshotTicking snapshots k's guest into dir with its ticker running.
func snapshotTicking(ctx context.Context, k *kvm, dir string) error {
	if _, err := k.con.run(ctx, "ticker_start"); err != nil {
		return err
	}
	if _, err := k.con.waitFor(ctx, tickRE); err != nil {
		return err
	}
	if _, err := k.api.Snapshot(ctx, api.SnapshotRequest{Dir: dir}); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// restoreMeasured restores the snapshot in dir, waits for the guest's
// first output, measures the VMM and stops it.
func (e *env) restoreMeasured(ctx context.Context, dir, netns string) memRun {
	r, err := e.startKubevmm(ctx, kvmOpts{name: "mem128-restore", args: []string{"restore", "--snapshot", dir},
		netns: netns, memMiB: memGuestMiB})
	if err != nil {
		return memRun{err: err}
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := r.con.waitFor(tctx, tickRE); err != nil {
		r.p.kill()
		return memRun{err: fmt.Errorf("restored guest: %w", err)}
	}
	run := idleMeasure(ctx, r)
	if err := r.stop(); err != nil && run.err == nil {
		return memRun{err: err}
	}
	if run.err != nil {
		return run
	}
	rep, err := r.readReport()
	if err != nil {
		return memRun{err: err}
	}
	run.vcpuEntry, run.firstOutput, run.phases = ms(rep.VCPUEntryMs), ms(rep.FirstOutputMs), rep.Phases
	return run
}

// idleMeasure lets k's guest idle and reads where the VMM's memory goes
// (the control API's metrics).
func idleMeasure(ctx context.Context, k *kvm) memRun {
	time.Sleep(memIdle)
	var run memRun
	raw, err := k.api.Metrics(ctx)
	if err == nil {
		// The map came from JSON; back through JSON it takes the typed shape.
		var b []byte
		if b, err = json.Marshal(raw["memory"]); err == nil {
			err = json.Unmarshal(b, &run.mem)
		}
	}
	if err == nil && run.mem.RSSKiB == 0 {
		err = fmt.Errorf("no memory breakdown in its metrics")
	}
	if err != nil {
		return memRun{err: fmt.Errorf("%s: metrics: %w", k.name, err)}
	}
	return run
}

func describeMem(r memRun) string {
	if r.err != nil {
		return "failed: " + r.err.Error()
	}
	return fmt.Sprintf("overhead %d KiB (RSS %d, guest RAM %d), vCPU entry %v", r.mem.OverheadKiB, r.mem.RSSKiB, r.mem.GuestRAMKiB, r.vcpuEntry)
}

func (res memResults) render(b *strings.Builder) {
	fmt.Fprintf(b, "## VMM memory and restore: kubevmm, test guest, 1 vCPU, %d MiB, a disk, a NIC, rng and vsock\n\n", memGuestMiB)
	fmt.Fprintf(b, "Method: `vmm run` boots the test guest with a raw virtio disk, a virtio-net NIC on a tap in a network namespace, virtio-rng and virtio-vsock; "+
		"once its script waits on the console it idles %v and is measured, then snapshotted (a shell loop in it printing ten lines a second) and stopped; "+
		"`vmm restore` of the snapshot (same devices), %d times, runs until the guest's first output, idles %v and is measured. "+
		"The breakdown is the VMM's own (`memory` in the control API's metrics, as in `--report`): each mapping's resident pages from /proc/self/smaps, guest RAM found by its address "+
		"(the overhead is RSS minus exactly that), anonymous memory split by the Go runtime's own accounts (runtime/metrics). "+
		"The previous figures are the full bench of 2026-11-22, for guests without devices (boot section: RSS minus guest RAM when /init reported; "+
		"snapshot section: the restore's timings, and its RSS with guest RAM included, as only RssAnon/RssFile/RssShmem were read then).\n\n", res.idle, len(res.restored), res.idle)
	var ok []memRun
	for _, r := range res.restored {
		if r.err == nil {
			ok = append(ok, r)
		}
	}
	if res.booted.err != nil || len(ok) == 0 {
		for _, r := range append([]memRun{res.booted}, res.restored...) {
			if r.err != nil {
				fmt.Fprintf(b, "Failed: %s\n\n", oneLine(r.err))
				return
			}
		}
	}
	// the restore whose vCPU entry is the median
	slices.SortFunc(ok, func(x, y memRun) int { return int(x.vcpuEntry - y.vcpuEntry) })
	med := ok[len(ok)/2]
	bo, re := res.booted.mem, med.mem
	b.WriteString("| resident memory (KiB) | booted | restored (the median restore below) |\n|---|---|---|\n")
	row := func(name string, x, y uint64) { fmt.Fprintf(b, "| %s | %d | %d |\n", name, x, y) }
	row("RSS", bo.RSSKiB, re.RSSKiB)
	row("guest RAM resident (what the guest touched; not overhead)", bo.GuestRAMKiB, re.GuestRAMKiB)
	fmt.Fprintf(b, "| **VMM overhead** (RSS minus guest RAM) | **%d** (previous: %d) | **%d** (previous RSS: %d, guest RAM included) |\n",
		bo.OverheadKiB, prevOverheadKiB, re.OverheadKiB, prevRestoreRSSKiB)
	row("· the binary's pages (code, read-only data, data)", bo.TextKiB, re.TextKiB)
	row("· other files (shared libraries, vDSO)", bo.FilesKiB, re.FilesKiB)
	row("· anonymous", bo.AnonKiB, re.AnonKiB)
	row("·· Go heap in use (objects and the rest of their spans)", bo.HeapKiB, re.HeapKiB)
	row("·· Go heap free, not yet returned", bo.HeapFreeKiB, re.HeapFreeKiB)
	row("·· stacks (goroutines, runtime threads)", bo.StacksKiB, re.StacksKiB)
	row("·· other anonymous (runtime metadata)", bo.OtherAnonKiB, re.OtherAnonKiB)
	fmt.Fprintf(b, "| goroutines / threads | %d / %d | %d / %d |\n", bo.Goroutines, bo.Threads, re.Goroutines, re.Threads)

	var entries, firsts []string
	var fo []time.Duration
	for _, r := range ok {
		entries = append(entries, fmtD(r.vcpuEntry))
		fo = append(fo, r.firstOutput)
	}
	slices.Sort(fo)
	for _, d := range fo {
		firsts = append(firsts, fmtD(d))
	}
	fmt.Fprintf(b, "\n| restore, median of %d | now | previous |\n|---|---|---|\n", len(ok))
	fmt.Fprintf(b, "| process start → vCPU entry (first KVM_RUN) | %s (all: %s) | %s |\n", fmtD(med.vcpuEntry), strings.Join(entries, ", "), fmtD(prevRestoreEntry))
	fmt.Fprintf(b, "| process start → first console output | %s (all: %s) | %.1f ms |\n", fmtD(fo[len(fo)/2]), strings.Join(firsts, ", "), prevRestoreFirstMs)
	b.WriteString("\nWhere the median restore's time to vCPU entry goes (`--report`'s `phases_ms`: when each step ended, from process start): ")
	var parts []string
	for _, p := range med.phases {
		parts = append(parts, fmt.Sprintf("%s %.2f ms", p.Name, p.Ms))
	}
	b.WriteString(strings.Join(parts, ", ") + ". The first output comes from the guest's own loop, which prints every 100 ms: it follows the vCPU entry by up to that, plus the guest kernel's emulated work.\n")
	for i, r := range res.restored {
		if r.err != nil {
			fmt.Fprintf(b, "\nRestore %d failed: %s\n", i, oneLine(r.err))
		}
	}
}
