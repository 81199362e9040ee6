package virtapi

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/test/fields"
)

// The lists of what kubevmm does with each field are test/fields'
// (fields.Implemented, Honoured, Defaults and the VM's and migration's):
// its own test checks that what they list is admitted and acts; these
// check that everything else is refused, naming the field.

// names reports whether the error is about path or a field enclosing it.
func names(errField, path string) bool {
	return path == errField || strings.HasPrefix(path, errField+".") || strings.HasPrefix(path, errField+"[")
}

// refusedAt reports whether causes refuse path (the field or one
// enclosing it) as not supported or invalid, KubeVirt's two ways of
// saying a value cannot be had. A presence leaf ({}) is refused by any
// cause naming it, a field enclosing it or one of its own (a required
// field it lacks): its fields are decided one by one.
func refusedAt(causes []metav1.StatusCause, l fields.Leaf, prefix string) bool {
	path := prefix + l.Path
	for _, c := range causes {
		switch {
		case l.Presence && (names(c.Field, path) || names(path, c.Field)):
			return true
		case names(c.Field, path) && (c.Type == metav1.CauseType(field.ErrorTypeNotSupported) || c.Type == metav1.CauseType(field.ErrorTypeInvalid)):
			return true
		}
	}
	return false
}

func causesOf(errs field.ErrorList) []metav1.StatusCause {
	out := make([]metav1.StatusCause, len(errs))
	for i, e := range errs {
		out[i] = metav1.StatusCause{Type: metav1.CauseType(e.Type), Field: e.Field, Message: e.Error()}
	}
	return out
}

// value is x as a value of the leaf's type (a *T leaf takes a T).
func value(l fields.Leaf, x any) reflect.Value {
	t := l.Type
	if t.Kind() == reflect.Pointer {
		p := reflect.New(t.Elem())
		p.Elem().Set(reflect.ValueOf(x).Convert(t.Elem()))
		return p
	}
	return reflect.ValueOf(x).Convert(t)
}

// equal reports whether the walk's value val is the honoured value h.
func equal(val reflect.Value, h any) bool {
	v := reflect.Indirect(val)
	hv := reflect.ValueOf(h)
	return v.Kind() == hv.Kind() && v.CanConvert(hv.Type()) && v.Convert(hv.Type()).Interface() == h
}

// decide checks every leaf of one kind of spec: implemented ones are left
// to test/fields (but admit their listed value where given), honoured ones
// are admitted at their value and refused at any other, defaults are
// admitted as {}, every other leaf is refused at every value the walk
// sets it to. check sets the leaf on a fresh base and returns the
// refusal's causes (nil: admitted) and the path prefix of the spec.
func decide(t *testing.T, all []fields.Leaf, implemented map[string]bool, honoured map[string]any, defaults map[string]string,
	check func(l fields.Leaf, val reflect.Value) ([]metav1.StatusCause, string)) {
	t.Helper()
	known := map[string]fields.Leaf{}
	for _, l := range all {
		known[l.Path] = l
	}
	lists := map[string]int{}
	for p := range implemented {
		lists[p]++
	}
	for p := range honoured {
		lists[p]++
	}
	for p := range defaults {
		lists[p]++
		if l, ok := known[p]; ok && !l.Presence && l.Type != reflect.TypeOf(&v1.Unmodeled{}) {
			t.Errorf("a defaults list has %s, which is neither a presence leaf (a pointer to a struct) nor an unmodeled one", p)
		}
	}
	for p, n := range lists {
		if _, ok := known[p]; !ok {
			t.Errorf("%s is listed, but is no leaf of the spec", p)
		}
		if n > 1 {
			t.Errorf("%s is listed %d times (implemented, honoured, defaults): it is one of them", p, n)
		}
	}
	for _, l := range all {
		if implemented[l.Path] {
			continue
		}
		if why, ok := defaults[l.Path]; ok {
			if causes, prefix := check(l, l.Values()[0]); causes != nil {
				t.Errorf("%s%s: {} (%s) is refused: %v", prefix, l.Path, why, causes)
			}
			continue
		}
		h, isHonoured := honoured[l.Path]
		if isHonoured {
			if causes, prefix := check(l, value(l, h)); causes != nil {
				t.Errorf("%s%s: %v, the value that says what kubevmm does, is refused: %v", prefix, l.Path, h, causes)
			}
		}
		vals := l.Values()
		if len(vals) == 0 {
			t.Errorf("%s: the walk cannot set a %s", l.Path, l.Type)
		}
		for _, val := range vals {
			if isHonoured && equal(val, h) {
				continue
			}
			if causes, prefix := check(l, val); !refusedAt(causes, l, prefix) {
				t.Errorf("%s%s set to %v is neither refused nor listed as implemented (test/fields)", prefix, l.Path, reflect.Indirect(val))
			}
		}
	}
}

// TestEveryFieldDecided walks every leaf field of the VMI spec's Go types
// (the CRD schema is generated from them), pointers to structs as {}
// too, and sets it, alone, in an admitted VMI (a union's other members
// cleared): unless the field is implemented, honoured at that value or a
// default, the validator must refuse it, naming the field. A field added
// to the types fails here until it is implemented (and listed in
// test/fields) or refused.
func TestEveryFieldDecided(t *testing.T) {
	all := fields.Leaves(reflect.TypeOf(v1.VirtualMachineInstanceSpec{}))
	if len(all) < 100 {
		t.Fatalf("only %d leaves: the walk is broken", len(all))
	}
	implemented := map[string]bool{}
	for p := range fields.Implemented {
		implemented[p] = true
	}
	decide(t, all, implemented, fields.Honoured, fields.Defaults, func(l fields.Leaf, val reflect.Value) ([]metav1.StatusCause, string) {
		s := vmiBase(t, l.Path)
		l.Set(s, val)
		if errs := validate(s, nil); len(errs) > 0 {
			return causesOf(errs), "spec."
		}
		return nil, "spec."
	})
}

// vmiBase is an admitted VMI spec for the leaf at path: baseSpec (our
// VMM, kernelBoot), but under the EFI bootloader, where the VMI boots its
// disk on QEMU with SMM (secure boot, on by default, needs it).
func vmiBase(t *testing.T, path string) *v1.VirtualMachineInstanceSpec {
	t.Helper()
	s := baseSpec(t)
	if strings.HasPrefix(path, "domain.firmware.bootloader.efi") {
		s.Domain.Firmware = nil
		s.Domain.Features = &v1.Features{SMM: &v1.FeatureState{}}
		require.Empty(t, validate(s, nil), "the base spec for %s is refused", path)
	}
	return s
}

// vmBase is an admitted VM for the leaf at path: the e2e VM without a run
// strategy (running is the other way to say it); under instancetype, one
// that leaves sizing to its instance type; under preference, one with a
// preference; under dataVolumeTemplates, one with a disk on a template's
// DataVolume.
func vmBase(t *testing.T, path string) *v1.VirtualMachine {
	t.Helper()
	vm := &v1.VirtualMachine{}
	require.NoError(t, json.Unmarshal(testdata(t, "vm.yaml"), vm))
	switch {
	case strings.HasPrefix(path, "instancetype"):
		s := &vm.Spec.Template.Spec
		s.Domain.CPU, s.Domain.Memory, s.Domain.Resources = nil, nil, v1.ResourceRequirements{}
		vm.Spec.Instancetype = &v1.InstancetypeMatcher{Name: "small"}
	case strings.HasPrefix(path, "preference"):
		vm.Spec.Preference = &v1.PreferenceMatcher{Name: "linux"}
	case strings.HasPrefix(path, "dataVolumeTemplates"):
		vm = dvVM(t, dvSpecHTTP)
	}
	vm.Spec.RunStrategy = nil
	require.True(t, reviewVM(t, vm).Allowed, "the base VM for %s is refused", path)
	return vm
}

func reviewVM(t *testing.T, vm *v1.VirtualMachine) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, err := json.Marshal(vm)
	require.NoError(t, err)
	return validateVM(&admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "ns", Object: runtime.RawExtension{Raw: raw}})
}

func causesOfResponse(r *admissionv1.AdmissionResponse) []metav1.StatusCause {
	if r.Allowed {
		return nil
	}
	if r.Result == nil || r.Result.Details == nil || len(r.Result.Details.Causes) == 0 {
		// Refused without naming a field: no cause names the leaf.
		return []metav1.StatusCause{{Message: fmt.Sprint(r.Result)}}
	}
	return r.Result.Details.Causes
}

// vmValues are what an implemented VM leaf is set to for the check that
// it is admitted, where the walk's value would be refused.
var vmValues = map[string]any{
	"runStrategy":                     v1.RunStrategyAlways,
	"instancetype.kind":               "VirtualMachineInstancetype",
	"preference.kind":                 "VirtualMachinePreference",
	"dataVolumeTemplates[0].metadata": metav1.ObjectMeta{Name: "root", Labels: map[string]string{"x": "x"}},
	"dataVolumeTemplates[0].spec":     v1.Unmodeled{Raw: []byte(`{"source":{"blank":{}},"storage":{"resources":{"requests":{"storage":"2Gi"}}}}`)},
}

// TestEveryVMFieldDecided: the same for a VirtualMachine's spec outside
// its template (which is a VMI spec): each leaf implemented (and
// admitted), honoured at one value, or refused by validateVM.
func TestEveryVMFieldDecided(t *testing.T) {
	all := fields.Leaves(reflect.TypeOf(v1.VirtualMachineSpec{}), "template")
	implemented := map[string]bool{}
	for p := range fields.VMImplemented {
		implemented[p] = true
	}
	check := func(l fields.Leaf, val reflect.Value) ([]metav1.StatusCause, string) {
		vm := vmBase(t, l.Path)
		l.Set(&vm.Spec, val)
		return causesOfResponse(reviewVM(t, vm)), "spec."
	}
	decide(t, all, implemented, fields.VMHonoured, fields.VMDefaults, check)
	for _, l := range all {
		if !implemented[l.Path] {
			continue
		}
		val := l.Values()[0]
		if x, ok := vmValues[l.Path]; ok {
			val = value(l, x)
		}
		if causes, _ := check(l, val); causes != nil {
			t.Errorf("spec.%s: %v, implemented (%s), is refused: %v", l.Path, reflect.Indirect(val), fields.VMImplemented[l.Path].Where, causes)
		}
	}
}

// TestEveryMigrationFieldDecided: the same for a migration's spec.
func TestEveryMigrationFieldDecided(t *testing.T) {
	all := fields.Leaves(reflect.TypeOf(v1.VirtualMachineInstanceMigrationSpec{}))
	implemented := map[string]bool{}
	for p := range fields.MigrationImplemented {
		implemented[p] = true
	}
	check := func(l fields.Leaf, val reflect.Value) ([]metav1.StatusCause, string) {
		m := &v1.VirtualMachineInstanceMigration{Spec: v1.VirtualMachineInstanceMigrationSpec{VMIName: "testvm"}}
		l.Set(&m.Spec, val)
		raw, err := json.Marshal(m)
		require.NoError(t, err)
		return causesOfResponse(validateVMIM(&admissionv1.AdmissionRequest{Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}})), "spec."
	}
	decide(t, all, implemented, nil, nil, check)
	for _, l := range all {
		if implemented[l.Path] {
			if causes, _ := check(l, l.Values()[0]); causes != nil {
				t.Errorf("spec.%s, implemented (%s), is refused: %v", l.Path, fields.MigrationImplemented[l.Path].Where, causes)
			}
		}
	}
}

// TestDisableHotplugRefusesAddVolume: what domain.devices.disableHotplug
// does (fields.Implemented names this test): addvolume refuses a VMI, or
// a VM whose template, sets it, and takes the same request without it.
func TestDisableHotplugRefusesAddVolume(t *testing.T) {
	scheme, err := kvscheme.New()
	require.NoError(t, err)
	ctx := context.Background()
	for _, disable := range []bool{false, true} {
		vm := &v1.VirtualMachine{}
		require.NoError(t, json.Unmarshal(testdata(t, "vm.yaml"), vm))
		vm.Namespace = "ns"
		vm.Spec.Template.Spec.Domain.Devices.DisableHotplug = disable
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: vm.Name, Namespace: "ns"}, Spec: vm.Spec.Template.Spec}
		vmi.Status.Phase = v1.Running
		dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "ns"}}
		s := &Server{Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(vm, vmi, dv).WithStatusSubresource(vm, vmi).Build()}
		opts := addOpts()
		opts.DryRun = []string{metav1.DryRunAll}
		for what, err := range map[string]error{
			"VMI": s.addVolume(ctx, "ns", vm.Name, opts),
			"VM":  s.vmAddVolume(ctx, "ns", vm.Name, opts),
		} {
			switch {
			case disable && (err == nil || !strings.Contains(err.Error(), "disableHotplug")):
				t.Errorf("addvolume on a %s with disableHotplug: %v, want a refusal naming it", what, err)
			case !disable && err != nil:
				t.Errorf("addvolume on a %s without disableHotplug: %v", what, err)
			}
		}
	}
}
