package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	kernelBoot, diskBoot []time.Duration
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
			out  *[]time.Duration
		}{
			{"kernelBoot", []string{"--kernel", bz, "--initrd", e.baseInitrd}, &res.kernelBoot},
			{"disk boot", []string{"--boot-disk", img + ",format=qcow2,ro"}, &res.diskBoot},
		} {
			args := append([]string{"run", "--memory", mem, "--cpus", "1", "--cmdline", bootCmdline}, c.args...)
			d, err := firstOutput(ctx, &e.cl, exec.Command(e.vmm, args...), 15*time.Minute)
			if err != nil {
				res.errs = append(res.errs, fmt.Sprintf("%s run %d: %v", c.name, i, err))
				log("diskboot: %s run %d: %v", c.name, i, err)
				continue
			}
			log("diskboot: %s run %d: first output %v", c.name, i, d.Round(time.Millisecond))
			*c.out = append(*c.out, d)
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

// firstOutput starts cmd and returns the time from its start to its first
// byte on stdout, then kills it.
func firstOutput(ctx context.Context, cl *cleanups, cmd *exec.Cmd, timeout time.Duration) (time.Duration, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	p, err := startProc(cl, cmd)
	if err != nil {
		return 0, err
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
	if _, err := bufio.NewReader(stdout).ReadByte(); err != nil {
		<-p.done
		if tctx.Err() != nil {
			return 0, fmt.Errorf("no output within %v", timeout)
		}
		return 0, fmt.Errorf("output ended before it began: %v; stderr: %s", p.err, p.stderr.tail())
	}
	return time.Since(start), nil
}

func (r diskBootResults) render(b *strings.Builder) {
	fmt.Fprintf(b, "## Disk boot: kubevmm, test guest, 1 vCPU, %d MiB, medians of %d runs\n\n", r.memMiB, len(r.kernelBoot))
	b.WriteString("Method: `vmm run` boots the test guest's bzImage and initramfs given as files (`--kernel`/`--initrd`, what kernelBoot does) " +
		"or from a BLS entry on a qcow2 GPT disk with an ext4 /boot (`--boot-disk`, what a containerDisk without kernelBoot does); " +
		"the bench times from process start to the kernel's first serial output, then kills the VMM.\n\n")
	b.WriteString("| boot | process start → first kernel message |\n|---|---|\n")
	fmt.Fprintf(b, "| kernelBoot (`--kernel bzImage --initrd`) | %s |\n", fmtD(median(r.kernelBoot)))
	fmt.Fprintf(b, "| disk boot (`--boot-disk disk.qcow2`) | %s |\n", fmtD(median(r.diskBoot)))
	for _, e := range r.errs {
		fmt.Fprintf(b, "\n%s\n", e)
	}
	b.WriteString("\nThe first message comes from the kernel's decompressor and early setup, emulated on hosts without hardware virtualization; reading the disk's entry (partition table, ext4, the kernel and initramfs through the qcow2 layer) is the rest of the difference.\n")
}
