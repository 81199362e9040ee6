package virtapi

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/admission"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// VirtualMachineInstancePresets (deprecated upstream, still served by
// KubeVirt v1.9) are applied by the VMI mutating webhook when a VMI is
// created, as upstream's: every preset of the VMI's namespace whose
// selector matches the VMI's labels, unless the VMI carries
// PresetExcludeAnnotation "true". A preset fills a setting the VMI leaves
// out (resources.requests, cpu, firmware, clock with its timer, features,
// devices.watchdog, ioThreadsPolicy) and is recorded on the VMI as
// annotation PresetAnnotationPrefix+name; a setting the VMI has already is
// kept. Two matching presets that disagree on a setting refuse the VMI,
// naming both. What the presets bring meets virt-api's validation like
// the rest of the VMI (a watchdog, which kubevmm does not emulate, is
// refused there by name).
const (
	PresetExcludeAnnotation = "virtualmachineinstancepresets.admission.kubevirt.io/exclude"
	PresetAnnotationPrefix  = "virtualmachinepreset.kubevirt.io/"
)

// listPresets reads the presets of namespace ns; none where the CRD is not
// installed.
func (s *Server) listPresets(ctx context.Context, ns string) ([]v1.VirtualMachineInstancePreset, error) {
	l := &v1.VirtualMachineInstancePresetList{}
	if err := s.Client.List(ctx, l, client.InNamespace(ns)); err != nil {
		if apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing the VirtualMachineInstancePresets of %s: %w", ns, err)
	}
	return l.Items, nil
}

// presetDomain is one preset's settings that apply, as JSON patch paths
// under the VMI's spec.domain and the values the VMI would get.
type presetDomain map[string]any

// presetSettings are the settings of d a preset applies, by patch path.
func presetSettings(d *v1.DomainSpec) presetDomain {
	out := presetDomain{}
	if d == nil {
		return out
	}
	if len(d.Resources.Requests) > 0 {
		out["/resources/requests"] = d.Resources.Requests
	}
	if d.CPU != nil {
		out["/cpu"] = d.CPU
	}
	if d.Firmware != nil {
		out["/firmware"] = d.Firmware
	}
	if c := d.Clock; c != nil {
		// Each is a setting of its own: a VMI with a clock and no timer
		// gets the preset's timer.
		if c.UTC != nil {
			out["/clock/utc"] = c.UTC
		}
		if c.Timezone != nil {
			out["/clock/timezone"] = c.Timezone
		}
		if c.Timer != nil {
			out["/clock/timer"] = c.Timer
		}
	}
	if d.Features != nil {
		out["/features"] = d.Features
	}
	if d.Devices.Watchdog != nil {
		out["/devices/watchdog"] = d.Devices.Watchdog
	}
	if d.IOThreadsPolicy != nil {
		out["/ioThreadsPolicy"] = d.IOThreadsPolicy
	}
	return out
}

// applyPresets decides which of presets apply to vmi and how it changes
// (see PresetExcludeAnnotation): the patch operations on the VMI and what
// to warn its creator of (a setting of a preset the VMI already sets
// otherwise). A preset with an invalid selector, or two that conflict, is
// an error that refuses the VMI.
func applyPresets(vmi *v1.VirtualMachineInstance, presets []v1.VirtualMachineInstancePreset) ([]admission.PatchOp, []string, error) {
	if vmi.Annotations[PresetExcludeAnnotation] == "true" {
		return nil, nil, nil
	}
	var matching []v1.VirtualMachineInstancePreset
	for _, p := range presets {
		sel, err := metav1.LabelSelectorAsSelector(&p.Spec.Selector)
		if err != nil {
			return nil, nil, fmt.Errorf("VirtualMachineInstancePreset %s: spec.selector: %w", p.Name, err)
		}
		if sel.Matches(labels.Set(vmi.Labels)) {
			matching = append(matching, p)
		}
	}
	sort.Slice(matching, func(i, j int) bool { return matching[i].Name < matching[j].Name })

	// Settings by path, with the preset that brings each: two presets
	// that bring one setting differently conflict.
	type setting struct {
		value  any
		preset string
	}
	want := map[string]setting{}
	var conflicts []string
	for _, p := range matching {
		for path, val := range presetSettings(p.Spec.Domain) {
			if s, ok := want[path]; ok && !equality.Semantic.DeepEqual(s.value, val) {
				conflicts = append(conflicts, fmt.Sprintf("presets %q and %q set spec.domain%s differently", s.preset, p.Name, strings.ReplaceAll(path, "/", ".")))
				continue
			}
			want[path] = setting{val, p.Name}
		}
	}
	if len(conflicts) > 0 {
		sort.Strings(conflicts)
		return nil, nil, fmt.Errorf("VirtualMachineInstancePresets cannot be applied due to conflicts: %s", strings.Join(conflicts, "; "))
	}

	have := presetSettings(&vmi.Spec.Domain)
	paths := make([]string, 0, len(want))
	for path := range want {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	var ops []admission.PatchOp
	var warnings []string
	applied := map[string]bool{}
	clockAdded := false
	for _, path := range paths {
		s := want[path]
		if cur, ok := have[path]; ok {
			if equality.Semantic.DeepEqual(cur, s.value) {
				applied[s.preset] = true
			} else {
				warnings = append(warnings, fmt.Sprintf("VirtualMachineInstancePreset %s: spec.domain%s is the VMI's own, not the preset's", s.preset, strings.ReplaceAll(path, "/", ".")))
			}
			continue
		}
		switch {
		case path == "/resources/requests":
			// resources is always there in the Go type, not always in
			// the object: add it whole.
			r := vmi.Spec.Domain.Resources
			r.Requests = s.value.(corev1.ResourceList)
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/spec/domain/resources", Value: r})
		case strings.HasPrefix(path, "/clock/") && vmi.Spec.Domain.Clock == nil && !clockAdded:
			// The VMI has no clock: the first of the preset's clock
			// settings makes one.
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/spec/domain/clock", Value: map[string]any{}},
				admission.PatchOp{Op: "add", Path: "/spec/domain" + path, Value: s.value})
			clockAdded = true
		default:
			ops = append(ops, admission.PatchOp{Op: "add", Path: "/spec/domain" + path, Value: s.value})
		}
		applied[s.preset] = true
	}
	names := make([]string, 0, len(applied))
	for n := range applied {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 0 && vmi.Annotations == nil {
		ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/annotations", Value: map[string]string{}})
	}
	for _, n := range names {
		key := strings.ReplaceAll(strings.ReplaceAll(PresetAnnotationPrefix+n, "~", "~0"), "/", "~1")
		ops = append(ops, admission.PatchOp{Op: "add", Path: "/metadata/annotations/" + key, Value: v1.GroupVersion.String()})
	}
	return ops, warnings, nil
}
