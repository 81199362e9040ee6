package virtapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevmm/kubevmm/api/admission"
)

// A VM's owner may not loosen the VMM's seccomp filter by annotation: a
// VMI or VM template asking "off" or "log" is refused naming the
// annotation until the cluster enables VMMSeccompOptOut; "kill" (the
// default) and no annotation pass; an update keeping the value passes.
func TestSeccompGate(t *testing.T) {
	s, set := gateFile(t)
	passed := false
	next := func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		passed = true
		return admission.Allow()
	}
	vmi := func(mode string) []byte {
		ann := map[string]string{}
		if mode != "" {
			ann["kubevmm.io/seccomp"] = mode
		}
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "v", "annotations": ann}, "spec": map[string]any{}})
		require.NoError(t, err)
		return b
	}
	vm := func(mode string) []byte {
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "v", "annotations": map[string]string{"kubevmm.io/seccomp": "off"}},
			"spec": map[string]any{"template": json.RawMessage(vmi(mode))}})
		require.NoError(t, err)
		return b
	}
	review := func(isVM bool, op admissionv1.Operation, obj, old []byte) *admissionv1.AdmissionResponse {
		passed = false
		resp := s.gateSeccomp(isVM, next)(&admissionv1.AdmissionRequest{Operation: op, Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old}})
		assert.Equal(t, resp.Allowed, passed, "passed on exactly when allowed")
		return resp
	}
	for _, mode := range []string{"off", "log"} {
		resp := review(false, admissionv1.Create, vmi(mode), nil)
		require.False(t, resp.Allowed, mode)
		assert.Contains(t, resp.Result.Message, "metadata.annotations[kubevmm.io/seccomp]: Forbidden: VMMSeccompOptOut feature gate is not enabled")
		resp = review(true, admissionv1.Create, vm(mode), nil)
		require.False(t, resp.Allowed, mode)
		assert.Contains(t, resp.Result.Message, "spec.template.metadata.annotations[kubevmm.io/seccomp]: Forbidden")
		resp = review(false, admissionv1.Update, vmi(mode), vmi("kill"))
		require.False(t, resp.Allowed, "an update that loosens it")
	}
	// The VM's own annotation is no VMI's: only the template's counts.
	assert.True(t, review(true, admissionv1.Create, vm(""), nil).Allowed)
	assert.True(t, review(false, admissionv1.Create, vmi("kill"), nil).Allowed)
	assert.True(t, review(false, admissionv1.Create, vmi(""), nil).Allowed)
	assert.True(t, review(false, admissionv1.Update, vmi("off"), vmi("off")).Allowed, "made while the gate was on")
	assert.True(t, review(false, admissionv1.Delete, nil, nil).Allowed)
	assert.False(t, review(false, admissionv1.Create, []byte(`{"metadata":3}`), nil).Allowed)

	set("VMMSeccompOptOut")
	assert.True(t, review(false, admissionv1.Create, vmi("off"), nil).Allowed)
	assert.True(t, review(true, admissionv1.Create, vm("log"), nil).Allowed)
}
