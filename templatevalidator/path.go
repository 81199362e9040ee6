package templatevalidator

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/client-go/util/jsonpath"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

const pathPrefix = "jsonpath::"

// Path is a rule's "jsonpath::" path, relative to a VM's spec.template.
type Path struct {
	expr  string          // as written, without the prefix and a leading $
	nodes []jsonpath.Node // parsed, for the type walk
}

// ParsePath parses "jsonpath::EXPR" (EXPR in kubectl's JSONPath syntax
// without the braces, e.g. .spec.domain.devices.disks[*].disk.bus).
func ParsePath(s string) (*Path, error) {
	if !strings.HasPrefix(s, pathPrefix) {
		return nil, fmt.Errorf("%q does not start with %q", s, pathPrefix)
	}
	expr := strings.TrimPrefix(strings.TrimPrefix(s, pathPrefix), "$")
	if expr == "" {
		return nil, fmt.Errorf("%q names nothing", s)
	}
	p, err := jsonpath.Parse(expr, "{"+expr+"}")
	if err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	return &Path{expr: expr, nodes: p.Root.Nodes}, nil
}

// String is the path as a refusal names it: the expression as written.
func (p *Path) String() string { return p.expr }

var errUnset = errors.New("unset")

// find returns the values p finds in t. A value that is a nil pointer,
// map or slice is no value; if that is all p finds, the field is unset
// (errUnset). A JSONPath that finds nothing is an error.
func (p *Path) find(t *v1.VirtualMachineInstanceTemplateSpec) (vals []reflect.Value, err error) {
	// jsonpath walks the values with reflect, and the path is user
	// input: whatever goes wrong in it is this path's error, never the
	// server's panic.
	defer func() {
		if r := recover(); r != nil {
			vals, err = nil, fmt.Errorf("evaluating %s: %v", p.expr, r)
		}
	}()
	j := jsonpath.New(p.expr)
	if err := j.Parse("{" + p.expr + "}"); err != nil {
		return nil, err
	}
	res, err := j.FindResults(t)
	if err != nil {
		return nil, err
	}
	unset := 0
	for _, r := range res {
		for _, v := range r {
			if isNil(v) {
				unset++
				continue
			}
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 && unset > 0 {
		return nil, errUnset
	}
	return vals, nil
}

func isNil(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice:
		return v.IsNil()
	}
	return !v.IsValid()
}

// values returns what a rule checks at p: the values found, else, when
// p names a field of the template that is unset here, that field's zero
// value (upstream's zero-valued reference VM). A path that names no
// field, or one that finds nothing (an empty list), is an error.
func (p *Path) values(t *v1.VirtualMachineInstanceTemplateSpec) ([]reflect.Value, error) {
	vals, err := p.find(t)
	if err == nil {
		if len(vals) == 0 {
			return nil, errors.New("no values were found")
		}
		return vals, nil
	}
	leaf, ok := typeAt(reflect.TypeFor[v1.VirtualMachineInstanceTemplateSpec](), p.nodes)
	if !ok {
		return nil, fmt.Errorf("%s names no field of a VirtualMachine's spec.template", p.expr)
	}
	return []reflect.Value{reflect.Zero(leaf)}, nil
}

// typeAt walks a parsed path through the Go type of the template by the
// fields' JSON names: whether the path names a field, and its type.
// Fields, indexes, filters and wildcards over lists and maps are followed;
// a recursive descent or union names no one type and is refused.
func typeAt(t reflect.Type, nodes []jsonpath.Node) (reflect.Type, bool) {
	for _, n := range nodes {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch n := n.(type) {
		case *jsonpath.ListNode:
			var ok bool
			if t, ok = typeAt(t, n.Nodes); !ok {
				return nil, false
			}
		case *jsonpath.FieldNode:
			switch t.Kind() {
			case reflect.Struct:
				f, ok := jsonField(t, n.Value)
				if !ok {
					return nil, false
				}
				t = f
			case reflect.Map:
				t = t.Elem()
			default:
				return nil, false
			}
		case *jsonpath.ArrayNode, *jsonpath.FilterNode, *jsonpath.WildcardNode:
			if k := t.Kind(); k != reflect.Slice && k != reflect.Array && (k != reflect.Map || n.Type() != jsonpath.NodeWildcard) {
				return nil, false
			}
			t = t.Elem()
		default:
			return nil, false
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t, true
}

// jsonField finds the field of struct t whose JSON name is name, looking
// into inlined structs as encoding/json does.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	if name == "" {
		return nil, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		switch {
		case tag == name:
			return f.Type, true
		case tag == "" && f.Anonymous:
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if r, ok := jsonField(ft, name); ok {
					return r, true
				}
			}
		}
	}
	return nil, false
}
