// Command bench measures kubevmm's VMM against QEMU on this machine and
// writes a Markdown report: boot milestones (process start → first guest
// instruction → first kernel message → the guest's /init), and the VMM's
// own memory (RSS without guest RAM). `make bench` runs it.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

const initMarker = "kubevmm-guest: cpus="

type boot struct {
	firstOutput time.Duration
	initMarker  time.Duration
	vcpuEntry   time.Duration // our VMM only (from its report)
	overheadKiB uint64        // RSS minus guest RAM, read when the marker appears
	err         error
}

func main() {
	guest := flag.String("guest", "", "guest image directory (hack/guest-image.sh)")
	vmm := flag.String("vmm", "bin/vmm", "vmm binary")
	qemu := flag.String("qemu", "qemu-system-x86_64", "QEMU binary for the baseline")
	out := flag.String("out", "test/bench/RESULTS.md", "report file")
	runs := flag.Int("runs", 3, "boots per configuration")
	mem := flag.Int("memory", 128, "guest RAM (MiB)")
	flag.Parse()
	if *guest == "" {
		fmt.Fprintln(os.Stderr, "bench: -guest is required")
		os.Exit(2)
	}
	kernel := filepath.Join(*guest, "vmlinux")
	initrd := filepath.Join(*guest, "initramfs.cpio")
	cmdline := "console=ttyS0 reboot=k panic=-1"

	var ours, theirs []boot
	for i := 0; i < *runs; i++ {
		b := bootOurs(*vmm, kernel, initrd, cmdline, *mem)
		logBoot("kubevmm", i, b)
		ours = append(ours, b)
		q := bootQEMU(*qemu, kernel, initrd, cmdline, *mem)
		logBoot("qemu", i, q)
		theirs = append(theirs, q)
	}
	report := render(ours, theirs, *mem)
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Print(report)
}

func logBoot(who string, i int, b boot) {
	if b.err != nil {
		fmt.Fprintf(os.Stderr, "bench: %s run %d: %v\n", who, i, b.err)
		return
	}
	fmt.Fprintf(os.Stderr, "bench: %s run %d: first output %v, /init %v, overhead %d KiB\n",
		who, i, b.firstOutput.Round(time.Millisecond), b.initMarker.Round(time.Millisecond), b.overheadKiB)
}

// watch starts cmd and times the first output byte and the /init marker on
// its stdout, reading the process's memory when the marker appears.
func watch(cmd *exec.Cmd) boot {
	var b boot
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return boot{err: err}
	}
	cmd.Stderr = io.Discard
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return boot{err: err}
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	var seen strings.Builder
	deadline := time.AfterFunc(15*time.Minute, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	for {
		c, err := r.ReadByte()
		if err != nil {
			b.err = fmt.Errorf("output ended before %q: %v", initMarker, err)
			return b
		}
		if b.firstOutput == 0 {
			b.firstOutput = time.Since(start)
		}
		seen.WriteByte(c)
		if c == '\n' && strings.Contains(seen.String(), initMarker) {
			b.initMarker = time.Since(start)
			b.overheadKiB = overhead(cmd.Process.Pid)
			break
		}
		if c == '\n' {
			seen.Reset()
		}
	}
	io.Copy(io.Discard, r)
	cmd.Wait()
	return b
}

// overhead is the process's resident memory that isn't guest RAM. Both
// VMMs back guest RAM with a shared memfd here, so it is RssShmem and the
// rest (RssAnon + RssFile) is the VMM's own.
func overhead(pid int) uint64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	var anon, file uint64
	for _, l := range strings.Split(string(st), "\n") {
		k, v, _ := strings.Cut(l, ":")
		n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "RssAnon":
			anon = n
		case "RssFile":
			file = n
		}
	}
	return anon + file
}

func bootOurs(vmm, kernel, initrd, cmdline string, memMiB int) boot {
	rep := filepath.Join(os.TempDir(), fmt.Sprintf("kubevmm-bench-%d.json", os.Getpid()))
	defer os.Remove(rep)
	cmd := exec.Command(vmm, "run", "--kernel", kernel, "--initrd", initrd, "--cmdline", cmdline,
		"--memory", fmt.Sprintf("%dM", memMiB), "--cpus", "1", "--report", rep)
	cmd.Stdin = nil
	b := watch(cmd)
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
// QEMU with KVM: the microvm machine (QEMU's minimal one, comparable to
// ours) without ACPI, guest RAM in a shared memfd like ours.
func bootQEMU(qemu, kernel, initrd, cmdline string, memMiB int) boot {
	cmd := exec.Command(qemu,
		"-M", "microvm,acpi=off,x-option-roms=off,pit=on,pic=on,rtc=on,isa-serial=on",
		"-enable-kvm", "-cpu", "host", "-smp", "1", "-m", fmt.Sprintf("%dM", memMiB),
		"-object", fmt.Sprintf("memory-backend-memfd,id=ram,size=%dM,share=on", memMiB),
		"-machine", "memory-backend=ram",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-serial", "stdio",
		"-kernel", kernel, "-initrd", initrd, "-append", cmdline+" "+hostArgs())
	return watch(cmd)
}

// hostArgs mirrors what our VMM appends on hosts that emulate guest kernel
// mode, so both VMMs boot the guest with the same command line.
func hostArgs() string {
	if _, err := os.Stat("/sys/module/kvm_pvm"); err != nil {
		return ""
	}
	return "clearcpuid=cx16,smap,smep,pcid,invpcid,umip,erms,fsrm,fsgsbase,popcnt nopti mitigations=off random.trust_cpu=on"
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
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

func fmtD(d time.Duration) string {
	if d == 0 {
		return "n/a"
	}
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func render(ours, theirs []boot, memMiB int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kubevmm benchmarks\n\n%s\n\n", machineInfo())
	fmt.Fprintf(&b, "## Boot: test guest (minimal kernel, busybox initramfs), 1 vCPU, %d MiB, medians of %d runs\n\n", memMiB, len(ours))
	b.WriteString("| milestone | kubevmm | QEMU (microvm, KVM) | QEMU / kubevmm |\n|---|---|---|---|\n")
	row := func(name string, f func(boot) time.Duration) {
		o, q := median(collect(ours, f)), median(collect(theirs, f))
		ratio := "n/a"
		if o > 0 && q > 0 {
			ratio = fmt.Sprintf("%.2f", float64(q)/float64(o))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", name, fmtD(o), fmtD(q), ratio)
	}
	row("process start → first guest instruction (vCPU entry)", func(x boot) time.Duration { return x.vcpuEntry })
	row("process start → first kernel message", func(x boot) time.Duration { return x.firstOutput })
	row("process start → guest /init", func(x boot) time.Duration { return x.initMarker })
	ko := medianU(ours)
	kq := medianU(theirs)
	fmt.Fprintf(&b, "| VMM RSS overhead (RSS minus guest RAM) | %d KiB | %d KiB | %.2f |\n", ko, kq, float64(kq)/float64(max(ko, 1)))
	for _, set := range []struct {
		name string
		bs   []boot
	}{{"kubevmm", ours}, {"QEMU", theirs}} {
		for i, x := range set.bs {
			if x.err != nil {
				fmt.Fprintf(&b, "\n%s run %d failed: %v\n", set.name, i, x.err)
			}
		}
	}
	b.WriteString("\nThe guest kernel's own work dominates boot time on hosts that emulate guest kernel mode (see README); the VMM-side numbers are the vCPU-entry time and the overhead RSS.\n")
	return b.String()
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
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[len(v)/2]
}

func machineInfo() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				_, cpu, _ = strings.Cut(l, ": ")
				break
			}
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	memKiB := uint64(0)
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &memKiB)
	}
	kvm := "KVM with hardware virtualization"
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		kvm = "kvm_pvm: nested KVM without VT-x/SVM, guest kernel mode emulated"
	}
	return fmt.Sprintf("Machine: %s, %d CPUs, %d GiB RAM, host kernel %s, %s; %s; measured %s.",
		cpu, runtime.NumCPU(), memKiB>>20, strings.TrimSpace(string(kernel)), kvm, runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
}
