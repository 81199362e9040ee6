// Command vmm runs one virtual machine on this host with kubevmm's Go VMM.
//
//	vmm run --kernel vmlinux --initrd initrd.cpio --cpus 2 --memory 256M
//
// Exit status: 0 when the guest ends normally (it powers off or reboots),
// 1 when the guest fails (crash, an instruction the VMM can't complete),
// 2 for usage and configuration errors (bad flags, unusable kernel,
// memory size, no KVM).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kubevmm/kubevmm/vmm/procmem"
)

const (
	exitOK     = 0
	exitGuest  = 1
	exitConfig = 2
)

// usageError is a bad command line: reported as one line and exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

const topUsage = `usage: vmm <command> [flags]

commands:
  run       boot a Linux kernel in a new VM (or, with --incoming, receive a migrated one)
  restore   run a VM from a snapshot
  snapshot  snapshot a running VM                     (talks to 'run --api')
  migrate   live-migrate a running VM to another VMM  (talks to 'run --api')
  pause     pause a running VM
  resume    resume a paused VM
  status    print a running VM's state
  stop      stop a running VM
  reset     reset a running VM: the guest boots again at once
  reboot    ask the guest to reboot (ACPI power button; its poweroff boots it again)
  volume    hot-plug a disk image into a running VM's SCSI controller (run --scsi), unplug it, list them
  version   print the version

Run 'vmm <command> --help' for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage)
		return exitConfig
	}
	var err error
	switch args[0] {
	case "run", "restore", "snapshot", "migrate", "pause", "resume", "status", "stop", "reset", "reboot", "volume":
		var code int
		switch args[0] {
		case "run":
			procmem.TuneGC()
			code, err = cmdRun(args[1:], stdin, stdout, stderr)
		case "restore":
			procmem.TuneGC()
			code, err = cmdRestore(args[1:], stdin, stdout, stderr)
		case "snapshot":
			code, err = cmdSnapshot(args[1:], stdout)
		case "migrate":
			code, err = cmdMigrate(args[1:], stdout)
		case "volume":
			code, err = cmdVolume(args[1:], stdout)
		default:
			code, err = cmdControl(args[0], args[1:], stdout)
		}
		if err == nil {
			return code
		}
		var ue *usageError
		if !errors.As(err, &ue) {
			// an operation that failed at run time, not bad usage
			fmt.Fprintf(stderr, "vmm: %s\n", oneLine(err.Error()))
			return code
		}
	case "version", "--version":
		fmt.Fprintln(stdout, "vmm", version)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, topUsage)
		return exitOK
	default:
		err = usagef("unknown command %q (try 'vmm --help')", args[0])
	}
	fmt.Fprintf(stderr, "vmm: %s\n", oneLine(err.Error()))
	return exitConfig
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

var version = "v0.1.0-dev"
