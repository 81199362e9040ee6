package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

func fmtD(d time.Duration) string {
	if d == 0 {
		return "n/a"
	}
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func oneLine(err error) string {
	return strings.ReplaceAll(strings.ReplaceAll(err.Error(), "\n", "; "), "|", "/")
}

// writeErrs notes what failed for each VMM in a section.
func writeErrs(b *strings.Builder, ours, theirs error) {
	for _, x := range []struct {
		who string
		err error
	}{{"kubevmm", ours}, {"QEMU", theirs}} {
		if x.err != nil {
			fmt.Fprintf(b, "%s failed: %s\n\n", x.who, oneLine(x.err))
		}
	}
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
		// Unparsed, the report shows 0 MiB: cosmetic.
		_, _ = fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &memKiB)
	}
	kvm := "KVM with hardware virtualization"
	if _, err := os.Stat("/sys/module/kvm_pvm"); err == nil {
		kvm = "kvm_pvm: nested KVM without VT-x/SVM, guest kernel mode emulated"
	}
	load, _ := os.ReadFile("/proc/loadavg")
	loadavg := strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " ")
	return fmt.Sprintf("Machine: %s, %d CPUs, %d GiB RAM, host kernel %s, %s; %s; measured %s (load average at start %s; the CPUs are shared with other work).",
		cpu, runtime.NumCPU(), memKiB>>20, strings.TrimSpace(string(kernel)), kvm, runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadavg)
}
