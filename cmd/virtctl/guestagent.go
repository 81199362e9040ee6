package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// guestAgentCommands are virtctl's commands that read the guest agent,
// and the VMI subresource each reads (KubeVirt's names).
var guestAgentCommands = map[string]string{
	"guestosinfo": "guestosinfo",
	"userlist":    "userlist",
	"fslist":      "filesystemlist",
}

// guestAgent prints what the VMI (args: its name) guest agent reports,
// as indented JSON of KubeVirt's type, as KubeVirt's virtctl does; it
// returns the exit code.
func (c *apiClient) guestAgent(ctx context.Context, cmd string, args []string, stdout io.Writer) (int, error) {
	if len(args) != 1 {
		return 2, fmt.Errorf("%s: want VMI", cmd)
	}
	if err := c.printGuestAgent(ctx, cmd, args[0], stdout); err != nil {
		return 1, err
	}
	return 0, nil
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
