package virtapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// TestExpandSpecEnvtest: expand-vm-spec (a VM in the body) and a stored
// VM's expand-spec, against a real kube-apiserver holding the types.
func TestExpandSpecEnvtest(t *testing.T) {
	_, c := apiserver.Start(t)
	s := &Server{Client: c, Log: logr.Discard()}
	ctx := context.Background()
	ns := "default"

	itSpec := v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: 2}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse("1Gi")}}
	require.NoError(t, c.Create(ctx, &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: "x1.small"}, Spec: itSpec}))
	require.NoError(t, c.Create(ctx, &v1beta1.VirtualMachineClusterPreference{ObjectMeta: metav1.ObjectMeta{Name: "sata"},
		Spec: v1beta1.VirtualMachinePreferenceSpec{Devices: &v1beta1.DevicePreferences{PreferredDiskBus: v1.DiskBusSATA}}}))

	vmWith := func(name string) *v1.VirtualMachine {
		return &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: v1.VirtualMachineSpec{
			RunStrategy:  ptr.To(v1.RunStrategyHalted),
			Instancetype: &v1.InstancetypeMatcher{Name: "x1.small"},
			Preference:   &v1.PreferenceMatcher{Name: "sata"},
			Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}}}}},
		}}
	}
	put := func(vm *v1.VirtualMachine) *httptest.ResponseRecorder {
		b, err := json.Marshal(vm)
		require.NoError(t, err)
		r := httptest.NewRequest(http.MethodPut, "/", bytes.NewReader(b))
		r.SetPathValue("namespace", ns)
		w := httptest.NewRecorder()
		s.expandVMSpec(w, r, userInfo{})
		return w
	}
	decode := func(w *httptest.ResponseRecorder) *v1.VirtualMachine {
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		out := &v1.VirtualMachine{}
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), out))
		return out
	}

	out := decode(put(vmWith("body")))
	assert.Nil(t, out.Spec.Instancetype, "the matchers are gone from the expanded VM")
	assert.Nil(t, out.Spec.Preference)
	d := out.Spec.Template.Spec.Domain
	assert.Equal(t, &v1.CPU{Sockets: 1, Cores: 2, Threads: 1}, d.CPU)
	assert.Equal(t, "1Gi", d.Memory.Guest.String())
	assert.Equal(t, v1.DiskBusSATA, d.Devices.Disks[0].Disk.Bus)

	bad := vmWith("conflict")
	bad.Spec.Template.Spec.Domain.CPU = &v1.CPU{Sockets: 1}
	w := put(bad)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), "VM field spec.template.spec.domain.cpu.sockets conflicts with selected instance type")

	missing := vmWith("missing")
	missing.Spec.Instancetype.Name = "nope"
	w = put(missing)
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), `failure to find VirtualMachineClusterInstancetype \"nope\"`)

	other := vmWith("ns")
	other.Namespace = "kube-system"
	assert.Equal(t, http.StatusBadRequest, put(other).Code)

	// A stored VM expands from the revision it captured, not the type as
	// it is now.
	captured := itSpec.DeepCopy()
	captured.CPU.Guest = 4
	raw, err := json.Marshal(map[string]any{"apiVersion": v1beta1.GroupVersion.String(), "kind": v1beta1.KindClusterInstancetype, "metadata": map[string]any{"name": "x1.small"}, "spec": captured})
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "stored-rev", Namespace: ns}, Data: runtime.RawExtension{Raw: raw}}))
	stored := vmWith("stored")
	stored.Spec.Instancetype.RevisionName = "stored-rev"
	require.NoError(t, c.Create(ctx, stored))
	get := func(name string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.SetPathValue("namespace", ns)
		r.SetPathValue("name", name)
		w := httptest.NewRecorder()
		s.expandSpec(w, r, userInfo{})
		return w
	}
	out = decode(get("stored"))
	assert.Equal(t, uint32(4), out.Spec.Template.Spec.Domain.CPU.Cores)
	assert.Equal(t, http.StatusNotFound, get("absent").Code)
}
