package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/spf13/cobra"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// guestAgentCommands are virtctl's commands that read the guest agent,
// and the VMI subresource each reads (KubeVirt's names).
var guestAgentCommands = map[string]string{
	"guestosinfo": "guestosinfo",
	"userlist":    "userlist",
	"fslist":      "filesystemlist",
}

// guestAgentCommand is guestosinfo, userlist or fslist: it prints what
// the VMI's guest agent reports, as indented JSON of KubeVirt's type, as
// KubeVirt's virtctl does.
func (c *cli) guestAgentCommand(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:     name + " (VMI)",
		Short:   short,
		Example: fmt.Sprintf("  # What the guest agent of the VirtualMachineInstance 'myvmi' reports:\n  virtctl %s myvmi", name),
		Args:    exactArgs(1, "VMI"),
		RunE: c.withClient(func(ac *apiClient, cmd *cobra.Command, args []string) (int, error) {
			if err := ac.printGuestAgent(context.Background(), name, args[0], cmd.OutOrStdout()); err != nil {
				return 1, err
			}
			return 0, nil
		}),
	}
}

func (c *apiClient) printGuestAgent(ctx context.Context, cmd, name string, stdout io.Writer) error {
	sub := guestAgentCommands[cmd]
	b, err := c.do(ctx, http.MethodGet, c.url("virtualmachineinstances", name, sub), nil)
	if err != nil {
		return fmt.Errorf("%s %s: %w", cmd, name, err)
	}
	var v any
	switch sub {
	case "guestosinfo":
		v = &v1.VirtualMachineInstanceGuestAgentInfo{}
	case "userlist":
		v = &v1.VirtualMachineInstanceGuestOSUserList{}
	default:
		v = &v1.VirtualMachineInstanceFileSystemList{}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s %s: the reply: %w", cmd, name, err)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", out)
	return err
}
