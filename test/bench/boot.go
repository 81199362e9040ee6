package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/vmm/arch/x86"
)

// The boot section boots the unmodified test guest (its /init reports and
// powers off) and times the milestones on its serial output.

const initMarker = "kubevmm-guest: cpus="

// bootCmdline is the boot section's guest command line: not quiet, so the
// first kernel message is a milestone.
const bootCmdline = "console=ttyS0 reboot=k panic=-1"

type boot struct {
	firstOutput time.Duration
	initMarker  time.Duration
	vcpuEntry   time.Duration // our VMM only (from its report)
	overheadKiB uint64        // RSS minus guest RAM, read when the marker appears
	output      string        // the last output lines and stderr, for failures
	err         error
}

type bootResults struct {
	ours, theirs []boot
	accel        qemu.Accel
	memMiB       int
}

func (e *env) bootSection(ctx context.Context) bootResults {
	res := bootResults{accel: e.accel, memMiB: e.memMiB}
	for i := 0; i < e.runs; i++ {
		b := bootOurs(ctx, &e.cl, e.vmm, e.kernel, e.baseInitrd, bootCmdline, e.memMiB)
		logBoot("kubevmm", i, b)
		res.ours = append(res.ours, b)
		q := bootQEMU(ctx, &e.cl, e.qemu, e.accel, e.kernel, e.baseInitrd, bootCmdline, e.memMiB, 15*time.Minute)
		logBoot("qemu", i, q)
		res.theirs = append(res.theirs, q)
	}
	return res
}

func logBoot(who string, i int, b boot) {
	if b.err != nil {
		log("boot: %s run %d: %v", who, i, b.err)
		return
	}
	log("boot: %s run %d: first output %v, /init %v, overhead %d KiB",
		who, i, b.firstOutput.Round(time.Millisecond), b.initMarker.Round(time.Millisecond), b.overheadKiB)
}

// watch starts cmd and times the first output byte and the /init marker on
// its stdout, reading the process's memory when the marker appears. If
// fatal appears on its stderr the boot has failed: QEMU stays paused after
// a KVM internal error instead of exiting.
func watch(ctx context.Context, cl *cleanups, cmd *exec.Cmd, timeout time.Duration, fatal string) boot {
	var b boot
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return boot{err: err}
	}
	var stderr lockedBuffer
	fatalSeen := make(chan struct{})
	cmd.Stderr = &stderr
	if fatal != "" {
		cmd.Stderr = &tripwire{w: &stderr, s: fatal, c: fatalSeen}
	}
	start := time.Now()
	p, err := startProc(cl, cmd)
	if err != nil {
		return boot{err: err}
	}
	defer p.kill()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		select {
		case <-fatalSeen:
			// let it print the rest of its report (registers, code bytes)
			select {
			case <-time.After(time.Second):
			case <-p.done:
			}
		case <-tctx.Done():
		case <-p.done:
		}
		p.kill()
	}()
	r := bufio.NewReader(stdout)
	var seen strings.Builder
	var tail []string
	for {
		c, err := r.ReadByte()
		if err != nil {
			<-p.done
			b.output = strings.Join(tail, "\n") + "\n" + stderr.String()
			b.err = fmt.Errorf("output ended before %q: %v", initMarker, err)
			select {
			case <-fatalSeen:
				b.err = fmt.Errorf("%q before %q", fatal, initMarker)
			default:
				if tctx.Err() != nil {
					b.err = fmt.Errorf("no %q within %v", initMarker, timeout)
				}
			}
			return b
		}
		if b.firstOutput == 0 {
			b.firstOutput = time.Since(start)
		}
		seen.WriteByte(c)
		if c == '\n' && strings.Contains(seen.String(), initMarker) {
			b.initMarker = time.Since(start)
			b.overheadKiB = overhead(p.pid())
			break
		}
		if c == '\n' {
			tail = append(tail, seen.String())
			if len(tail) > 20 {
				tail = tail[1:]
			}
			seen.Reset()
		}
	}
	// Drain so the process can exit; output past the boot is not measured.
	_, _ = io.Copy(io.Discard, r)
	<-p.done
	return b
}

// tripwire passes writes on to w and closes c once s has been written.
type tripwire struct {
	w    io.Writer
	s    string
	c    chan struct{}
	seen []byte
	done bool
}

func (t *tripwire) Write(p []byte) (int, error) {
	if !t.done {
		t.seen = append(t.seen, p...)
		if strings.Contains(string(t.seen), t.s) {
			t.done = true
			close(t.c)
		}
	}
	return t.w.Write(p)
}

// overhead is the process's resident memory that isn't guest RAM. Both
// VMMs back guest RAM with a shared memfd here, so it is RssShmem and the
// rest (RssAnon + RssFile) is the VMM's own.
func overhead(pid int) uint64 {
	st := procStatus(pid)
	return st["RssAnon"] + st["RssFile"]
}

func bootOurs(ctx context.Context, cl *cleanups, vmm, kernel, initrd, cmdline string, memMiB int) boot {
	rep := filepath.Join(os.TempDir(), fmt.Sprintf("kubevmm-bench-%d.json", os.Getpid()))
	defer os.Remove(rep)
	cmd := exec.Command(vmm, "run", "--kernel", kernel, "--initrd", initrd, "--cmdline", cmdline,
		"--memory", fmt.Sprintf("%dM", memMiB), "--cpus", "1", "--report", rep)
	b := watch(ctx, cl, cmd, 15*time.Minute, "")
	if b.err != nil {
		return b
	}
	var r struct {
		VCPUEntryMs float64 `json:"vcpu_entry_ms"`
	}
	if data, err := os.ReadFile(rep); err == nil && json.Unmarshal(data, &r) == nil {
		b.vcpuEntry = time.Duration(r.VCPUEntryMs * float64(time.Millisecond))
	}
	return b
}

// bootQEMU boots the same ELF kernel (through its PVH note) and initrd in
// QEMU: the microvm machine (QEMU's minimal one, comparable to ours)
// without ACPI, guest RAM in a shared memfd like ours.
func bootQEMU(ctx context.Context, cl *cleanups, bin string, accel qemu.Accel, kernel, initrd, cmdline string, memMiB int, timeout time.Duration) boot {
	cpu := []string{"-accel", "kvm", "-cpu", "host"}
	if accel == qemu.AccelTCG {
		cpu = []string{"-accel", "tcg", "-cpu", "qemu64"}
	}
	args := append([]string{
		"-M", "microvm,acpi=off,x-option-roms=off,pit=on,pic=on,rtc=on,isa-serial=on"}, cpu...)
	args = append(args, "-smp", "1", "-m", fmt.Sprintf("%dM", memMiB),
		"-object", fmt.Sprintf("memory-backend-memfd,id=ram,size=%dM,share=on", memMiB),
		"-machine", "memory-backend=ram",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-serial", "stdio",
		"-kernel", kernel, "-initrd", initrd, "-append", cmdline+" "+hostArgs())
	return watch(ctx, cl, exec.Command(bin, args...), timeout, "KVM internal error")
}

// hostArgs mirrors what our VMM appends on hosts that emulate guest kernel
// mode, so both VMMs boot the guest with the same command line.
func hostArgs() string {
	if _, err := os.Stat("/sys/module/kvm_pvm"); err != nil {
		return ""
	}
	return x86.HostKernelArgs(true)
}

func (r bootResults) render(b *strings.Builder) {
	qname := fmt.Sprintf("QEMU (microvm, %s)", strings.ToUpper(string(r.accel)))
	fmt.Fprintf(b, "## Boot: test guest (minimal kernel, busybox initramfs), 1 vCPU, %d MiB, medians of %d runs\n\n", r.memMiB, len(r.ours))
	b.WriteString("Method: each VMM boots the same ELF kernel and initramfs; the bench times its serial output from process start and reads its RSS when /init reports.\n\n")
	fmt.Fprintf(b, "| milestone | kubevmm | %s | kubevmm / QEMU |\n|---|---|---|---|\n", qname)
	// why, if QEMU has no figure: the reason in its cell
	row := func(name string, f func(boot) time.Duration, why string) {
		o, q := median(collect(r.ours, f)), median(collect(r.theirs, f))
		ratio := "n/a"
		if o > 0 && q > 0 {
			ratio = fmt.Sprintf("%.2f", float64(o)/float64(q))
		}
		qs := fmtD(q)
		if q == 0 && why != "" {
			qs += " (" + why + ")"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", name, fmtD(o), qs, ratio)
	}
	row("process start → first guest instruction (vCPU entry)", func(x boot) time.Duration { return x.vcpuEntry }, "QEMU does not report it")
	row("process start → first kernel message", func(x boot) time.Duration { return x.firstOutput }, "")
	row("process start → guest /init", func(x boot) time.Duration { return x.initMarker }, "")
	ko := medianU(r.ours)
	kq := medianU(r.theirs)
	ratio := "n/a"
	if ko > 0 && kq > 0 {
		ratio = fmt.Sprintf("%.2f", float64(ko)/float64(kq))
	}
	fmt.Fprintf(b, "| VMM RSS overhead (RSS minus guest RAM) | %s | %s | %s |\n", kib(ko), kib(kq), ratio)
	for _, set := range []struct {
		name string
		bs   []boot
	}{{"kubevmm", r.ours}, {"QEMU", r.theirs}} {
		for i, x := range set.bs {
			if x.err != nil {
				fmt.Fprintf(b, "\n%s run %d failed: %v\n", set.name, i, x.err)
			}
		}
	}
	b.WriteString("\nThe guest kernel's own work dominates boot time on hosts that emulate guest kernel mode (see README); the VMM-side numbers are the vCPU-entry time and the overhead RSS.")
	if r.accel == qemu.AccelTCG {
		b.WriteString(" QEMU's RSS overhead includes TCG's translation cache.")
	}
	b.WriteString("\n")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func collect(bs []boot, f func(boot) time.Duration) []time.Duration {
	var out []time.Duration
	for _, b := range bs {
		if b.err == nil {
			out = append(out, f(b))
		}
	}
	return out
}

func kib(v uint64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%d KiB", v)
}

func medianU(bs []boot) uint64 {
	var v []uint64
	for _, x := range bs {
		if x.err == nil {
			v = append(v, x.overheadKiB)
		}
	}
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}
