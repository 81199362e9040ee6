// Command virt-launcher is the main process of a VMI's pod (see package
// launcher). Subcommands used by the pod's init containers:
//
//	virt-launcher install DIR           copy this binary into DIR
//	virt-launcher copy SRC DST [...]     copy files out of an image
//	virt-launcher wait                  wait for SIGTERM (a hotplug attachment pod's container)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher"
	"github.com/kubevmm/kubevmm/vmm/procmem"
)

func main() {
	if len(os.Args) > 1 {
		var err error
		switch os.Args[1] {
		case "install":
			if len(os.Args) != 3 {
				err = fmt.Errorf("usage: virt-launcher install DIR")
			} else {
				err = launcher.Install(os.Args[2])
			}
		case "copy":
			err = launcher.CopyFiles(os.Args[2:])
		case "wait":
			// The attachment pod only holds its claims on the node.
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			fmt.Println("virt-launcher: waiting for SIGTERM")
			<-ctx.Done()
			stop()
		default:
			err = fmt.Errorf("unknown subcommand %q (install, copy, wait; none runs the VMI)", os.Args[1])
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "virt-launcher:", err)
			os.Exit(2)
		}
		return
	}
	for _, k := range []string{"KUBEVMM_VMI_FILE", "KUBEVMM_SOCKET_DIR"} {
		if os.Getenv(k) == "" {
			fmt.Fprintf(os.Stderr, "virt-launcher: %s is not set (this runs in a virt-launcher pod)\n", k)
			os.Exit(2)
		}
	}
	paths := launcher.DefaultPaths(os.Getenv("KUBEVMM_SOCKET_DIR"))
	pvcs, err := vmispec.DecodePVCInfo(os.Getenv(vmispec.PVCInfoEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "virt-launcher:", err)
		os.Exit(2)
	}
	paths.PVCs = pvcs
	procmem.TuneGC() // the VMM runs in this process
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code, err := launcher.Run(ctx, launcher.Options{
		VMIFile:    os.Getenv("KUBEVMM_VMI_FILE"),
		Paths:      paths,
		Log:        os.Stderr,
		Console:    os.Stdout,
		QEMUBinary: os.Getenv("KUBEVMM_QEMU_BINARY"),
		// Set on migration target pods: receive the guest instead of
		// booting it.
		Incoming: os.Getenv(vmispec.IncomingEnv),
		// The VMM's seccomp filter, in the mode the VMI's
		// kubevmm.io/seccomp annotation asks for (kill by default).
		Seccomp: true,
	})
	stop() // os.Exit runs no deferred calls
	if err != nil {
		fmt.Fprintln(os.Stderr, "virt-launcher:", err)
	}
	os.Exit(code)
}
