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
	"strings"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
)

// The diskboot section times how long `vmm run --boot-disk` takes to the
// kernel's first output against kernelBoot (`--kernel`/`--initrd`) for
// the same guest: the test guest's bzImage and initramfs, given directly
// or in a BLS entry on a qcow2 GPT disk (disktest.BLSPart, as the
// containerDisk of the e2e). The difference is what finding and reading
// the entry costs; the guest's own boot after its first message is the
// same, so each run stops there.

type diskBootResults struct {
	kernelBoot, diskBoot []boot // firstOutput and vcpuEntry
	errs                 []string
	memMiB               int
}

func (e *env) diskBootSection(ctx context.Context) diskBootResults {
	res := diskBootResults{memMiB: e.memMiB}
	bz := filepath.Join(filepath.Dir(e.kernel), "bzImage")
	img, err := writeBootDisk(e.work, bz, e.baseInitrd)
	if err != nil {
		res.errs = append(res.errs, fmt.Sprintf("building the disk: %v", err))
		return res
	}
	mem := fmt.Sprintf("%dM", e.memMiB)
	for i := 0; i < e.runs; i++ {
		for _, c := range []struct {
			name string
			args []string
			out  *[]boot
		}{
			{"kernelBoot", []string{"--kernel", bz, "--initrd", e.baseInitrd}, &res.kernelBoot},
			{"disk boot", []string{"--boot-disk", img + ",format=qcow2,ro"}, &res.diskBoot},
		} {
			args := append([]string{"run", "--memory", mem, "--cpus", "1", "--cmdline", bootCmdline}, c.args...)
			b, err := firstOutput(ctx, &e.cl, e.vmm, e.work, args, 15*time.Minute)
			if err != nil {
				res.errs = append(res.errs, fmt.Sprintf("%s run %d: %v", c.name, i, err))
				log("diskboot: %s run %d: %v", c.name, i, err)
				continue
			}
			log("diskboot: %s run %d: vCPU entry %v, first output %v", c.name, i, b.vcpuEntry.Round(time.Microsecond), b.firstOutput.Round(time.Millisecond))
			*c.out = append(*c.out, b)
		}
	}
	return res
}

// writeBootDisk writes the qcow2 boot disk holding kernel and initrd.
func writeBootDisk(work, kernel, initrd string) (string, error) {
	k, err := os.ReadFile(kernel)
	if err != nil {
		return "", err
	}
	i, err := os.ReadFile(initrd)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(work, "bootdisk")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return disktest.Write(dir, disktest.Disk{Label: "gpt", Qcow2: true, Parts: []disktest.Part{disktest.BLSPart("6.1", k, i, "")}})
}

// firstOutput runs `vmm run args...` until the kernel's first byte on
// stdout, then stops it with SIGTERM (vmm then writes its report), and
// returns the time from process start to that byte and the vCPU entry
// from the report: the VMM's setup, reading the disk's entry included.
func firstOutput(ctx context.Context, cl *cleanups, vmm, work string, args []string, timeout time.Duration) (boot, error) {
	rep := filepath.Join(work, "diskboot-report.json")
	cmd := exec.Command(vmm, append(args, "--report", rep)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return boot{}, err
	}
	start := time.Now()
	p, err := startProc(cl, cmd)
	if err != nil {
		return boot{}, err
	}
	defer p.kill()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		select {
		case <-tctx.Done():
			p.kill()
		case <-p.done:
		}
	}()
	r := bufio.NewReader(stdout)
	if _, err := r.ReadByte(); err != nil {
		<-p.done
		if tctx.Err() != nil {
			return boot{}, fmt.Errorf("no output within %v", timeout)
		}
		return boot{}, fmt.Errorf("output ended before it began: %v; stderr: %s", p.err, p.stderr.tail())
	}
	b := boot{firstOutput: time.Since(start)}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return b, err
	}
	if err := p.wait(time.Minute); err != nil {
		return b, fmt.Errorf("stopping the VMM: %w", err)
	}
	var report struct {
		VCPUEntryMs float64 `json:"vcpu_entry_ms"`
	}
	data, err := os.ReadFile(rep)
	if err == nil {
		err = json.Unmarshal(data, &report)
	}
	if err != nil {
		return b, fmt.Errorf("the VMM's report: %w", err)
	}
	b.vcpuEntry = time.Duration(report.VCPUEntryMs * float64(time.Millisecond))
	return b, nil
}

func (r diskBootResults) render(b *strings.Builder) {
	fmt.Fprintf(b, "## Disk boot: kubevmm, test guest, 1 vCPU, %d MiB, medians of %d runs\n\n", r.memMiB, len(r.kernelBoot))
	b.WriteString("Method: `vmm run` boots the test guest's bzImage and initramfs given as files (`--kernel`/`--initrd`, what kernelBoot does) " +
		"or from a BLS entry on a qcow2 GPT disk with an ext4 /boot (`--boot-disk`, what a containerDisk without kernelBoot does); " +
		"the bench times from process start to the kernel's first serial output, then stops the VMM (SIGTERM) and reads the vCPU entry from its `--report`.\n\n")
	b.WriteString("| milestone | kernelBoot (`--kernel bzImage --initrd`) | disk boot (`--boot-disk disk.qcow2`) |\n|---|---|---|\n")
	for _, row := range []struct {
		name string
		f    func(boot) time.Duration
	}{
		{"process start → first guest instruction (vCPU entry)", func(x boot) time.Duration { return x.vcpuEntry }},
		{"process start → first kernel message", func(x boot) time.Duration { return x.firstOutput }},
	} {
		fmt.Fprintf(b, "| %s | %s | %s |\n", row.name, fmtD(median(collect(r.kernelBoot, row.f))), fmtD(median(collect(r.diskBoot, row.f))))
	}
	for _, e := range r.errs {
		fmt.Fprintf(b, "\n%s\n", e)
	}
	b.WriteString("\nThe vCPU entry is the VMM's own setup: for the disk boot it includes finding and reading the entry (partition table, ext4, " +
		"the kernel and initramfs through the qcow2 layer). The first message then comes from the kernel's decompressor and early setup, " +
		"emulated on hosts without hardware virtualization, where it varies with the load far more than the VMM's part.\n")
}
