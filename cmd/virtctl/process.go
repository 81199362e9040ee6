package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kubevmm/kubevmm/api/template/process"
	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
)

// processCommand is `oc process`: it prints a template's objects, its
// parameters substituted, as a v1 List for `kubectl apply -f -`. It is
// kubevmm's own (upstream's `template process` takes KubeVirt's
// VirtualMachineTemplates, a kind kubevmm does not serve; the SSP's
// common templates are OpenShift Templates).
//
//	virtctl process TEMPLATE [-n NS] [-p NAME=VALUE]... [-o json|yaml]
//	virtctl process [--local] -f FILE|- [-p NAME=VALUE]... [-o json|yaml]
//
// TEMPLATE is read from the cluster (namespace NS); a file needs no
// cluster (--local is accepted for oc's spelling and changes nothing).
// Parameters the template does not have, and required parameters left
// empty, are errors.
func (c *cli) processCommand() *cobra.Command {
	var o processOptions
	cmd := &cobra.Command{
		Use:   "process TEMPLATE | -f FILE",
		Short: "Print an OpenShift Template's objects, its parameters filled in (oc process; kubevmm's own).",
		Example: `  # A VM from a common template of the cluster:
  virtctl process fedora-server-small -n openshift -p NAME=vm1 | kubectl apply -f -

  # From a file, as YAML:
  virtctl process -f template.yaml -p NAME=vm1 -o yaml`,
		RunE: runE(func(_ *cobra.Command, args []string) (int, error) {
			return c.processTemplate(o, args)
		}),
	}
	fs := cmd.Flags()
	fs.StringArrayVarP(&o.params, "param", "p", nil, "A parameter's value, NAME=VALUE; repeatable.")
	fs.StringVarP(&o.file, "filename", "f", "", "A file holding the template (- for stdin), instead of the cluster's.")
	fs.BoolVar(&o.local, "local", false, "Process without the cluster (with -f; as oc's).")
	fs.StringVarP(&o.output, "output", "o", "json", "The output format: json or yaml.")
	return cmd
}

type processOptions struct {
	params       []string
	file, output string
	local        bool
}

func (c *cli) processTemplate(o processOptions, names []string) (int, error) {
	output := o.output
	if output != "json" && output != "yaml" {
		return 2, fmt.Errorf("process: -o %q: want json or yaml", output)
	}
	values := map[string]string{}
	for _, p := range o.params {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return 2, fmt.Errorf("process: -p %q: want NAME=VALUE", p)
		}
		if _, dup := values[k]; dup {
			return 2, fmt.Errorf("process: parameter %s given twice", k)
		}
		values[k] = v
	}

	var t *templatev1.Template
	var err error
	switch {
	case o.file != "" && len(names) == 0:
		if t, err = readTemplateFile(o.file, c.stdin); err != nil {
			return 1, fmt.Errorf("process: %w", err)
		}
	case o.file == "" && len(names) == 1 && !o.local:
		ac, err := c.apiClient()
		if err != nil {
			return 1, err
		}
		if t, err = ac.template(context.Background(), names[0]); err != nil {
			return 1, fmt.Errorf("process: %w", err)
		}
	default:
		return 2, errors.New("process: want one TEMPLATE (from the cluster) or -f FILE")
	}

	objs, err := process.Process(t, values)
	if err != nil {
		return 1, fmt.Errorf("process %s: %w", t.Name, err)
	}
	list := unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{}}, Items: objs}
	b, err := list.MarshalJSON()
	if err != nil {
		return 1, fmt.Errorf("process: encoding the list: %w", err)
	}
	if output == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return 1, fmt.Errorf("process: encoding the list: %w", err)
		}
	} else {
		var indented bytes.Buffer
		if err := json.Indent(&indented, b, "", "    "); err != nil {
			return 1, fmt.Errorf("process: encoding the list: %w", err)
		}
		b = append(bytes.TrimRight(indented.Bytes(), "\n"), '\n')
	}
	_, err = c.stdout.Write(b)
	return 0, err
}

// readTemplateFile reads a Template, YAML or JSON, from a file or stdin
// ("-").
func readTemplateFile(name string, stdin io.Reader) (*templatev1.Template, error) {
	b, err := readManifest(name, stdin)
	if err != nil {
		return nil, err
	}
	return decodeTemplate(name, b)
}

// readManifest reads a file, or stdin ("-"), of at most maxManifestBytes.
func readManifest(name string, stdin io.Reader) ([]byte, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, maxManifestBytes+1))
	} else {
		var f *os.File
		if f, err = os.Open(name); err == nil {
			b, err = io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
			_ = f.Close() // read only
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxManifestBytes)
	}
	return b, nil
}

// maxManifestBytes bounds a file read as the API server bounds an object
// (etcd's default request limit is 1.5 MiB).
const maxManifestBytes = 3 << 20

// decodeTemplate decodes a Template; oc also takes the legacy apiVersion v1.
func decodeTemplate(from string, b []byte) (*templatev1.Template, error) {
	t := &templatev1.Template{}
	if err := yaml.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("%s: not a Template: %w", from, err)
	}
	if t.Kind != templatev1.Kind || (t.APIVersion != templatev1.GroupVersion.String() && t.APIVersion != "v1") {
		return nil, fmt.Errorf("%s: apiVersion %q kind %q, want %s %s", from, t.APIVersion, t.Kind, templatev1.GroupVersion, templatev1.Kind)
	}
	return t, nil
}

// template reads a Template from the cluster.
func (c *apiClient) template(ctx context.Context, name string) (*templatev1.Template, error) {
	b, err := c.get(ctx, fmt.Sprintf("/apis/%s/namespaces/%s/templates/%s", templatev1.GroupVersion, c.ns, name))
	if err != nil {
		return nil, fmt.Errorf("template %s/%s: %w", c.ns, name, err)
	}
	return decodeTemplate("template "+c.ns+"/"+name, b)
}
