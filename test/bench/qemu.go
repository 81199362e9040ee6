package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qemu"
)

// probeQEMUAccel decides how QEMU runs guests in this bench: with KVM if
// it boots the test guest to /init that way, else with TCG. On hosts that
// emulate guest kernel mode, QEMU+KVM stops at the first instruction the
// host's KVM rejects (the VMM has to complete those in userspace, and
// QEMU doesn't; see README), so the reason is reported.
func (e *env) probeQEMUAccel(ctx context.Context) {
	if e.accel != "" {
		return
	}
	e.qemuVer = versionOf(e.qemu)
	log("qemu: %s; trying KVM", e.qemuVer)
	b := bootQEMU(ctx, &e.cl, e.qemu, qemu.AccelKVM, e.kernel, e.baseInitrd, bootCmdline, 128, 3*time.Minute)
	if b.err == nil {
		e.accel = qemu.AccelKVM
		e.accelNote = fmt.Sprintf("%s runs with KVM (it booted the test guest to /init in %s).", e.qemuVer, fmtD(b.initMarker))
		return
	}
	e.accel = qemu.AccelTCG
	e.accelNote = e.qemuVer.String() + " runs with TCG, its own emulator: with KVM on this host it did not reach the guest's /init (" +
		kvmFailure(b) + "). TCG translates guest kernel code instead of going through this host's KVM instruction emulator, " +
		"so QEMU's guest kernel runs much faster than kubevmm's here: QEMU numbers below compare hosts' CPU paths as much as VMMs."
	log("qemu: KVM failed (%v): using TCG", b.err)
}

// qemuVersion is what `qemu-system-x86_64 --version` says.
type qemuVersion struct {
	major, minor int
	full         string // "7.2.22"; empty if unknown
	err          error
}

var versionRE = regexp.MustCompile(`QEMU emulator version ((\d+)\.(\d+)\S*)`)

func versionOf(bin string) qemuVersion {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return qemuVersion{err: err}
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		return qemuVersion{err: fmt.Errorf("no version in %q", lastLines(string(out), 1))}
	}
	v := qemuVersion{full: m[1]}
	v.major, _ = strconv.Atoi(m[2])
	v.minor, _ = strconv.Atoi(m[3])
	return v
}

func (v qemuVersion) String() string {
	if v.full == "" {
		return fmt.Sprintf("QEMU (version unknown: %v)", v.err)
	}
	return "QEMU " + v.full
}

// before reports whether v is known and older than major.minor.
func (v qemuVersion) before(major, minor int) bool {
	return v.full != "" && (v.major < major || v.major == major && v.minor < minor)
}

var (
	codeRE = regexp.MustCompile(`Code=.*<([0-9a-f]{2})> ((?:[0-9a-f]{2} ){0,5})`)
	ripRE  = regexp.MustCompile(`RIP=([0-9a-f]+)`)
)

// kvmFailure says in a few words why a QEMU+KVM boot failed: QEMU's
// "KVM internal error" with the instruction bytes, or the error.
func kvmFailure(b boot) string {
	out := b.output
	i := strings.Index(out, "KVM internal error")
	if i < 0 {
		return b.err.Error()
	}
	line, _, _ := strings.Cut(out[i:], "\n")
	s := strings.TrimSpace(line)
	if m := ripRE.FindStringSubmatch(out[i:]); m != nil {
		s += " at RIP " + m[1]
	}
	if m := codeRE.FindStringSubmatch(out[i:]); m != nil {
		s += ", instruction bytes " + strings.TrimSpace(m[1]+" "+m[2])
	}
	return s
}

// qvm is a QEMU guest started through launcher/qemu, with its console.
type qvm struct {
	name string
	vm   *qemu.VM
	con  *console
	cfg  qemu.Config
}

// qemuConfig is a 1-vCPU QEMU VM of the bench's guest. netns, if set,
// runs QEMU inside that network namespace (for its taps), through a
// wrapper script as its binary.
func (e *env) qemuConfig(name string, memMiB int, netns string) (qemu.Config, error) {
	dir := filepath.Join(e.work, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return qemu.Config{}, fmt.Errorf("%s: %w", name, err)
	}
	cfg := qemu.Config{
		Name: name, CPUs: 1, MemoryMiB: memMiB,
		Kernel: e.kernel, Initrd: e.initrd, Cmdline: strings.TrimSpace(guestCmdline + " " + hostArgs()),
		Accel: e.accel, NoReboot: true, StartPaused: true,
		SerialSocket: filepath.Join(dir, "serial.sock"),
		RunDir:       filepath.Join(dir, "run"),
		Binary:       e.qemu,
	}
	if netns != "" {
		wrapper := filepath.Join(e.work, "qemu-in-netns")
		script := fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n", netns, e.qemu)
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			return cfg, fmt.Errorf("%s: %w", name, err)
		}
		cfg.Binary = wrapper
	}
	return cfg, nil
}

// startQEMU starts cfg, attaches to its console and, unless it is a
// migration target, runs the guest until the guest script is ready.
func (e *env) startQEMU(ctx context.Context, cfg qemu.Config) (*qvm, error) {
	start := time.Now()
	vm, err := qemu.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e.cl.add(func() {
		kctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = vm.Kill(kctx) // cleanup: an already ended QEMU is fine
	})
	q := &qvm{name: cfg.Name, vm: vm, cfg: cfg}
	gone := func() error {
		select {
		case <-vm.Done():
			return errors.New("exited")
		default:
			return nil
		}
	}
	if q.con, err = dialConsole(ctx, cfg.SerialSocket, gone); err != nil {
		return nil, fmt.Errorf("qemu %s: %w", cfg.Name, err)
	}
	// QEMU drops serial output while no client is accepted: let it accept
	// before the guest runs.
	if err := q.waitConsoleAccepted(ctx); err != nil {
		return nil, err
	}
	if cfg.Incoming != "" {
		return q, nil
	}
	if err := vm.Resume(ctx); err != nil {
		return nil, err
	}
	bctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if _, err := q.con.waitFor(bctx, readyRE); err != nil {
		return nil, fmt.Errorf("qemu %s: boot: %w", cfg.Name, err)
	}
	log("%s: QEMU (%s) guest ready after %v", cfg.Name, cfg.Accel, time.Since(start).Round(100*time.Millisecond))
	return q, nil
}

// waitConsoleAccepted polls QEMU until its serial chardev has a client:
// QEMU has no event for it, its chardev's name loses the "disconnected:"
// prefix.
func (q *qvm) waitConsoleAccepted(ctx context.Context) error {
	mon, err := q.vm.Monitor(ctx)
	if err != nil {
		return err
	}
	for {
		var chardevs []struct {
			Label    string `json:"label"`
			Filename string `json:"filename"`
		}
		if err := mon.Execute(ctx, "query-chardev", nil, &chardevs); err != nil {
			return fmt.Errorf("qemu %s: query-chardev: %w", q.name, err)
		}
		for _, cd := range chardevs {
			if cd.Label == "serial0" && !strings.HasPrefix(cd.Filename, "disconnected:") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("qemu %s: console never accepted: %w", q.name, context.Cause(ctx))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (q *qvm) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q.con.close()
	_, _ = q.vm.Kill(ctx) // an already ended QEMU is fine
}

// migrationInfo is query-migrate's answer with what launcher/qemu's
// MigrationStatus leaves out: the auto-converge throttle.
type migrationInfo struct {
	Status   string `json:"status"`
	Throttle int    `json:"cpu-throttle-percentage"`
	RAM      *struct {
		DirtyPagesRate int64 `json:"dirty-pages-rate"`
		PageSize       int64 `json:"page-size"`
	} `json:"ram"`
}

func (q *qvm) rawMigrationInfo(ctx context.Context) (migrationInfo, error) {
	var mi migrationInfo
	mon, err := q.vm.Monitor(ctx)
	if err != nil {
		return mi, err
	}
	err = mon.Execute(ctx, "query-migrate", nil, &mi)
	return mi, err
}
