package templatevalidator

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Finding is a rule a VM does not satisfy.
type Finding struct {
	Rule    string // the rule's name
	Path    string // the rule's path, as written after "jsonpath::"
	Message string // the rule's message
	Detail  string // what was found, or why the rule could not be applied
}

// String is the finding as upstream words it: "<message>: <detail>".
func (f Finding) String() string { return f.Message + ": " + f.Detail }

// Result is what the rules say of a VM: Violations refuse it, Warnings
// (justWarning rules) are returned with its admission.
type Result struct {
	Violations []Finding
	Warnings   []Finding
}

// Evaluate applies every rule to the VM's spec.template with the VMI's
// defaults (Defaulted), in order. A rule whose valid path finds no value
// is skipped. A rule that cannot be applied is a violation, even a
// justWarning one.
func Evaluate(rules []Rule, vm *v1.VirtualMachine) (Result, error) {
	var res Result
	if len(rules) == 0 {
		return res, nil
	}
	t, err := Defaulted(vm)
	if err != nil {
		return res, err
	}
	for i := range rules {
		r := &rules[i]
		if r.Valid != nil {
			if vals, err := r.Valid.find(t); err != nil || len(vals) == 0 {
				continue
			}
		}
		detail, err := r.check(t)
		switch {
		case err != nil:
			res.Violations = append(res.Violations, r.finding(err.Error()))
		case detail == "":
		case r.JustWarning:
			res.Warnings = append(res.Warnings, r.finding(detail))
		default:
			res.Violations = append(res.Violations, r.finding(detail))
		}
	}
	return res, nil
}

func (r *Rule) finding(detail string) Finding {
	return Finding{Rule: r.Name, Path: r.Path.String(), Message: r.Message, Detail: detail}
}

// check applies the rule: "" when satisfied, else what is wrong with
// each value that fails it.
func (r *Rule) check(t *v1.VirtualMachineInstanceTemplateSpec) (string, error) {
	vals, err := r.Path.values(t)
	if err != nil {
		return "", err
	}
	var bad []string
	switch r.Kind {
	case Integer:
		lo, hi, err := bounds(r.Min, r.Max, "min", "max", t)
		if err != nil {
			return "", err
		}
		for _, v := range vals {
			n, err := asInt(v)
			if err != nil {
				return "", err
			}
			if lo != nil && n < *lo {
				bad = append(bad, fmt.Sprintf("value %d is lower than minimum [%d]", n, *lo))
			}
			if hi != nil && n > *hi {
				bad = append(bad, fmt.Sprintf("value %d is higher than maximum [%d]", n, *hi))
			}
		}
	case String:
		lo, hi, err := bounds(r.MinLength, r.MaxLength, "minLength", "maxLength", t)
		if err != nil {
			return "", err
		}
		for _, v := range vals {
			s, err := asString(v)
			if err != nil {
				return "", err
			}
			n := int64(utf8.RuneCountInString(s))
			if lo != nil && n < *lo {
				bad = append(bad, fmt.Sprintf("length %d of %q is lower than minimum [%d]", n, s, *lo))
			}
			if hi != nil && n > *hi {
				bad = append(bad, fmt.Sprintf("length %d of %q is higher than maximum [%d]", n, s, *hi))
			}
		}
	case Enum:
		allowed := make([]string, 0, len(r.Values))
		for _, sp := range r.Values {
			s := sp.Str
			if sp.Path != nil {
				if s, err = oneString(sp.Path, t); err != nil {
					return "", fmt.Errorf("values: %w", err)
				}
			}
			allowed = append(allowed, s)
		}
		for _, v := range vals {
			s, err := asString(v)
			if err != nil {
				return "", err
			}
			if !slices.Contains(allowed, s) {
				bad = append(bad, fmt.Sprintf("value %q is not one of [%s]", s, strings.Join(allowed, ", ")))
			}
		}
	case Regex:
		for _, v := range vals {
			s, err := asString(v)
			if err != nil {
				return "", err
			}
			if !r.Regex.MatchString(s) {
				bad = append(bad, fmt.Sprintf("value %q does not match %s", s, r.Regex))
			}
		}
	}
	return strings.Join(bad, ", "), nil
}

// bounds resolves a rule's lower and upper bound (nil: none).
func bounds(lo, hi *IntOrPath, loKey, hiKey string, t *v1.VirtualMachineInstanceTemplateSpec) (*int64, *int64, error) {
	l, err := bound(lo, loKey, t)
	if err != nil {
		return nil, nil, err
	}
	h, err := bound(hi, hiKey, t)
	return l, h, err
}

func bound(b *IntOrPath, key string, t *v1.VirtualMachineInstanceTemplateSpec) (*int64, error) {
	if b == nil {
		return nil, nil
	}
	if b.Path == nil {
		return &b.Int, nil
	}
	vals, err := b.Path.values(t)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if len(vals) != 1 {
		return nil, fmt.Errorf("%s: %s finds %d values, not one", key, b.Path, len(vals))
	}
	n, err := asInt(vals[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return &n, nil
}

func oneString(p *Path, t *v1.VirtualMachineInstanceTemplateSpec) (string, error) {
	vals, err := p.values(t)
	if err != nil {
		return "", err
	}
	if len(vals) != 1 {
		return "", fmt.Errorf("%s finds %d values, not one", p, len(vals))
	}
	return asString(vals[0])
}

var quantityType = reflect.TypeFor[resource.Quantity]()

// deref follows pointers and interfaces; a nil one is its type's zero.
func deref(v reflect.Value) reflect.Value {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			if v.Kind() == reflect.Interface {
				return reflect.Value{}
			}
			return reflect.Zero(v.Type().Elem())
		}
		v = v.Elem()
	}
	return v
}

// asInt reads an integer: a number, or a quantity (memory in bytes), also
// from a string field holding one (hugepages.pageSize).
func asInt(v reflect.Value) (int64, error) {
	v = deref(v)
	if v.IsValid() && v.Type() == quantityType {
		q := v.Interface().(resource.Quantity)
		return quantityInt(&q)
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if v.Uint() > math.MaxInt64 {
			return 0, fmt.Errorf("value %d is out of range", v.Uint())
		}
		return int64(v.Uint()), nil
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if f != math.Trunc(f) || math.Abs(f) > math.MaxInt64 {
			return 0, fmt.Errorf("value %v is not an integer", f)
		}
		return int64(f), nil
	case reflect.String:
		q, err := resource.ParseQuantity(v.String())
		if err != nil {
			return 0, fmt.Errorf("value %q is not an integer or a quantity", v.String())
		}
		return quantityInt(&q)
	}
	return 0, fmt.Errorf("a %s is not an integer or a quantity", typeName(v))
}

func quantityInt(q *resource.Quantity) (int64, error) {
	n, ok := q.AsInt64()
	if !ok {
		return 0, fmt.Errorf("quantity %s is not a whole number", q)
	}
	return n, nil
}

// asString reads a string: a string, a quantity as written, a number or
// a boolean as Go prints it.
func asString(v reflect.Value) (string, error) {
	v = deref(v)
	if v.IsValid() && v.Type() == quantityType {
		q := v.Interface().(resource.Quantity)
		return q.String(), nil
	}
	switch v.Kind() {
	case reflect.String:
		return v.String(), nil
	case reflect.Bool:
		return strconv.FormatBool(v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(v.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64), nil
	}
	return "", fmt.Errorf("a %s is not a string", typeName(v))
}

// typeName names what a path found that is no value: an object, a list.
func typeName(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Struct, reflect.Map:
		return "JSON object"
	case reflect.Slice, reflect.Array:
		return "JSON list"
	case reflect.Invalid:
		return "null"
	}
	return v.Type().String()
}
