package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// expandCommand prints a VirtualMachine with its instance type and
// preference applied, as virt-api's expand-spec (a stored VM, --vm) and
// expand-vm-spec (one from a file, -f) subresources return it.
func (c *cli) expandCommand() *cobra.Command {
	var vm, file, output string
	cmd := &cobra.Command{
		Use:   "expand (VM)",
		Short: "Print a VirtualMachine with its instance type and preference applied.",
		Example: `  # The VirtualMachine 'myvm', expanded:
  virtctl expand --vm myvm

  # One from a file (- for stdin), as JSON:
  virtctl expand --file myvm.yaml --output json`,
		Args: exactArgs(0, "--vm NAME or --file FILE"),
		RunE: runE(func(cmd *cobra.Command, _ []string) (int, error) {
			if (vm == "") == (file == "") {
				return 2, errors.New("expand: want one of --vm NAME and --file FILE")
			}
			if output != "yaml" && output != "json" {
				return 2, fmt.Errorf("expand: --output %q: want yaml or json", output)
			}
			ac, err := c.apiClient()
			if err != nil {
				return 1, err
			}
			expanded, err := ac.expand(context.Background(), vm, file, c.stdin)
			if err != nil {
				return 1, fmt.Errorf("expand: %w", err)
			}
			var b []byte
			if output == "json" {
				b, err = json.MarshalIndent(expanded, "", " ")
			} else {
				b, err = yaml.Marshal(expanded)
			}
			if err != nil {
				return 1, fmt.Errorf("expand: %w", err)
			}
			_, err = cmd.OutOrStdout().Write(b)
			return 0, err
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&vm, "vm", "", `The VirtualMachine to expand. Mutually exclusive with "--file".`)
	fs.StringVarP(&file, "file", "f", "", `A file holding the VirtualMachine to expand (- for stdin). Mutually exclusive with "--vm".`)
	fs.StringVarP(&output, "output", "o", "yaml", "The output format: yaml or json.")
	return cmd
}

// expand asks virt-api for the VM name, or the one in file, expanded.
func (c *apiClient) expand(ctx context.Context, name, file string, stdin io.Reader) (*v1.VirtualMachine, error) {
	var b []byte
	var err error
	if name != "" {
		b, err = c.do(ctx, http.MethodGet, c.url("virtualmachines", name, "expand-spec"), nil)
	} else {
		var body []byte
		if body, err = readVMFile(file, stdin); err == nil {
			url := fmt.Sprintf("%s/apis/%s/namespaces/%s/expand-vm-spec", strings.TrimSuffix(c.cfg.Host, "/"), v1.SubresourceGroupVersion, c.ns)
			b, err = c.do(ctx, http.MethodPut, url, bytes.NewReader(body))
		}
	}
	if err != nil {
		return nil, err
	}
	vm := &v1.VirtualMachine{}
	if err := json.Unmarshal(b, vm); err != nil {
		return nil, fmt.Errorf("the reply: %w", err)
	}
	return vm, nil
}

// readVMFile reads a VirtualMachine, YAML or JSON, from a file or stdin
// ("-"), and returns it as JSON.
func readVMFile(name string, stdin io.Reader) ([]byte, error) {
	b, err := readManifest(name, stdin)
	if err != nil {
		return nil, err
	}
	vm := &v1.VirtualMachine{}
	if err := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096).Decode(vm); err != nil {
		return nil, fmt.Errorf("%s: not a VirtualMachine: %w", name, err)
	}
	return json.Marshal(vm)
}
