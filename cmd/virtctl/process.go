package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kubevmm/kubevmm/api/template/process"
	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
)

// processTemplate is `oc process`: it prints a template's objects, its
// parameters substituted, as a v1 List for `kubectl apply -f -`.
//
//	virtctl process TEMPLATE [-n NS] [-p NAME=VALUE]... [-o json|yaml]
//	virtctl process [--local] -f FILE|- [-p NAME=VALUE]... [-o json|yaml]
//
// TEMPLATE is read from the cluster (namespace NS); a file needs no
// cluster (--local is accepted for oc's spelling and changes nothing).
// Parameters the template does not have, and required parameters left
// empty, are errors.
func processTemplate(args []string, ns, kubeconfig string, stdin io.Reader, stdout io.Writer) (int, error) {
	fs := flag.NewFlagSet("process", flag.ContinueOnError)
	var params multiFlag
	var file, output string
	var local bool
	fs.StringVar(&ns, "n", ns, "namespace")
	fs.StringVar(&ns, "namespace", ns, "namespace")
	fs.Var(&params, "p", "NAME=VALUE")
	fs.Var(&params, "param", "NAME=VALUE")
	fs.StringVar(&file, "f", "", "template file")
	fs.StringVar(&file, "filename", "", "template file")
	fs.BoolVar(&local, "local", false, "process without the cluster")
	fs.StringVar(&output, "o", "json", "json or yaml")
	fs.StringVar(&output, "output", "json", "json or yaml")
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return 2, fmt.Errorf("process: %w", err)
	}
	if output != "json" && output != "yaml" {
		return 2, fmt.Errorf("process: -o %q: want json or yaml", output)
	}
	values := map[string]string{}
	for _, p := range params {
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
	switch {
	case file != "" && len(names) == 0:
		if t, err = readTemplateFile(file, stdin); err != nil {
			return 1, fmt.Errorf("process: %w", err)
		}
	case file == "" && len(names) == 1 && !local:
		c, err := newAPIClient(ns, kubeconfig)
		if err != nil {
			return 1, err
		}
		if t, err = c.template(context.Background(), names[0]); err != nil {
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
	_, err = stdout.Write(b)
	return 0, err
}

// parseInterleaved parses flags placed before, between or after the
// positional arguments (`process NAME -p A=B`), which the flag package
// alone stops at.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// readTemplateFile reads a Template, YAML or JSON, from a file or stdin
// ("-").
func readTemplateFile(name string, stdin io.Reader) (*templatev1.Template, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, maxTemplateBytes+1))
	} else {
		var f *os.File
		if f, err = os.Open(name); err == nil {
			b, err = io.ReadAll(io.LimitReader(f, maxTemplateBytes+1))
			_ = f.Close() // read only
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxTemplateBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxTemplateBytes)
	}
	return decodeTemplate(name, b)
}

// maxTemplateBytes bounds a template file as the API server bounds an
// object (etcd's default request limit is 1.5 MiB).
const maxTemplateBytes = 3 << 20

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
