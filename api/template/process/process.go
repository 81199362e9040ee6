// Package process turns a template.openshift.io/v1 Template into the
// objects it describes, as `oc process` does: parameter values are taken
// from the caller, else the template's value, else generated; required
// parameters must end up non-empty; ${NAME} is replaced within strings and
// a string that is exactly ${{NAME}} becomes the value as JSON (a number,
// a boolean, an object; a string if it is not JSON); hard-coded namespaces
// are dropped; the template's labels go on every object. VirtualMachines
// also get the labels that name their template (how the template validator
// and UIs find it) and the template's os, workload and flavor labels, as
// KubeVirt's "create VM from template" tooling sets them.
//
// The package is pure: no API server, no I/O but crypto/rand.
package process

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
)

// Labels processing puts on a VirtualMachine made from a template
// (KubeVirt's: virt-template-validator finds the VM's template by them).
const (
	LabelTemplate          = "vm.kubevirt.io/template"
	LabelTemplateNamespace = "vm.kubevirt.io/template.namespace"
)

// copiedLabelPrefixes are the template's own labels a VirtualMachine made
// from it carries: what OS, workload and size it was made for.
var copiedLabelPrefixes = []string{"os.template.kubevirt.io/", "workload.template.kubevirt.io/", "flavor.template.kubevirt.io/"}

var (
	// paramName is what a parameter may be called: what ${NAME} matches.
	paramName = regexp.MustCompile(`^[a-zA-Z0-9_]+$`)
	// stringRef is ${NAME} anywhere in a string.
	stringRef = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)\}`)
	// jsonRef is a string that is exactly ${{NAME}}.
	jsonRef = regexp.MustCompile(`^\$\{\{([a-zA-Z0-9_]+)\}\}$`)
)

// Process returns t's objects with its parameters substituted. params are
// the caller's values (`-p NAME=VALUE`); naming a parameter t does not have
// is an error, as is a required parameter left empty. t is not modified.
func Process(t *templatev1.Template, params map[string]string) ([]unstructured.Unstructured, error) {
	values, err := paramValues(t, params)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range t.ObjectLabels {
		k, v = substitute(values, k), substitute(values, v)
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("template labels: %q appears twice after substitution", k)
		}
		labels[k] = v
	}
	out := make([]unstructured.Unstructured, 0, len(t.Objects))
	for i, o := range t.Objects {
		obj, err := processObject(t, values, labels, o.Raw, o.Object)
		if err != nil {
			return nil, fmt.Errorf("objects[%d]: %w", i, err)
		}
		out = append(out, unstructured.Unstructured{Object: obj})
	}
	return out, nil
}

// paramValues returns each parameter's value after processing: the caller's,
// else the template's, else generated. It is where every parameter error
// comes from, naming the parameter.
func paramValues(t *templatev1.Template, params map[string]string) (map[string]string, error) {
	values := make(map[string]string, len(t.Parameters))
	for i, p := range t.Parameters {
		if !paramName.MatchString(p.Name) {
			return nil, fmt.Errorf("parameters[%d]: name %q: only letters, digits and underscores", i, p.Name)
		}
		if _, dup := values[p.Name]; dup {
			return nil, fmt.Errorf("parameter %s: declared twice", p.Name)
		}
		v := p.Value
		if given, ok := params[p.Name]; ok {
			v = given
		}
		if v == "" && p.Generate != "" {
			if p.Generate != GeneratorExpression {
				return nil, fmt.Errorf("parameter %s: unknown generator %q (only %q)", p.Name, p.Generate, GeneratorExpression)
			}
			var err error
			if v, err = Generate(p.From); err != nil {
				return nil, fmt.Errorf("parameter %s: generating from %q: %w", p.Name, p.From, err)
			}
		}
		if v == "" && p.Required {
			return nil, fmt.Errorf("parameter %s is required and must be given a value", p.Name)
		}
		values[p.Name] = v
	}
	var unknown []string
	for name := range params {
		if _, ok := values[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return nil, fmt.Errorf("unknown parameter %s: template %s has %s", strings.Join(unknown, ", "), t.Name, names(t))
	}
	return values, nil
}

func names(t *templatev1.Template) string {
	if len(t.Parameters) == 0 {
		return "no parameters"
	}
	var n []string
	for _, p := range t.Parameters {
		n = append(n, p.Name)
	}
	return strings.Join(n, ", ")
}

// processObject decodes one of the template's objects, substitutes in it and
// labels it.
func processObject(t *templatev1.Template, values, labels map[string]string, raw []byte, typed any) (map[string]any, error) {
	if len(raw) == 0 {
		// Built in Go (operator/ssp/templates): encode to get the JSON form.
		if typed == nil {
			return nil, fmt.Errorf("empty object")
		}
		var err error
		if raw, err = json.Marshal(typed); err != nil {
			return nil, fmt.Errorf("encoding: %w", err)
		}
	}
	// Integers decode as int64, as unstructured objects hold them.
	var obj map[string]any
	if err := utiljson.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("not a JSON object: null")
	}
	meta, err := metadata(obj)
	if err != nil {
		return nil, err
	}
	// A namespace written into the template is dropped: the objects go where
	// the user creates them, unless the template makes it a parameter.
	if ns, ok := meta["namespace"].(string); !ok || !stringRef.MatchString(ns) {
		delete(meta, "namespace")
	}
	v, err := walk(values, obj)
	if err != nil {
		return nil, err
	}
	obj = v.(map[string]any)
	u := unstructured.Unstructured{Object: obj}
	if u.GetAPIVersion() == "" || u.GetKind() == "" {
		return nil, fmt.Errorf("apiVersion and kind are required (got %q, %q)", u.GetAPIVersion(), u.GetKind())
	}
	// walk returned new maps: read metadata again.
	if meta, err = metadata(obj); err != nil {
		return nil, err
	}
	l, err := stringMap(meta, "labels")
	if err != nil {
		return nil, err
	}
	for k, v := range labels {
		l[k] = v
	}
	if u.GetKind() == "VirtualMachine" && strings.HasPrefix(u.GetAPIVersion(), "kubevirt.io/") {
		for k, v := range t.Labels {
			if slices.ContainsFunc(copiedLabelPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
				l[k] = v
			}
		}
		l[LabelTemplate] = t.Name
		if t.Namespace != "" {
			l[LabelTemplateNamespace] = t.Namespace
		}
	}
	if len(l) > 0 {
		meta["labels"] = l
	}
	return obj, nil
}

// metadata returns obj's metadata, added if missing.
func metadata(obj map[string]any) (map[string]any, error) {
	switch m := obj["metadata"].(type) {
	case nil:
		n := map[string]any{}
		obj["metadata"] = n
		return n, nil
	case map[string]any:
		return m, nil
	default:
		return nil, fmt.Errorf("metadata is a %T, not an object", obj["metadata"])
	}
}

// stringMap returns meta[key] (labels) as a map of strings.
func stringMap(meta map[string]any, key string) (map[string]any, error) {
	switch m := meta[key].(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		for k, v := range m {
			if _, ok := v.(string); !ok {
				return nil, fmt.Errorf("metadata.%s.%s is a %T, not a string", key, k, v)
			}
		}
		return m, nil
	default:
		return nil, fmt.Errorf("metadata.%s is a %T, not an object", key, meta[key])
	}
}

// walk substitutes parameters in every string of v, map keys included.
func walk(values map[string]string, v any) (any, error) {
	switch v := v.(type) {
	case string:
		if m := jsonRef.FindStringSubmatch(v); m != nil {
			if val, ok := values[m[1]]; ok {
				var j any
				if err := utiljson.Unmarshal([]byte(val), &j); err != nil {
					return val, nil // not JSON: a string, as oc does
				}
				return j, nil
			}
		}
		return substitute(values, v), nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			nk := substitute(values, k)
			if _, dup := out[nk]; dup {
				return nil, fmt.Errorf("key %q appears twice after substitution", nk)
			}
			ne, err := walk(values, e)
			if err != nil {
				return nil, err
			}
			out[nk] = ne
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			ne, err := walk(values, e)
			if err != nil {
				return nil, err
			}
			out[i] = ne
		}
		return out, nil
	default:
		return v, nil
	}
}

// substitute replaces each ${NAME} of a known parameter in s; references
// to unknown names stay as written (oc's behaviour).
func substitute(values map[string]string, s string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return stringRef.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := values[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}
