// Package fields walks the spec types of the kubevirt.io objects virt-api
// admits (VirtualMachineInstance, VirtualMachine, migration) field by
// field, and lists what kubevmm does with each (fields.go). Two tests read
// it: virtapi's, that every field not listed is refused by name
// (virtapi/fields_test.go), and this package's, that every listed field is
// admitted and acts: it changes the launcher pod, the VMM's configuration,
// the QEMU command line, the cloud-init disk or the webhook's patch, or a
// named test checks what it does (implemented_test.go).
package fields

import (
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

var (
	v1PkgPath     = reflect.TypeOf(v1.VirtualMachineInstanceSpec{}).PkgPath()
	unmodeledType = reflect.TypeOf(v1.Unmodeled{})
	quantityType  = reflect.TypeOf(resource.Quantity{})
)

// unions are the types of which a spec sets exactly one field (a volume's
// source, an interface's binding, ...). Setting a field below one of them
// clears the others first: the base object has chosen one already, and a
// second would be refused for the pair, not for the field.
var unions = map[reflect.Type]bool{
	reflect.TypeOf(v1.VolumeSource{}):           true,
	reflect.TypeOf(v1.NetworkSource{}):          true,
	reflect.TypeOf(v1.InterfaceBindingMethod{}): true,
	reflect.TypeOf(v1.DiskDevice{}):             true,
	reflect.TypeOf(v1.Bootloader{}):             true,
}

// Leaf is one settable field of a spec: its JSON path and how to reach it
// (field indexes; -1 steps into a slice's first element).
type Leaf struct {
	Path  string
	Steps []int
	Type  reflect.Type
	// Presence: a pointer to a struct of fields, set to {} (an empty
	// switch such as tpm: {} or hyperv: {} says something by being
	// there; its fields are leaves of their own).
	Presence bool
}

// Leaves lists the fields under t (a struct type), paths relative to it,
// except those under the paths in skip: fields of basic kinds, maps,
// quantities, unmodeled fields, empty structs (switches like masquerade:
// {}), types from other packages (pod fields copied as they are), and
// every pointer to a struct of this package, as a presence leaf.
func Leaves(t reflect.Type, skip ...string) []Leaf {
	var out []Leaf
	leaves(t, "", nil, &out)
	kept := out[:0]
	for _, l := range out {
		if !under(l.Path, skip) {
			kept = append(kept, l)
		}
	}
	return kept
}

// under reports whether path is one of dirs or below one.
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if path == d || strings.HasPrefix(path, d+".") || strings.HasPrefix(path, d+"[") {
			return true
		}
	}
	return false
}

func leaves(t reflect.Type, path string, steps []int, out *[]Leaf) {
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	switch {
	case base.Kind() == reflect.Slice:
		leaves(base.Elem(), path+"[0]", append(steps[:len(steps):len(steps)], -1), out)
		return
	case base.Kind() != reflect.Struct, base == unmodeledType, base.PkgPath() != v1PkgPath, base.NumField() == 0:
		*out = append(*out, Leaf{Path: path, Steps: steps, Type: t})
		return
	}
	if t.Kind() == reflect.Pointer && path != "" {
		*out = append(*out, Leaf{Path: path, Steps: steps, Type: t, Presence: true})
	}
	for i := 0; i < base.NumField(); i++ {
		f := base.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		p := path
		if name != "" {
			p = strings.TrimPrefix(path+"."+name, ".")
		}
		leaves(f.Type, p, append(steps[:len(steps):len(steps)], i), out)
	}
}

// Values are what the walk sets the leaf to: something other than the
// zero value; both values of a *bool; {} for a presence leaf.
func (l Leaf) Values() []reflect.Value {
	if l.Presence {
		return []reflect.Value{reflect.New(l.Type.Elem())}
	}
	return values(l.Type)
}

func values(t reflect.Type) []reflect.Value {
	if t.Kind() == reflect.Pointer {
		var out []reflect.Value
		for _, v := range values(t.Elem()) {
			p := reflect.New(t.Elem())
			p.Elem().Set(v)
			out = append(out, p)
		}
		if t.Elem().Kind() == reflect.Bool {
			out = append(out, reflect.New(t.Elem())) // false
		}
		return out
	}
	v := reflect.New(t).Elem()
	switch {
	case t == unmodeledType:
		v.Set(reflect.ValueOf(v1.Unmodeled{Raw: []byte("{}")}))
	case t == quantityType:
		v.Set(reflect.ValueOf(resource.MustParse("1Gi")))
	case t.Kind() == reflect.Bool:
		v.SetBool(true)
	case t.Kind() == reflect.String:
		v.SetString("x")
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		v.SetInt(2)
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		v.SetUint(2)
	case t.Kind() == reflect.Map:
		v.Set(reflect.MakeMap(t))
		v.SetMapIndex(values(t.Key())[0], values(t.Elem())[0])
	case t.Kind() == reflect.Struct:
		// A present (pointer to, or element of) struct from another
		// package, or an empty switch: its zero value is the setting.
	default:
		return nil
	}
	return []reflect.Value{v}
}

// Set walks obj (a pointer to the struct Leaves walked) along the leaf's
// steps, allocating pointers and first slice elements and clearing the
// other fields of unions on the way, and sets the leaf to val.
func (l Leaf) Set(obj any, val reflect.Value) {
	v := reflect.ValueOf(obj).Elem()
	for _, st := range l.Steps {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		switch {
		case st < 0:
			if v.Len() == 0 {
				v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
			}
			v = v.Index(0)
		case unions[v.Type()]:
			keep := v.Field(st)
			kept := reflect.New(keep.Type()).Elem()
			kept.Set(keep)
			v.SetZero()
			v.Field(st).Set(kept)
			v = v.Field(st)
		default:
			v = v.Field(st)
		}
	}
	v.Set(val)
}

// Get is the leaf's value in obj (a pointer to the struct Leaves walked),
// or the invalid Value when a pointer or slice on the way is empty.
func (l Leaf) Get(obj any) reflect.Value {
	v := reflect.ValueOf(obj).Elem()
	for _, st := range l.Steps {
		for v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		if st < 0 {
			if v.Len() == 0 {
				return reflect.Value{}
			}
			v = v.Index(0)
		} else {
			v = v.Field(st)
		}
	}
	return v
}
