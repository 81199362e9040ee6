package main

// What upstream's virtctl has and kubevmm's does not do: commands and
// flags users may type, each refused by name rather than ignored.

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// unsupportedCommands are upstream's commands that kubevmm's virtctl
// does not implement: each exists, with its help, and refuses to run.
func unsupportedCommands() []*cobra.Command {
	vnc := unsupported("vnc (VMI)", "Open a VNC connection to a virtual machine instance.")
	vnc.AddCommand(unsupported("screenshot (VMI)", "Save a screenshot of a virtual machine instance's display."))
	return []*cobra.Command{
		groupCommand("adm", "Administer KubeVirt's configuration.",
			unsupported("log-verbosity", "Show or set the log verbosity of KubeVirt's components.")),
		groupCommand("credentials", "Manage a virtual machine's credentials.",
			unsupported("add-ssh-key", "Add an SSH public key to a virtual machine."),
			unsupported("remove-ssh-key", "Remove an SSH public key from a virtual machine."),
			unsupported("set-password", "Set a user's password in a virtual machine.")),
		unsupported("evacuate-cancel (vm <vm-name> | vmi <vmi-name>)", "Cancel the evacuation of a VM, a VMI or all VMIs of a node."),
		unsupported("expose (TYPE NAME)", "Expose a VM, VMI or VMI replica set as a new Service."),
		unsupported("guestfs", "Start a shell in a libguestfs pod on a volume."),
		unsupported("memory-dump get/download/remove (VM)", "Dump a running VM's memory to a PVC."),
		unsupported("migrate-cancel (VM)", "Cancel a virtual machine's migration."),
		unsupported("objectgraph (VM|VMI)", "Print the objects a VM or VMI depends on."),
		unsupported("permitted-devices", "List the host devices virtual machine instances may be given."),
		groupCommand("template", "Work with VirtualMachineTemplates (for OpenShift Templates, see process).",
			unsupported("convert [name]", "Convert an OpenShift Template into a VirtualMachineTemplate."),
			unsupported("create", "Create a VirtualMachineTemplate from a VM."),
			unsupported("process [name]", "Process a VirtualMachineTemplate into a VirtualMachine.")),
		unsupported("usbredir (vendor:product)|(bus-device) (VMI)", "Redirect a USB device to a virtual machine instance."),
		unsupported("vmexport", "Export a VM's, snapshot's or PVC's volumes."),
		vnc,
	}
}

// unsupported is one command that refuses to run: one line naming it,
// whatever its arguments and flags; help works as for any other.
func unsupported(use, short string) *cobra.Command {
	return &cobra.Command{
		Use:                use,
		Short:              strings.TrimSuffix(short, ".") + " (not supported by kubevmm).",
		DisableFlagParsing: true, // upstream's flags, whichever given, come to the refusal
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, a := range args {
				if a == "--" {
					break
				}
				if a == "-h" || a == "--help" {
					return pflag.ErrHelp
				}
			}
			return fmt.Errorf("%s is not supported by kubevmm's virtctl", commandName(cmd))
		},
	}
}

// markUnsupported marks flags of fs that kubevmm's virtctl takes as
// upstream's spells them but does not act on: their help says so, and
// any of them set to other than its default is refused by name (before
// every command runs: refuseUnsupported).
func markUnsupported(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		f := fs.Lookup(n)
		f.Usage += " (not supported by kubevmm)"
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[unsupportedAnnotation] = nil
	}
}

const unsupportedAnnotation = "kubevmm.io/unsupported"

// refuseUnsupported is every command's PersistentPreRunE.
func refuseUnsupported(cmd *cobra.Command, _ []string) error {
	if err := unsupportedSet(cmd.Flags()); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("%s: %w", commandName(cmd), err)}
	}
	return nil
}

// unsupportedSet is the first flag of fs marked unsupported and set to
// other than its default, refused.
func unsupportedSet(fs *pflag.FlagSet) error {
	var err error
	fs.Visit(func(f *pflag.Flag) {
		if _, ok := f.Annotations[unsupportedAnnotation]; ok && err == nil && f.Value.String() != f.DefValue {
			err = fmt.Errorf("--%s is not supported by kubevmm's virtctl", f.Name)
		}
	})
	return err
}
