package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/migration"
)

// The migration section: live migration of idle guests of several sizes
// and of a guest dirtying memory faster than a bandwidth cap, with and
// without auto-converge, on loopback TCP; and snapshot restore. Guests are
// reused: the 128 MiB guest is snapshotted, then migrated idle, then runs
// the memory writer and is migrated twice more.

const (
	// The guest's writer, and the migration bandwidth cap of the dirty
	// runs: the lowest cap `vmm migrate` takes, a writer twice as fast, a
	// rate the writer reaches under QEMU's TCG too.
	dirtyRateMiB = 2
	dirtySetMiB  = 1
	capMiB       = 1
	// downtimeTarget is both VMMs' default longest pause for the final copy.
	downtimeTarget = 300 * time.Millisecond
	// dirtyTimeout bounds a dirty run: QEMU keeps pre-copying a guest that
	// never converges, kubevmm forces stop-and-copy after 30 rounds.
	dirtyTimeout = 100 * time.Second
)

// migRow is one migration.
type migRow struct {
	what, vmm   string
	memMiB      int
	rounds      int64
	sent        int64
	downtime    time.Duration
	total       time.Duration
	throttle    float64 // highest auto-converge throttle, 0..1
	lastDirty   int64   // dirty at the last pre-copy round (kubevmm)
	dirtyRate   float64 // bytes/s the VMM saw the guest dirty, last measured in pre-copy
	writerMax   float64 // MiB/s the writer could reach, if below its aim
	writerRate  float64 // MiB/s the writer wrote during the run by the guest's clock, -1 if unknown
	writerState string  // the writer's process state after the run
	converged   string  // dirty runs: whether pre-copy converged
	err         error
}

// snapRow is the snapshot and restore of the 128 MiB guest.
type snapRow struct {
	pausedMs    float64
	storedBytes int64
	firstOutput time.Duration // restore: process start → first console output (VMM's report)
	seen        time.Duration // the same, as the bench saw it on the console socket
	vcpuEntry   time.Duration
	rss         map[string]uint64 // restore process, when its first output reached the bench
	memMiB      int
	err         error
}

type migrationResults struct {
	idle, dirty []migRow
	snap        snapRow
	accel       qemu.Accel
	qemuVer     qemuVersion
}

// idleSizes are the idle guests' RAM sizes (MiB); the first is also the
// guest of the snapshot and the dirty runs.
var idleSizes = []int{128, 512, 1024}

func (e *env) migrationSection(ctx context.Context) migrationResults {
	res := migrationResults{accel: e.accel, qemuVer: e.qemuVer}
	snap, idle, dirty := e.kubevmm128(ctx)
	res.snap, res.idle, res.dirty = snap, []migRow{idle}, dirty
	for _, mem := range idleSizes[1:] {
		res.idle = append(res.idle, e.kubevmmIdle(ctx, mem))
	}
	qidle, qdirty := e.qemuMigrations(ctx)
	res.idle = append(res.idle, qidle...)
	res.dirty = append(res.dirty, qdirty...)
	// by size, kubevmm first
	slices.SortStableFunc(res.idle, func(a, b migRow) int { return a.memMiB - b.memMiB })
	return res
}

var (
	tickRE  = regexp.MustCompile(`bench-tick\r?\n`)
	dirtyRE = regexp.MustCompile(`bench-dirty max=([0-9.e+]+) busy=(\d+)`)
	wstatRE = regexp.MustCompile(`bench-wstat ([0-9.]+) ([0-9.]+) (\S+)`)
)

func sizeName(mem int) string {
	if mem >= 1024 && mem%1024 == 0 {
		return fmt.Sprintf("%d GiB", mem/1024)
	}
	return fmt.Sprintf("%d MiB", mem)
}

// writerSample is the guest's clock and what the writer had written then.
type writerSample struct {
	uptime, mib float64
	state       string // the writer's process state
	ok          bool
}

// sampleWriter asks the guest how much the writer has written. The
// writer rewrites its count file a few times a second: a read that meets
// it truncated is tried again.
func sampleWriter(ctx context.Context, con *console) writerSample {
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		var out string
		if out, err = con.run(ctx, "wstat"); err != nil {
			continue
		}
		m := wstatRE.FindStringSubmatch(out)
		if m == nil {
			err = fmt.Errorf("no figures in %q", lastLines(out, 3))
			continue
		}
		up, _ := strconv.ParseFloat(m[1], 64)
		mib, _ := strconv.ParseFloat(m[2], 64)
		return writerSample{uptime: up, mib: mib, state: m[3], ok: true}
	}
	log("migration: writer progress: %v", err)
	return writerSample{}
}

// writerRate is the writer's rate between a and b by the guest's clock,
// -1 if either sample is missing.
func writerRate(a, b writerSample) float64 {
	if !a.ok || !b.ok || b.uptime <= a.uptime {
		return -1
	}
	return (b.mib - a.mib) / (b.uptime - a.uptime)
}

// kubevmm128 boots the 128 MiB guest once and takes it through a snapshot
// and restore, an idle migration, and the two dirty migrations.
func (e *env) kubevmm128(ctx context.Context) (snap snapRow, idle migRow, dirty []migRow) {
	mem := idleSizes[0]
	snap = snapRow{memMiB: mem}
	idle = migRow{what: sizeName(mem) + ", idle", vmm: "kubevmm", memMiB: mem}
	a, err := e.bootKubevmm(ctx, "mig128-a", mem, "")
	if err != nil {
		snap.err, idle.err = err, err
		return snap, idle, nil
	}
	snap = e.snapshotAndRestore(ctx, a, snap)

	b, addr, err := e.incomingKubevmm(ctx, "mig128-b", mem)
	if err != nil {
		idle.err = err
		a.p.kill()
		return snap, idle, nil
	}
	st, err := e.migrate(ctx, a, b, addr)
	idle = kubevmmRow(idle, st, err)
	log("migration: %s: %s", idle.what, describe(idle))
	if err != nil {
		a.p.kill()
		b.p.kill()
		return snap, idle, nil
	}
	if err := b.attach(ctx); err != nil {
		b.p.kill()
		return snap, idle, []migRow{{what: "writer", vmm: "kubevmm", err: err}}
	}
	return snap, idle, e.kubevmmDirty(ctx, b)
}

// snapshotAndRestore snapshots a's guest with its ticker running, so that
// the restored guest prints as soon as it runs, then restores it in a new
// process. a's guest goes on, without the ticker.
func (e *env) snapshotAndRestore(ctx context.Context, a *kvm, snap snapRow) snapRow {
	if _, err := a.con.run(ctx, "ticker_start"); err != nil {
		snap.err = err
		return snap
	}
	if _, err := a.con.waitFor(ctx, tickRE); err != nil {
		snap.err = err
		return snap
	}
	dir := filepath.Join(e.work, "snapshot")
	sr, err := a.api.Snapshot(ctx, api.SnapshotRequest{Dir: dir})
	if err != nil {
		snap.err = fmt.Errorf("snapshot: %w", err)
		return snap
	}
	snap.pausedMs, snap.storedBytes = sr.PausedMs, sr.MemoryBytes
	if _, err := a.con.run(ctx, "kill $ticker"); err != nil {
		snap.err = err
		return snap
	}
	return e.restore(ctx, dir, snap)
}

// kubevmmDirty starts the memory writer on holder's guest and migrates it
// without, then with auto-converge, then with post-copy; each successful
// run moves it on.
func (e *env) kubevmmDirty(ctx context.Context, holder *kvm) []migRow {
	var dirty []migRow
	// The rows are measured; a failed stop kills the VMM itself.
	defer func() { _ = holder.stop() }()
	writerMax, err := startWriter(ctx, holder.con)
	if err != nil {
		return []migRow{{what: "writer", vmm: "kubevmm", err: err}}
	}
	for i, mode := range []string{"", "--auto-converge", "--post-copy"} {
		row := migRow{what: dirtyName(mode == "--auto-converge"), vmm: "kubevmm", writerMax: writerMax}
		if mode == "--post-copy" {
			row.what += ", post-copy"
		}
		dst, addr, err := e.incomingKubevmm(ctx, fmt.Sprintf("mig128-dirty%d", i), holder.memMiB)
		if err != nil {
			row.err = err
			return append(dirty, row)
		}
		flags := []string{"--bandwidth", fmt.Sprintf("%dM", capMiB), "--timeout", dirtyTimeout.String()}
		if mode != "" {
			flags = append(flags, mode)
		}
		before := sampleWriter(ctx, holder.con)
		st, err := e.migrate(ctx, holder, dst, addr, flags...)
		row = kubevmmRow(row, st, err)
		row.converged = kubevmmConverged(st, err)
		if st.Rounds > 0 {
			row.err = nil // the statistics and converged say what happened
		}
		if err != nil {
			dst.p.kill() // the guest stays on holder
		} else {
			holder = dst
			if err := holder.attach(ctx); err != nil {
				row.writerRate = -1
				log("migration: %s: %s", row.what, describe(row))
				return append(dirty, row)
			}
		}
		after := sampleWriter(ctx, holder.con)
		row.writerRate, row.writerState = writerRate(before, after), after.state
		log("migration: %s: %s", row.what, describe(row))
		dirty = append(dirty, row)
	}
	return dirty
}

func dirtyName(autoConverge bool) string {
	s := fmt.Sprintf("%s, writer at %d MiB/s over %d MiB, cap %d MiB/s", sizeName(idleSizes[0]), dirtyRateMiB, dirtySetMiB, capMiB)
	if autoConverge {
		return s + ", auto-converge"
	}
	return s
}

// startWriter starts the guest's memory writer and returns the highest
// rate it measured it could reach (MiB/s).
func startWriter(ctx context.Context, con *console) (float64, error) {
	if _, err := con.run(ctx, fmt.Sprintf("dirty %d %d", dirtyRateMiB, dirtySetMiB)); err != nil {
		return 0, err
	}
	m, err := con.waitFor(ctx, dirtyRE)
	if err != nil {
		return 0, fmt.Errorf("memory writer: %w", err)
	}
	max, _ := strconv.ParseFloat(m[1], 64)
	log("migration: guest memory writer calibrated: up to %.0f MiB/s, %s busy iterations per 64 writes", max, m[2])
	return max, nil
}

func kubevmmRow(row migRow, st migration.Stats, err error) migRow {
	row.rounds, row.sent, row.downtime, row.total = int64(st.Rounds), st.BytesSent, st.Downtime, st.Total
	row.throttle, row.lastDirty, row.dirtyRate = st.Throttle, st.Remaining, st.DirtyRate
	row.err = err
	return row
}

// kubevmmConverged applies kubevmm's own rule to its statistics: pre-copy
// converged if what was dirty at the last round fits the downtime target
// at the capped rate; otherwise stop-and-copy was forced by the round
// limit.
func kubevmmConverged(st migration.Stats, err error) string {
	if err != nil {
		return "no: " + oneLine(err)
	}
	if st.PostCopy {
		return fmt.Sprintf("no: post-copy after %d rounds, %d pages fetched on demand", st.Rounds, st.RequestedPages)
	}
	rate := min(st.Bandwidth, capMiB<<20)
	if rate > 0 && float64(st.Remaining)/rate <= downtimeTarget.Seconds() {
		return "yes"
	}
	return fmt.Sprintf("no: stop-and-copy forced after %d rounds", st.Rounds)
}

// restore runs `vmm restore` on the snapshot and measures how soon the
// restored guest prints and how much memory the VMM holds then.
func (e *env) restore(ctx context.Context, dir string, snap snapRow) snapRow {
	r, err := e.startKubevmm(ctx, kvmOpts{name: "restore", args: []string{"restore", "--snapshot", dir}, memMiB: snap.memMiB})
	if err != nil {
		snap.err = err
		return snap
	}
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := r.con.waitFor(tctx, tickRE); err != nil {
		snap.err = fmt.Errorf("restored guest: %w", err)
		r.p.kill()
		return snap
	}
	snap.seen = time.Since(r.start)
	snap.rss = procStatus(r.p.pid())
	if err := r.stop(); err != nil {
		snap.err = err
		return snap
	}
	rep, err := r.readReport()
	if err != nil {
		snap.err = err
		return snap
	}
	snap.firstOutput = ms(rep.FirstOutputMs)
	snap.vcpuEntry = ms(rep.VCPUEntryMs)
	log("restore: first output after %v (bench saw it after %v), RSS %d KiB", snap.firstOutput, snap.seen.Round(time.Millisecond), snap.rss["VmRSS"])
	return snap
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// kubevmmIdle boots an idle guest of mem MiB and migrates it once.
func (e *env) kubevmmIdle(ctx context.Context, mem int) migRow {
	row := migRow{what: sizeName(mem) + ", idle", vmm: "kubevmm", memMiB: mem}
	name := fmt.Sprintf("mig%d", mem)
	a, err := e.bootKubevmm(ctx, name+"-a", mem, "")
	if err != nil {
		row.err = err
		return row
	}
	b, addr, err := e.incomingKubevmm(ctx, name+"-b", mem)
	if err != nil {
		row.err = err
		a.p.kill()
		return row
	}
	st, err := e.migrate(ctx, a, b, addr)
	row = kubevmmRow(row, st, err)
	log("migration: %s: %s", row.what, describe(row))
	if err != nil {
		a.p.kill()
		b.p.kill()
		return row
	}
	if err := b.stop(); err != nil {
		log("migration: %v", err)
	}
	return row
}

// qemuMigrations runs QEMU's counterparts of kubevmm's runs on fresh
// guests (boots are cheap there): the smallest guest idle, then with the
// writer, without and with auto-converge; then the larger idle guests.
func (e *env) qemuMigrations(ctx context.Context) (idle, dirty []migRow) {
	row, holder := e.qemuIdle(ctx, idleSizes[0])
	idle = append(idle, row)
	if holder != nil {
		dirty = e.qemuDirty(ctx, holder)
	}
	for _, mem := range idleSizes[1:] {
		row, dst := e.qemuIdle(ctx, mem)
		if dst != nil {
			dst.kill()
		}
		idle = append(idle, row)
	}
	return idle, dirty
}

func (e *env) qemuName() string { return fmt.Sprintf("QEMU (%s)", strings.ToUpper(string(e.accel))) }

// qemuIdle boots a QEMU guest of mem MiB and migrates it once, idle; on
// success it returns the target, running the guest.
func (e *env) qemuIdle(ctx context.Context, mem int) (migRow, *qvm) {
	row := migRow{what: sizeName(mem) + ", idle", vmm: e.qemuName(), memMiB: mem}
	name := fmt.Sprintf("qemu-mig%d", mem)
	cfg, err := e.qemuConfig(name+"-a", mem, "")
	if err != nil {
		row.err = err
		return row, nil
	}
	src, err := e.startQEMU(ctx, cfg)
	if err != nil {
		row.err = err
		return row, nil
	}
	// no cap, as kubevmm's default (QEMU's default is 128 MiB/s)
	dst, err := e.qemuMigrate(ctx, src, name+"-b", &row, qemu.MigrateOptions{BandwidthBytesPerSec: 1 << 40})
	if err != nil {
		src.kill()
		if row.err == nil {
			row.err = fmt.Errorf("not completed within %v: cancelled", dirtyTimeout)
		}
	}
	log("migration: QEMU %s: %s", row.what, describe(row))
	return row, dst
}

// qemuDirty starts the memory writer on holder's guest and migrates it
// without, then with auto-converge; each run that completes moves it on.
func (e *env) qemuDirty(ctx context.Context, holder *qvm) []migRow {
	var dirty []migRow
	defer func() { holder.kill() }()
	writerMax, err := startWriter(ctx, holder.con)
	if err != nil {
		return []migRow{{what: "writer", vmm: e.qemuName(), err: err}}
	}
	for i, ac := range []bool{false, true} {
		row := migRow{what: dirtyName(ac), vmm: e.qemuName(), writerMax: writerMax}
		opts := qemu.MigrateOptions{BandwidthBytesPerSec: capMiB << 20, Downtime: downtimeTarget, AutoConverge: ac}
		before := sampleWriter(ctx, holder.con)
		next, err := e.qemuMigrate(ctx, holder, fmt.Sprintf("qemu-mig-dirty%d", i), &row, opts)
		on := holder.con // where the guest is now
		if err == nil {
			on = next.con
		}
		after := sampleWriter(ctx, on)
		row.writerRate, row.writerState = writerRate(before, after), after.state
		switch {
		case err == nil:
			row.converged = "yes"
			holder = next
		case errors.Is(err, context.DeadlineExceeded):
			row.converged = fmt.Sprintf("no: still pre-copying after %v, cancelled", dirtyTimeout)
		default:
			row.converged = "no: " + oneLine(err)
		}
		log("migration: QEMU %s: %s", row.what, describe(row))
		dirty = append(dirty, row)
	}
	return dirty
}

// qemuMigrate migrates src to a new QEMU started as its target and fills
// row. On success src is gone and the target, with its console, is
// returned; a dirty run that doesn't finish within dirtyTimeout is
// cancelled (the guest stays on src) and reported as a deadline error.
func (e *env) qemuMigrate(ctx context.Context, src *qvm, name string, row *migRow, opts qemu.MigrateOptions) (*qvm, error) {
	cfg := src.cfg
	cfg.Name = name
	cfg.Incoming = "defer"
	cfg.StartPaused = false // run the guest once it has arrived
	dcfg, err := e.qemuConfig(name, cfg.MemoryMiB, "")
	if err != nil {
		row.err = err
		return nil, err
	}
	cfg.SerialSocket, cfg.RunDir = dcfg.SerialSocket, dcfg.RunDir
	// Starting the target and the migration takes seconds: bound it.
	sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
	defer scancel()
	dst, err := e.startQEMU(sctx, cfg)
	if err != nil {
		row.err = err
		return nil, err
	}
	addr, err := dst.vm.MigrateIncoming(sctx, "tcp:127.0.0.1:0")
	if err != nil {
		row.err = err
		dst.kill()
		return nil, err
	}
	log("migration: QEMU %s → %s (%s)", src.name, name, addr)
	if err := src.vm.Migrate(sctx, addr, opts); err != nil {
		row.err = err
		dst.kill()
		return nil, err
	}
	// QEMU's final statistics leave out the auto-converge throttle and the
	// dirty rate: watch them.
	wctx, cancel := context.WithTimeout(ctx, dirtyTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for wctx.Err() == nil {
			if mi, err := src.rawMigrationInfo(wctx); err == nil && mi.Status == "active" {
				row.throttle = max(row.throttle, float64(mi.Throttle)/100)
				if mi.RAM != nil && mi.RAM.DirtyPagesRate > 0 {
					row.dirtyRate = float64(mi.RAM.DirtyPagesRate * mi.RAM.PageSize)
				}
			}
			select {
			case <-wctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	m, err := src.vm.WaitMigration(wctx)
	cancel()
	wg.Wait()
	row.rounds, row.sent, row.downtime, row.total = m.Passes, m.TransferredBytes, m.Downtime, m.TotalTime
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			// didn't converge in time: cancel, the guest stays on src
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			defer ccancel()
			// Best effort: the row only records how far it got.
			_ = src.vm.CancelMigration(cctx)
			_, _ = src.vm.WaitMigration(cctx)
			if st, serr := src.vm.MigrationStatus(cctx); serr == nil {
				row.rounds, row.sent, row.total = st.Passes, st.TransferredBytes, st.TotalTime
			}
			dst.kill()
			return nil, context.DeadlineExceeded
		}
		row.err = err
		dst.kill()
		return nil, err
	}
	src.kill()
	return dst, nil
}

// achieved formats the writer's rate during the run.
func achieved(r migRow) string {
	if r.writerRate < 0 {
		return "n/a (no reading from the guest)"
	}
	s := fmt.Sprintf("%.2f MiB/s", r.writerRate)
	switch r.writerState {
	case "R", "":
	case "Z", "gone":
		s += " (the writer has exited)"
	default:
		s += fmt.Sprintf(" (writer in state %s afterwards)", r.writerState)
	}
	return s
}

// dirtyRate formats the dirty rate the VMM saw, or says it had none.
func dirtyRate(r migRow) string {
	if r.dirtyRate <= 0 {
		return "n/a (not measured by the VMM)"
	}
	return fmt.Sprintf("%.2f MiB/s", r.dirtyRate/(1<<20))
}

func describe(r migRow) string {
	if r.err != nil {
		return "failed: " + r.err.Error()
	}
	s := fmt.Sprintf("%d rounds, %.1f MiB sent, downtime %v, total %v", r.rounds, float64(r.sent)/(1<<20), r.downtime.Round(time.Millisecond), r.total.Round(time.Millisecond))
	if r.writerMax > 0 {
		s += fmt.Sprintf(", throttle %.0f%%, dirty rate %s, writer wrote %s", r.throttle*100, dirtyRate(r), achieved(r))
	}
	return s
}

func (res migrationResults) render(b *strings.Builder) {
	b.WriteString("## Live migration\n\n")
	fmt.Fprintf(b, "Method: each guest (1 vCPU, the guest script waiting on its console) is migrated between two VMM processes on this host over loopback TCP "+
		"(kubevmm: `vmm run --incoming tcp:127.0.0.1:0` and `vmm migrate`, statistics from the source's `--report`; QEMU: launcher/qemu's Migrate to a `-incoming defer` target, "+
		"statistics from query-migrate), with the default 300 ms downtime target; each VMM boots one guest per size, the %s one also serves the dirty runs (and, for kubevmm, the snapshot).\n\n", sizeName(idleSizes[0]))
	b.WriteString("### Idle guests\n\n")
	b.WriteString("| guest | VMM | rounds | sent | downtime | total |\n|---|---|---|---|---|---|\n")
	for _, r := range res.idle {
		if r.err != nil {
			fmt.Fprintf(b, "| %s | %s | failed: %s | | | |\n", r.what, r.vmm, oneLine(r.err))
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %d | %.1f MiB | %s | %s |\n", r.what, r.vmm, r.rounds, float64(r.sent)/(1<<20), fmtD(r.downtime), fmtD(r.total))
	}
	b.WriteString("\nUntouched guest memory is not sent by kubevmm (holes in its memfd); QEMU sends it as zero pages. QEMU's rounds are its dirty-bitmap syncs; its bandwidth cap is lifted to match kubevmm's default (none).\n\n")

	fmt.Fprintf(b, "### A guest writing memory faster than the link (cap %d MiB/s)\n\n", capMiB)
	fmt.Fprintf(b, "Method: on the %s guest a busybox awk program keeps rewriting a %d MiB working set (a numeric array) at about %d MiB/s, CPU-bound (busy work between writes, "+
		"calibrated in the guest) so that vCPU throttling slows it; each VMM migrates it with `--bandwidth %dM` (QEMU: max-bandwidth), without and with auto-converge, "+
		"giving up after %v; kubevmm also with `--post-copy`, where the downtime is the pause until the target runs the guest and the total includes pulling the pages still missing then. The dirty rate is the one the source VMM measured last during pre-copy (kubevmm: its last round; QEMU: query-migrate's dirty-pages-rate); the writer's rate is what it wrote from just before the migration to just after, over the guest's clock "+
		"(it records its progress in the guest a few times a second; the bench reads that and /proc/uptime over the console).\n\n", sizeName(idleSizes[0]), dirtySetMiB, dirtyRateMiB, capMiB, dirtyTimeout)
	b.WriteString("| run | VMM | converged | rounds | sent | dirty rate seen | dirty at last round | throttle | writer's rate | downtime | total |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.dirty {
		if r.err != nil && r.rounds == 0 {
			fmt.Fprintf(b, "| %s | %s | failed: %s | | | | | | | | |\n", r.what, r.vmm, oneLine(r.err))
			continue
		}
		last := "n/a (QEMU reports no such figure)"
		if r.vmm == "kubevmm" {
			last = fmt.Sprintf("%.1f MiB", float64(r.lastDirty)/(1<<20))
		}
		down := fmtD(r.downtime)
		if !strings.HasPrefix(r.converged, "yes") && r.downtime == 0 {
			down = "n/a"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %d | %.1f MiB | %s | %s | %.0f%% | %s | %s | %s |\n", r.what, r.vmm, r.converged, r.rounds,
			float64(r.sent)/(1<<20), dirtyRate(r), last, r.throttle*100, achieved(r), down, fmtD(r.total))
	}
	if res.accel == qemu.AccelTCG && res.qemuVer.before(9, 0) {
		fmt.Fprintf(b, "\n%s with TCG predates QEMU 9.0's fix of TCG dirty tracking during migration (commit 03bfc2188f, "+
			"\"physmem: Fix migration dirty bitmap coherency with TCG memory access\"): after a dirty-bitmap sync it misses writes made through TLB entries "+
			"the vCPU already holds, so it sees fewer dirty pages than the guest writes (compare its dirty rate with the writer's rate) and converges without "+
			"sending them. Its dirty runs are no baseline for kubevmm's here.\n", res.qemuVer)
	}
	for _, r := range res.dirty {
		if r.err == nil && r.writerMax > 0 && r.writerMax < dirtyRateMiB {
			fmt.Fprintf(b, "\nUnder %s the writer could reach only %.1f MiB/s (its own calibration), below its %d MiB/s aim.\n", r.vmm, r.writerMax, dirtyRateMiB)
			break
		}
	}
	b.WriteString("\n")

	s := res.snap
	b.WriteString("### Snapshot and restore (kubevmm, 128 MiB guest)\n\n")
	b.WriteString("Method: `vmm snapshot` (control API) of the running guest while a shell loop in it prints a line ten times a second; `vmm restore --report` of that snapshot in a new process; " +
		"the restore's time to first console output comes from its report, its RSS is read when that output reaches the bench.\n\n")
	if s.err != nil {
		fmt.Fprintf(b, "Failed: %s\n\n", oneLine(s.err))
		return
	}
	fmt.Fprintf(b, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(b, "| snapshot: guest paused | %.1f ms |\n", s.pausedMs)
	fmt.Fprintf(b, "| snapshot: RAM stored (zero pages are holes) | %.1f MiB of %d MiB |\n", float64(s.storedBytes)/(1<<20), s.memMiB)
	fmt.Fprintf(b, "| restore: process start → vCPU entry | %s |\n", fmtD(s.vcpuEntry))
	fmt.Fprintf(b, "| restore: process start → first console output | %s (the bench saw it after %s) |\n", fmtD(s.firstOutput), fmtD(s.seen))
	fmt.Fprintf(b, "| restore: RSS at first output | %d KiB (anon %d, file %d, shmem %d) vs %d KiB of guest RAM |\n",
		s.rss["VmRSS"], s.rss["RssAnon"], s.rss["RssFile"], s.rss["RssShmem"], s.memMiB<<10)
	b.WriteString("\n")
}
