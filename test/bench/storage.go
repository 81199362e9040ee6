package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// The storage section: sequential throughput of a raw virtio disk, seen
// from the guest.

const (
	diskImageMiB = 128
	diskIOMiB    = 64
)

// diskResult is one VMM's disk numbers: guest time for diskIOMiB, and for
// kubevmm the VMM process's CPU time outside the guest (vmmCPU).
type diskResult struct {
	zero, write, read          time.Duration
	zeroCPU, writeCPU, readCPU time.Duration
}

// writeDiskImage creates a raw image of diskImageMiB, written out (not
// sparse) so both VMMs find the same allocated file.
func writeDiskImage(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	buf := make([]byte, 1<<20)
	for i := 0; i < diskImageMiB; i++ {
		if _, err := f.Write(buf); err != nil {
			_ = f.Close() // the write failed already
			return fmt.Errorf("disk image: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	return nil
}

// measureDisk runs the guest's dd commands on its first virtio disk.
// cpu, if set, reads the VMM's CPU time (kubevmm only).
func measureDisk(ctx context.Context, con *console, cpu func() time.Duration) (diskResult, error) {
	var r diskResult
	steps := []struct {
		name string
		cmd  string
		d    *time.Duration
		c    *time.Duration
	}{
		// what producing the written data costs the guest, without a device
		{"zero", fmt.Sprintf("dd if=/dev/zero of=/dev/null bs=1M count=%d", diskIOMiB), &r.zero, &r.zeroCPU},
		{"write", fmt.Sprintf("dd if=/dev/zero of=/dev/vda bs=1M count=%d oflag=direct", diskIOMiB), &r.write, &r.writeCPU},
		{"read", fmt.Sprintf("dd if=/dev/vda of=/dev/null bs=1M count=%d iflag=direct", diskIOMiB), &r.read, &r.readCPU},
	}
	for _, s := range steps {
		var before time.Duration
		if cpu != nil {
			before = cpu()
		}
		d, n, err := con.timed(ctx, s.cmd)
		if err != nil {
			return r, fmt.Errorf("disk %s: %w", s.name, err)
		}
		*s.d = d
		if cpu != nil {
			*s.c = (cpu() - before) / time.Duration(n)
		}
		log("disk: %s %d MiB in %v, %d runs (%s)", s.name, diskIOMiB, d.Round(time.Millisecond), n, mbps(diskIOMiB<<20, d))
	}
	return r, nil
}

// mbps formats a throughput in MB/s (10^6 bytes per second), as dd does.
func mbps(bytes int64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f MB/s", float64(bytes)/d.Seconds()/1e6)
}

func renderStorage(b *strings.Builder, ours, theirs ioResult, qname string) {
	fmt.Fprintf(b, "## Storage: raw virtio disk, sequential, 1 MiB blocks, %d MiB\n\n", diskIOMiB)
	fmt.Fprintf(b, "Method: in a 1-vCPU 128 MiB guest, busybox `dd` with `oflag=direct`/`iflag=direct` writes then reads %d MiB on `/dev/vda` "+
		"(a fully allocated %d MiB raw image in the host's page cache, host cache mode writeback for both VMMs), timed with the guest's clock "+
		"(repeated until a second has passed; times are per run).\n\n", diskIOMiB, diskImageMiB)
	if ours.err != nil || theirs.err != nil {
		writeErrs(b, ours.err, theirs.err)
	}
	fmt.Fprintf(b, "| guest command | kubevmm | %s | kubevmm VMM CPU outside the guest |\n|---|---|---|---|\n", qname)
	n := int64(diskIOMiB) << 20
	row := func(name string, mib int, f func(diskResult) time.Duration, c func(diskResult) time.Duration) {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", name, rate(ours.diskOK, n, f(ours.disk)),
			rate(theirs.diskOK, n, f(theirs.disk)), cpuCell(ours.diskOK, c(ours.disk), mib))
	}
	row("sequential write (`dd if=/dev/zero of=/dev/vda oflag=direct`)", diskIOMiB, func(d diskResult) time.Duration { return d.write }, func(d diskResult) time.Duration { return d.writeCPU })
	row("sequential read (`dd if=/dev/vda of=/dev/null iflag=direct`)", diskIOMiB, func(d diskResult) time.Duration { return d.read }, func(d diskResult) time.Duration { return d.readCPU })
	row("no device: `dd if=/dev/zero of=/dev/null` (the guest kernel's cost of producing the written data)", 0, func(d diskResult) time.Duration { return d.zero }, func(d diskResult) time.Duration { return d.zeroCPU })
	b.WriteString("\nVMM CPU outside the guest is the kubevmm process's CPU time minus the vCPU thread's time in KVM_RUN (on this host, KVM emulating the guest kernel) " +
		"during the command: the device emulation's own cost.\n")
}

func rate(ok bool, n int64, d time.Duration) string {
	if !ok {
		return "failed"
	}
	return fmt.Sprintf("%s (%s)", mbps(n, d), fmtD(d))
}

// cpuCell is the VMM's CPU time for moving mib MiB, and per MiB (the
// devices section's unit) when mib is not zero.
func cpuCell(ok bool, d time.Duration, mib int) string {
	if !ok {
		return "n/a"
	}
	if mib == 0 {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%d ms (%.1f ms/MiB)", d.Milliseconds(), float64(d.Microseconds())/1e3/float64(mib))
}
