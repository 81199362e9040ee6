// Command bench measures kubevmm's VMM against QEMU on this machine and
// writes a Markdown report: boot milestones and the VMM's own memory, a
// disk boot against kernelBoot (kubevmm only), disk and network throughput
// seen from the guest, live migration (idle guests of several sizes, a
// guest dirtying memory with and without auto-converge) and snapshot
// restore, where the VMM's own memory goes, the virtio devices' own CPU
// cost measured without a guest, and CDI's import of a qcow2 against
// qemu-img convert. `make bench` runs it.
//
// Everything it creates — VMM processes, a network namespace with taps, a
// work directory — is removed at the end, also when a step fails or the
// bench is interrupted; VMM processes also die with the bench if it is
// killed outright.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qemu"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

// env is what every section needs.
type env struct {
	vmm, qemu  string // binaries
	kernel     string // the test guest's ELF vmlinux
	baseInitrd string // its initramfs (the boot section's guest)
	initrd     string // the same plus the bench's guest script
	work       string // scratch directory: images, sockets, snapshots
	runs       int
	memMiB     int
	accel      qemu.Accel // how QEMU runs guests here (probeQEMUAccel)
	accelNote  string
	qemuVer    qemuVersion
	netnsSeq   int // network namespaces made so far (newNetns)
	cl         cleanups
}

func main() {
	os.Exit(run())
}

func run() int {
	guest := flag.String("guest", "", "guest image directory (hack/guest-image.sh)")
	vmm := flag.String("vmm", "bin/vmm", "vmm binary")
	qemuBin := flag.String("qemu", "qemu-system-x86_64", "QEMU binary for the baseline")
	out := flag.String("out", "test/bench/RESULTS.md", "report file")
	runs := flag.Int("runs", 3, "boots per configuration in the boot section")
	mem := flag.Int("memory", 128, "guest RAM in the boot section (MiB)")
	sections := flag.String("sections", "boot,memory,diskboot,storage,network,devices,migration,import", "sections to run: boot, memory (VMM memory breakdown and restore timings), diskboot, storage, network, devices (guest-less virtio-net and virtio-blk CPU cost), migration, import (CDI's http import of a 1 GiB qcow2 against qemu-img convert)")
	flag.Parse()
	if *guest == "" {
		fmt.Fprintln(os.Stderr, "bench: -guest is required")
		return 2
	}
	vmmPath, err := filepath.Abs(*vmm)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	// The host programs the bench runs (QEMU for the baseline, ip to run
	// a VMM inside the bench's network namespace), installed when missing.
	qemuPath, err := hosttools.Find(*qemuBin)
	if err == nil {
		_, err = hosttools.Find("ip")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	e := &env{vmm: vmmPath, qemu: qemuPath, runs: *runs, memMiB: *mem,
		kernel: filepath.Join(*guest, "vmlinux"), baseInitrd: filepath.Join(*guest, "initramfs.cpio")}
	defer e.cl.run()
	// Short: the unix sockets of the VMs live under it.
	if e.work, err = os.MkdirTemp("", "kvmbench-"); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	e.cl.add(func() { os.RemoveAll(e.work) })
	if e.initrd, err = writeInitrd(*guest, e.work); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		log("interrupted: stopping (again to stop at once)")
		cancel()
		select {
		case <-sigs:
		case <-time.After(30 * time.Second):
		}
		e.cl.run()
		os.Exit(130)
	}()

	want := map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		want[strings.TrimSpace(s)] = true
	}
	report := e.report(ctx, want)
	if ctx.Err() != nil {
		log("interrupted: %s left as it was", *out)
		return 130
	}
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	fmt.Print(report)
	return 0
}

// report runs the sections in want and renders them as RESULTS.md.
func (e *env) report(ctx context.Context, want map[string]bool) string {
	began := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "# kubevmm benchmarks\n\n%s\n\n", machineInfo())
	// Every section but diskboot compares with QEMU.
	if want["boot"] || want["storage"] || want["network"] || want["migration"] {
		e.probeQEMUAccel(ctx)
		fmt.Fprintf(&b, "%s\n\n", e.accelNote)
	}
	if want["boot"] {
		e.bootSection(ctx).render(&b)
		b.WriteString("\n")
	}
	if want["memory"] {
		e.memorySection(ctx).render(&b)
		b.WriteString("\n")
	}
	if want["diskboot"] {
		e.diskBootSection(ctx).render(&b)
		b.WriteString("\n")
	}
	if want["storage"] || want["network"] {
		ours, theirs := e.ioSections(ctx)
		qname := fmt.Sprintf("QEMU (q35, %s)", strings.ToUpper(string(e.accel)))
		if want["storage"] {
			renderStorage(&b, ours, theirs, qname)
			b.WriteString("\n")
		}
		if want["network"] {
			renderNetwork(&b, ours, theirs, qname)
			b.WriteString("\n")
		}
	}
	if want["devices"] {
		e.devicesSection(ctx).render(&b)
		b.WriteString("\n")
	}
	if want["migration"] {
		e.migrationSection(ctx).render(&b)
	}
	if want["import"] {
		e.importSection(ctx).render(&b)
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "The bench ran for %s.\n", time.Since(began).Round(time.Second))
	return b.String()
}

func log(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}
