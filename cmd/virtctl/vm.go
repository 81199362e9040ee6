package main

// The commands that ask a VM or VMI subresource for a change of state
// (start, stop, restart, migrate, pause, unpause, reset, soft-reboot), the
// serial console and version.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/version"
)

// dryRunUsage is upstream's --dry-run, which kubevmm's virt-api takes on
// hotplug requests only.
const dryRunUsage = "--dry-run=false: if true, the request is checked and nothing is changed."

// vmCommand is start, stop, restart or migrate of a VirtualMachine, each
// a PUT on its subresource of that name; their options are upstream's,
// refused unless at their defaults (kubevmm's virt-api takes none).
func (c *cli) vmCommand(name, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:     name + " (VM)",
		Short:   short,
		Example: fmt.Sprintf("  # %s the VirtualMachine 'myvm':\n  virtctl %s myvm", strings.ToUpper(name[:1])+name[1:], name),
		Args:    exactArgs(1, "VM"),
		RunE: c.withClient(func(ac *apiClient, cmd *cobra.Command, args []string) (int, error) {
			if err := ac.put(context.Background(), name, "virtualmachines", args[0], name); err != nil {
				return 1, err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "VM %s was scheduled to %s\n", args[0], name)
			return 0, nil
		}),
	}
	fs := cmd.Flags()
	switch name {
	case "start":
		fs.Bool("paused", false, "--paused=false: if true, start the VM paused")
		markUnsupported(fs, "paused")
	case "stop", "restart":
		fs.Bool("force", false, "--force=false: with --grace-period=0, delete the VMI's pod at once, without waiting for it to end")
		fs.Int64("grace-period", -1, "--grace-period=-1: seconds the guest is given to shut down (0 with --force only)")
		markUnsupported(fs, "force", "grace-period")
	case "migrate":
		fs.StringToString("addedNodeSelector", nil, "--addedNodeSelector=key=value1,key2=value2: a node selector added for this migration only")
		markUnsupported(fs, "addedNodeSelector")
	}
	fs.Bool("dry-run", false, dryRunUsage)
	markUnsupported(fs, "dry-run")
	return cmd
}

// pauseCommand is pause or unpause of a VM's or VMI's guest.
func (c *cli) pauseCommand(name, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:     name + " vm|vmi (VM)|(VMI)",
		Short:   short,
		Long:    short + "\nThe first argument is the kind, vm or vmi (virtualmachine, virtualmachineinstance, in any case, singular or plural); the second its name.",
		Example: fmt.Sprintf("  # %s the VirtualMachine 'myvm':\n  virtctl %s vm myvm", strings.ToUpper(name[:1])+name[1:], name),
		Args:    exactArgs(2, "vm|vmi NAME"),
		RunE: c.withClient(func(ac *apiClient, cmd *cobra.Command, args []string) (int, error) {
			kind := vmOrVMI[strings.ToLower(args[0])]
			if kind == "" {
				return 2, fmt.Errorf("%s: %q is not vm or vmi", name, args[0])
			}
			if err := ac.put(context.Background(), name, kind, args[1], name); err != nil {
				return 1, err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "VMI %s was scheduled to %s\n", args[1], name)
			return 0, nil
		}),
	}
	cmd.Flags().Bool("dry-run", false, dryRunUsage)
	markUnsupported(cmd.Flags(), "dry-run")
	return cmd
}

// vmOrVMI is the resource of each spelling of KubeVirt's two kinds.
var vmOrVMI = map[string]string{
	"vm": "virtualmachines", "vms": "virtualmachines", "virtualmachine": "virtualmachines", "virtualmachines": "virtualmachines",
	"vmi": "virtualmachineinstances", "vmis": "virtualmachineinstances", "virtualmachineinstance": "virtualmachineinstances", "virtualmachineinstances": "virtualmachineinstances",
}

// vmiCommand is reset or soft-reboot of a VirtualMachineInstance;
// suggestFor are the names typed for it that an unknown command's error
// points to it from (kubevmm's virtctl called soft-reboot softreboot).
func (c *cli) vmiCommand(name, short string, suggestFor ...string) *cobra.Command {
	sub := strings.ReplaceAll(name, "-", "") // soft-reboot's subresource is softreboot
	return &cobra.Command{
		Use:        name + " (VMI)",
		Short:      short,
		SuggestFor: suggestFor,
		Example:    fmt.Sprintf("  # %s the VirtualMachineInstance 'myvmi':\n  virtctl %s myvmi", strings.ToUpper(name[:1])+name[1:], name),
		Args:       exactArgs(1, "VMI"),
		RunE: c.withClient(func(ac *apiClient, cmd *cobra.Command, args []string) (int, error) {
			if err := ac.put(context.Background(), name, "virtualmachineinstances", args[0], sub); err != nil {
				return 1, err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "VMI %s was scheduled to %s\n", args[0], name)
			return 0, nil
		}),
	}
}

func (c *cli) consoleCommand() *cobra.Command {
	var timeout int
	cmd := &cobra.Command{
		Use:   "console (VMI)",
		Short: "Connect to a virtual machine instance's serial console (Ctrl+] leaves it).",
		Example: `  # The console of the VirtualMachineInstance 'myvmi':
  virtctl console myvmi
  # Waiting at most one minute for it to run (default 5):
  virtctl console --timeout=1 myvmi`,
		Args: exactArgs(1, "VMI"),
		RunE: c.withClient(func(ac *apiClient, _ *cobra.Command, args []string) (int, error) {
			return ac.console(args[0], time.Duration(timeout)*time.Minute, c.stdin, c.stdout)
		}),
	}
	cmd.Flags().IntVar(&timeout, "timeout", 5, "Minutes to wait for the virtual machine instance to run (0: not at all).")
	return cmd
}

// console attaches the terminal to the VMI's serial console over a
// websocket through the API server; a VMI not running yet is waited for,
// for at most wait.
func (c *apiClient) console(name string, wait time.Duration, stdin io.Reader, stdout io.Writer) (int, error) {
	deadline := time.Now().Add(wait)
	ws, err := c.dial("virtualmachineinstances", name, "console")
	for err != nil && isStatus(err, http.StatusConflict) && time.Now().Before(deadline) { // not running (yet)
		time.Sleep(time.Second)
		ws, err = c.dial("virtualmachineinstances", name, "console")
	}
	if err != nil {
		return 1, fmt.Errorf("console %s: %w", name, err)
	}
	defer ws.Close()
	f, isFile := stdin.(*os.File)
	interactive := isFile && term.IsTerminal(int(f.Fd()))
	if interactive {
		old, err := term.MakeRaw(int(f.Fd()))
		if err == nil {
			// Best effort on the way out: a terminal gone needs no restoring.
			defer func() { _ = term.Restore(int(f.Fd()), old) }()
		}
		fmt.Fprintf(os.Stderr, "Successfully connected to %s console. The escape sequence is ^]\r\n", name)
	}
	done := make(chan error, 2)
	go func() {
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				done <- nil
				return
			}
			if _, err := stdout.Write(data); err != nil {
				done <- err
				return
			}
		}
	}()
	go func() {
		buf := make([]byte, 1024)
		for {
			n, err := stdin.Read(buf)
			if n > 0 {
				data := buf[:n]
				if i := bytes.IndexByte(data, 0x1d); i >= 0 && interactive { // Ctrl+]
					if i > 0 {
						// Leaving anyway: what precedes ^] is best effort.
						_ = ws.WriteMessage(websocket.BinaryMessage, data[:i])
					}
					done <- nil
					return
				}
				if err := ws.WriteMessage(websocket.BinaryMessage, data); err != nil {
					done <- nil
					return
				}
			}
			if err != nil {
				// stdin ended (not a terminal): keep showing output.
				return
			}
		}
	}()
	if err := <-done; err != nil {
		return 1, err
	}
	return 0, nil
}

// versionCommand prints the client's and the server's version.Info as
// KubeVirt's virtctl does; -c (--client) leaves the server out.
func (c *cli) versionCommand() *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "Print the client's and the server's versions.",
		Example: "  # The client's and the server's versions, for the current context:\n  virtctl version",
		Args:    exactArgs(0, "no argument"),
		RunE: runE(func(cmd *cobra.Command, _ []string) (int, error) {
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "Client Version: %#v\n", version.Get())
			if clientOnly {
				return 0, nil
			}
			ac, err := c.apiClient()
			if err != nil {
				return 1, err
			}
			return ac.serverVersion(out)
		}),
	}
	cmd.Flags().BoolVarP(&clientOnly, "client", "c", false, "The client's version only (no cluster needed).")
	return cmd
}

func (c *apiClient) serverVersion(out io.Writer) (int, error) {
	b, err := c.get(context.Background(), "/apis/"+v1.SubresourceGroupVersion.String()+"/version")
	if err != nil {
		return 1, err
	}
	var server version.Info
	if err := jsonUnmarshal(b, &server); err != nil {
		return 1, fmt.Errorf("server version: %w", err)
	}
	fmt.Fprintf(out, "Server Version: %#v\n", server)
	return 0, nil
}
