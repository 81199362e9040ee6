// Package templatevalidator evaluates the validation rules of KubeVirt's
// common templates against a VirtualMachine, as SSP's
// virt-template-validator does: the rules come from the VM's annotation
// vm.kubevirt.io/validations, else from the template its labels name
// (see TemplateRules), and each checks the values a JSONPath finds in the
// VM's spec.template, with the defaults the VMI will get applied.
//
// A rule (a JSON object in the annotation's array):
//
//	name         unique among the rules
//	rule         integer | string | enum | regex
//	path         "jsonpath::.spec.domain.memory.guest": relative to spec.template
//	message      what a refusal says
//	valid        optional path: the rule applies only when it finds a value
//	justWarning  optional: a violation is a warning, the VM is admitted
//	min, max             integer: bounds, a number or a "jsonpath::" path
//	minLength, maxLength string: bounds of each value's length (characters)
//	values               enum: the allowed strings (each may be a path)
//	regex                regex: each value must match (Go RE2 syntax)
//
// Every value the path finds must satisfy the rule. Quantities compare as
// integers (memory in bytes). A path naming a field the VM leaves unset
// finds the field's zero value (0, ""), as upstream's zero-valued
// reference VM gives it; a path that finds nothing else fails the rule.
// A rule that can't be applied (a path naming no field, a value of the
// wrong type) refuses the VM even if it only warns: upstream's policy, so
// a broken rule never goes unnoticed.
package templatevalidator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Annotations and labels the validator reads.
const (
	// AnnotationValidations holds a VM's rules (on a template's
	// VirtualMachine object, copied to the VMs processed from it).
	AnnotationValidations = "vm.kubevirt.io/validations"
	// AnnotationSkipValidations present (whatever its value) skips validation.
	AnnotationSkipValidations = "vm.kubevirt.io/skip-validations"
	// LabelTemplate and LabelTemplateNamespace name the template a VM was
	// processed from.
	LabelTemplate          = "vm.kubevirt.io/template"
	LabelTemplateNamespace = "vm.kubevirt.io/template.namespace"
	// TemplateAnnotationValidations holds the rules on the Template itself
	// (older common templates).
	TemplateAnnotationValidations = "validations"
)

// Kind is a rule's type.
type Kind string

// The rule kinds.
const (
	Integer Kind = "integer"
	String  Kind = "string"
	Enum    Kind = "enum"
	Regex   Kind = "regex"
)

// Rule is one parsed validation rule.
type Rule struct {
	Name        string
	Kind        Kind
	Path        *Path
	Message     string
	Valid       *Path
	JustWarning bool
	// Bounds: Min/Max for integer rules, MinLength/MaxLength for string rules.
	Min, Max, MinLength, MaxLength *IntOrPath
	Values                         []StringOrPath // enum
	Regex                          *regexp.Regexp // regex
}

// IntOrPath is a bound: a number, or a path that finds exactly one value.
type IntOrPath struct {
	Int  int64
	Path *Path
}

// StringOrPath is an enum value: a string, or a path that finds exactly one.
type StringOrPath struct {
	Str  string
	Path *Path
}

// ruleJSON is a rule as written; the raw bounds are numbers or paths.
type ruleJSON struct {
	Name        string          `json:"name"`
	Rule        string          `json:"rule"`
	Path        string          `json:"path"`
	Message     string          `json:"message"`
	Valid       string          `json:"valid"`
	JustWarning bool            `json:"justWarning"`
	Min         json.RawMessage `json:"min"`
	Max         json.RawMessage `json:"max"`
	MinLength   json.RawMessage `json:"minLength"`
	MaxLength   json.RawMessage `json:"maxLength"`
	Values      []string        `json:"values"`
	Regex       *string         `json:"regex"`
}

// ParseRules parses the JSON array of rules an annotation holds (empty:
// no rules). Anything malformed is an error naming the rule and what is
// wrong: a missing name, rule, path or message, an unknown rule kind or
// key, a key the kind does not use, a duplicate name, a path without the
// "jsonpath::" prefix or that does not parse, a bound that is neither an
// integer nor a path, a regex that does not compile. Upstream fails such
// a rule when it evaluates it, refusing the VM; refusing it whole here
// says the same sooner.
func ParseRules(data string) ([]Rule, error) {
	if strings.TrimSpace(data) == "" {
		return nil, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(data), &raws); err != nil {
		return nil, fmt.Errorf("the rules are not a JSON array of rules: %w", err)
	}
	rules := make([]Rule, 0, len(raws))
	seen := map[string]bool{}
	for i, raw := range raws {
		r, err := parseRule(raw)
		if err != nil {
			if r.Name != "" {
				return nil, fmt.Errorf("rule %d (%q): %w", i, r.Name, err)
			}
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("rule %d (%q): the name is used by an earlier rule", i, r.Name)
		}
		seen[r.Name] = true
		rules = append(rules, r)
	}
	return rules, nil
}

// parseRule parses one rule; the name is set as soon as it is known so
// that errors can name the rule.
func parseRule(raw json.RawMessage) (Rule, error) {
	var j ruleJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Rule{}, err
	}
	r := Rule{Name: j.Name, Kind: Kind(j.Rule), Message: j.Message, JustWarning: j.JustWarning}
	for _, req := range []struct{ key, val string }{{"name", j.Name}, {"rule", j.Rule}, {"path", j.Path}, {"message", j.Message}} {
		if req.val == "" {
			return r, fmt.Errorf("%s is required", req.key)
		}
	}
	var err error
	if r.Path, err = ParsePath(j.Path); err != nil {
		return r, fmt.Errorf("path: %w", err)
	}
	if j.Valid != "" {
		if r.Valid, err = ParsePath(j.Valid); err != nil {
			return r, fmt.Errorf("valid: %w", err)
		}
	}
	// The keys each kind uses; any other argument would be silently
	// ignored, so it is refused.
	uses := map[Kind][]string{Integer: {"min", "max"}, String: {"minLength", "maxLength"}, Enum: {"values"}, Regex: {"regex"}}
	used, ok := uses[r.Kind]
	if !ok {
		return r, fmt.Errorf("rule %q is not one of integer, string, enum, regex", j.Rule)
	}
	given := map[string]bool{"min": j.Min != nil, "max": j.Max != nil, "minLength": j.MinLength != nil,
		"maxLength": j.MaxLength != nil, "values": j.Values != nil, "regex": j.Regex != nil}
	for _, k := range []string{"min", "max", "minLength", "maxLength", "values", "regex"} {
		if given[k] && !slices.Contains(used, k) {
			return r, fmt.Errorf("%s does not apply to rule %s (it takes %s)", k, r.Kind, strings.Join(used, ", "))
		}
	}
	for _, b := range []struct {
		key string
		raw json.RawMessage
		out **IntOrPath
	}{{"min", j.Min, &r.Min}, {"max", j.Max, &r.Max}, {"minLength", j.MinLength, &r.MinLength}, {"maxLength", j.MaxLength, &r.MaxLength}} {
		if b.raw == nil {
			continue
		}
		if *b.out, err = parseIntOrPath(b.raw); err != nil {
			return r, fmt.Errorf("%s: %w", b.key, err)
		}
	}
	switch r.Kind {
	case Enum:
		if len(j.Values) == 0 {
			return r, errors.New("an enum rule needs values")
		}
		for _, v := range j.Values {
			sp := StringOrPath{Str: v}
			if strings.HasPrefix(v, pathPrefix) {
				if sp.Path, err = ParsePath(v); err != nil {
					return r, fmt.Errorf("values: %w", err)
				}
				sp.Str = ""
			}
			r.Values = append(r.Values, sp)
		}
	case Regex:
		if j.Regex == nil {
			return r, errors.New("a regex rule needs regex")
		}
		if r.Regex, err = regexp.Compile(*j.Regex); err != nil {
			return r, fmt.Errorf("regex: %w", err)
		}
	}
	return r, nil
}

// parseIntOrPath reads a bound: an integer, or a string holding a path.
func parseIntOrPath(raw json.RawMessage) (*IntOrPath, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		p, err := ParsePath(s)
		if err != nil {
			return nil, err
		}
		return &IntOrPath{Path: p}, nil
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("%s is neither an integer nor a path", raw)
	}
	i, err := n.Int64()
	if err != nil {
		return nil, fmt.Errorf("%s is not an integer", raw)
	}
	return &IntOrPath{Int: i}, nil
}
