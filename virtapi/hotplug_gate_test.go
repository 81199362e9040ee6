package virtapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kubevmm/kubevmm/api/admission"
	"github.com/kubevmm/kubevmm/api/clusterconfig"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// gateFile is the ConfigMap kubevmm-config as mounted into virt-api: the
// server reads it through clusterconfig.ConfigFile, as cmd/virt-api does.
func gateFile(t *testing.T) (*Server, func(gates string)) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	set := func(gates string) {
		require.NoError(t, os.WriteFile(p, []byte("developerConfiguration:\n  featureGates: ["+gates+"]\n"), 0o600))
	}
	set("")
	f := &clusterconfig.ConfigFile{Path: p}
	return &Server{Config: f.Get}, set
}

func TestHotplugGateSubresources(t *testing.T) {
	s, set := gateFile(t)
	for _, tc := range []struct{ op, msg string }{
		{"addvolume", "Unable to Add Volume because HotplugVolumes feature gate is not enabled."},
		{"removevolume", "Unable to Remove Volume because HotplugVolumes feature gate is not enabled."},
	} {
		err := s.hotplugGate(tc.op)
		var oe *opError
		require.True(t, errors.As(err, &oe), "%s without the gate: %v", tc.op, err)
		assert.Equal(t, http.StatusBadRequest, oe.code)
		assert.Equal(t, tc.msg, oe.msg)
	}
	// Toggled on the KubeVirt CR while virt-api runs: the next request sees it.
	set("SameNodeLiveMigration, HotplugVolumes")
	assert.NoError(t, s.hotplugGate("addvolume"))
	assert.NoError(t, s.hotplugGate("removevolume"))
	set("SameNodeLiveMigration")
	assert.Error(t, s.hotplugGate("addvolume"))

	// No configuration: no gate, as in KubeVirt.
	assert.Error(t, (&Server{}).hotplugGate("addvolume"))
	// An unreadable configuration refuses rather than guesses.
	err := (&Server{Config: (&clusterconfig.ConfigFile{Path: filepath.Join(t.TempDir(), "absent")}).Get}).hotplugGate("addvolume")
	var oe *opError
	require.True(t, errors.As(err, &oe))
	assert.Equal(t, http.StatusInternalServerError, oe.code)
}

func TestHotplugGateSpecs(t *testing.T) {
	s, set := gateFile(t)
	plain := bootSpec()
	hot := bootSpec()
	require.NoError(t, specErr(hot.AddHotplugVolume(addOpts())))
	vmi := func(s *v1.VirtualMachineInstanceSpec) []byte {
		b, err := json.Marshal(&v1.VirtualMachineInstance{Spec: *s})
		require.NoError(t, err)
		return b
	}
	vm := func(s *v1.VirtualMachineInstanceSpec) []byte {
		b, err := json.Marshal(&v1.VirtualMachine{Spec: v1.VirtualMachineSpec{Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: *s}}})
		require.NoError(t, err)
		return b
	}
	passed := false
	next := func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		passed = true
		return admission.Allow()
	}
	for _, tc := range []struct {
		name     string
		isVM     bool
		op       admissionv1.Operation
		old, cur *v1.VirtualMachineInstanceSpec
		refused  string // the field refused without the gate; "" when it passes
	}{
		{name: "VMI created with a hotpluggable volume", op: admissionv1.Create, cur: hot, refused: "spec.volumes[1]"},
		{name: "VM created with a hotpluggable volume", isVM: true, op: admissionv1.Create, cur: hot, refused: "spec.template.spec.volumes[1]"},
		{name: "VMI gaining one", op: admissionv1.Update, old: plain, cur: hot, refused: "spec.volumes[1]"},
		{name: "VM gaining one", isVM: true, op: admissionv1.Update, old: plain, cur: hot, refused: "spec.template.spec.volumes[1]"},
		{name: "VMI created without", op: admissionv1.Create, cur: plain},
		{name: "VM keeping one made with the gate on", isVM: true, op: admissionv1.Update, old: hot, cur: hot},
		{name: "VMI losing one", op: admissionv1.Update, old: hot, cur: plain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := vmi
			if tc.isVM {
				enc = vm
			}
			req := &admissionv1.AdmissionRequest{Operation: tc.op, Object: runtime.RawExtension{Raw: enc(tc.cur)}}
			if tc.old != nil {
				req.OldObject = runtime.RawExtension{Raw: enc(tc.old)}
			}
			gated := s.gateHotplugSpecs(tc.isVM, next)
			set("")
			passed = false
			resp := gated(req)
			if tc.refused == "" {
				assert.True(t, resp.Allowed && passed, "without the gate: %+v", resp.Result)
			} else {
				require.False(t, resp.Allowed)
				assert.False(t, passed)
				assert.Equal(t, tc.refused+": Forbidden: HotplugVolumes feature gate is not enabled: hotpluggable volume data", resp.Result.Message)
			}
			set("HotplugVolumes")
			passed = false
			resp = gated(req)
			assert.True(t, resp.Allowed && passed, "with the gate: %+v", resp.Result)
		})
	}
}
