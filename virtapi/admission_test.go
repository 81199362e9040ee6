package virtapi

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	"github.com/kubevmm/kubevmm/api/clusterconfig"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
)

// review posts an AdmissionReview for obj to the server's path, as the
// API server does, and returns the response. The HotplugVolumes gate is on:
// these check specs (the gate itself: hotplug_gate_test.go).
func review(t *testing.T, path string, op admissionv1.Operation, obj []byte) *admissionv1.AdmissionResponse {
	t.Helper()
	scheme, err := kvscheme.New()
	require.NoError(t, err)
	gates := func() (clusterconfig.ClusterConfig, error) {
		return clusterconfig.ClusterConfig{DeveloperConfiguration: clusterconfig.DeveloperConfiguration{
			FeatureGates: []string{clusterconfig.FeatureGateHotplugVolumes}}}, nil
	}
	// An empty cluster: a dataVolumeTemplate's sourceRef names a missing
	// DataSource, which the clone authorization admits.
	// Who calls is not what these check (TestWebhooksAnswerOnlyTheAPIServer).
	srv := httptest.NewServer((&Server{Client: fake.NewClientBuilder().WithScheme(scheme).Build(), Config: gates, Callers: anyCaller{}}).Handler())
	defer srv.Close()
	ar := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  &admissionv1.AdmissionRequest{UID: "u1", Operation: op, Object: runtime.RawExtension{Raw: obj}},
	}
	b, _ := json.Marshal(ar)
	resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Response == nil || out.Response.UID != "u1" {
		t.Fatalf("response %+v does not answer the request", out.Response)
	}
	return out.Response
}

func testdata(t *testing.T, name string) []byte {
	b, err := os.ReadFile(filepath.Join("..", "test", "e2e", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestValidateVM(t *testing.T) {
	if r := review(t, PathValidateVM, admissionv1.Create, testdata(t, "vm.yaml")); !r.Allowed {
		t.Fatalf("the e2e VM is refused: %s", r.Result.Message)
	}
	r := review(t, PathValidateVM, admissionv1.Create, testdata(t, "vm-unsupported.yaml"))
	want := `spec.template.spec.domain.devices.disks[0].disk.bus: "scsi" is not supported by kubevmm`
	if r.Allowed || !strings.Contains(r.Result.Message, want) {
		t.Fatalf("SCSI disk: allowed=%v %q, want a refusal naming the field", r.Allowed, r.Result.Message)
	}

	// An unmodeled KubeVirt field, and what only QEMU serves (accepted).
	vm := &v1.VirtualMachine{}
	json.Unmarshal(testdata(t, "vm.yaml"), vm)
	vm.Spec.Template.Spec.Domain.Devices.GPUs = []v1.Unmodeled{{Raw: []byte(`{"name":"gpu1"}`)}}
	b, _ := json.Marshal(vm)
	if r := review(t, PathValidateVM, admissionv1.Create, b); r.Allowed || !strings.Contains(r.Result.Message, "spec.template.spec.domain.devices.gpus[0]: is not supported") {
		t.Fatalf("GPU: allowed=%v %q", r.Allowed, r.Result.Message)
	}
	vm.Spec.Template.Spec.Domain.Devices.GPUs = nil
	vm.Spec.Template.Spec.Domain.Features = &v1.Features{Hyperv: &v1.FeatureHyperv{}}
	b, _ = json.Marshal(vm)
	if r := review(t, PathValidateVM, admissionv1.Create, b); !r.Allowed {
		t.Fatalf("Hyper-V (QEMU backend) refused: %s", r.Result.Message)
	}
	vm.Spec.Template.ObjectMeta.Annotations = map[string]string{"kubevmm.io/backend": "kubevmm"}
	b, _ = json.Marshal(vm)
	if r := review(t, PathValidateVM, admissionv1.Create, b); r.Allowed || !strings.Contains(r.Result.Message, "metadata.annotations") {
		t.Fatalf("Hyper-V forced onto the kubevmm VMM: allowed=%v %q", r.Allowed, r.Result.Message)
	}
}

// TestValidateWindowsStyleVMI: the e2e's Windows-shaped VMI (SATA, e1000,
// Hyper-V) is admitted (the QEMU backend serves it), and a QEMU
// accelerator that does not exist is refused, naming the annotation.
func TestValidateWindowsStyleVMI(t *testing.T) {
	b := testdata(t, "vmi-windows.yaml")
	if r := review(t, PathValidateVMI, admissionv1.Create, b); !r.Allowed {
		t.Fatalf("the Windows-style VMI is refused: %s", r.Result.Message)
	}
	vmi := &v1.VirtualMachineInstance{}
	json.Unmarshal(b, vmi)
	vmi.Annotations = map[string]string{"kubevmm.io/qemu-accel": "fast"}
	b, _ = json.Marshal(vmi)
	if r := review(t, PathValidateVMI, admissionv1.Create, b); r.Allowed || !strings.Contains(r.Result.Message, "kubevmm.io/qemu-accel") {
		t.Fatalf("accelerator \"fast\": allowed=%v %q", r.Allowed, r.Result.Message)
	}
}

func TestMutateVMI(t *testing.T) {
	vm := &v1.VirtualMachine{}
	json.Unmarshal(testdata(t, "vm.yaml"), vm)
	vmi := &v1.VirtualMachineInstance{TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: vm.Spec.Template.Spec}
	orig, _ := json.Marshal(vmi)
	r := review(t, PathMutateVMI, admissionv1.Create, orig)
	if !r.Allowed || r.PatchType == nil {
		t.Fatalf("no patch: %+v", r)
	}
	p, err := jsonpatch.DecodePatch(r.Patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(orig)
	if err != nil {
		t.Fatalf("the patch does not apply: %v", err)
	}
	got := &v1.VirtualMachineInstance{}
	json.Unmarshal(out, got)
	if got.Spec.Domain.Machine == nil || got.Spec.Domain.Machine.Type != "q35" {
		t.Errorf("machine %+v, want q35", got.Spec.Domain.Machine)
	}
	if len(got.Spec.Domain.Devices.Interfaces) != 1 || got.Spec.Domain.Devices.Interfaces[0].Masquerade == nil ||
		len(got.Spec.Networks) != 1 || got.Spec.Networks[0].Pod == nil {
		t.Errorf("interfaces %+v networks %+v, want one masquerade NIC on the pod network", got.Spec.Domain.Devices.Interfaces, got.Spec.Networks)
	}
	if got.Status.Phase != v1.Pending {
		t.Errorf("phase %q, want Pending", got.Status.Phase)
	}
	// Defaults applied once are not applied again.
	if r := review(t, PathMutateVMI, admissionv1.Create, out); r.PatchType != nil {
		t.Errorf("second pass patches again: %s", r.Patch)
	}
}

// TestValidateCauses: a refusal carries one status cause per field, typed
// and with the field's full path as KubeVirt's webhooks return them: under
// spec.template.spec for a VM.
func TestValidateCauses(t *testing.T) {
	vm := &v1.VirtualMachine{}
	require.NoError(t, json.Unmarshal(testdata(t, "vm.yaml"), vm))
	s := &vm.Spec.Template.Spec
	s.Domain.Devices.Disks = []v1.Disk{{Name: "d", Cache: "none"}}
	s.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "disk:1"}}}}
	s.Domain.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	b, err := json.Marshal(vm)
	require.NoError(t, err)

	r := review(t, PathValidateVM, admissionv1.Create, b)
	require.False(t, r.Allowed)
	assert.Equal(t, int32(http.StatusUnprocessableEntity), r.Result.Code)
	assert.Equal(t, metav1.StatusReasonInvalid, r.Result.Reason)
	require.NotNil(t, r.Result.Details)
	want := []metav1.StatusCause{{
		Type:    metav1.CauseTypeFieldValueInvalid,
		Field:   "spec.template.spec.domain.resources.requests.memory",
		Message: `spec.template.spec.domain.resources.requests.memory: Invalid value: "128Mi": must not exceed limits.memory (64Mi)`,
	}, {
		Type:    metav1.CauseTypeFieldValueNotSupported,
		Field:   "spec.template.spec.domain.devices.disks[0].cache",
		Message: "spec.template.spec.domain.devices.disks[0].cache: is not supported by kubevmm",
	}}
	assert.Equal(t, want, r.Result.Details.Causes)
	assert.Equal(t, want[0].Message+", "+want[1].Message, r.Result.Message)

	// The same spec as a VMI: the paths start at spec.
	vmi := &v1.VirtualMachineInstance{TypeMeta: metav1.TypeMeta{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: *s}
	b, err = json.Marshal(vmi)
	require.NoError(t, err)
	r = review(t, PathValidateVMI, admissionv1.Create, b)
	require.False(t, r.Allowed)
	require.Len(t, r.Result.Details.Causes, 2)
	assert.Equal(t, "spec.domain.devices.disks[0].cache", r.Result.Details.Causes[1].Field)
}

// TestKubeVirtExamplesAdmitted: KubeVirt's examples with cloudInitNoCloud
// that kubevmm runs (their images swapped for the dev cluster's; the e2e
// dry-runs the same files) pass both webhooks, as the API server chains
// them: mutation, then validation of the mutated object. vm-cirros-sata
// lists no disks: each volume gets its default virtio disk, as KubeVirt
// gives it.
func TestKubeVirtExamplesAdmitted(t *testing.T) {
	for _, tc := range []struct{ file, mutate, validate string }{
		{"kubevirt-vm-cirros.yaml", PathMutateVM, PathValidateVM},
		{"kubevirt-vm-cirros-sata.yaml", PathMutateVM, PathValidateVM},
		{"kubevirt-vm-priorityclass.yaml", PathMutateVM, PathValidateVM},
		{"kubevirt-vmi-fedora.yaml", PathMutateVMI, PathValidateVMI},
		{"kubevirt-vm-alpine-datavolume.yaml", PathMutateVM, PathValidateVM},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in := testdata(t, tc.file)
			r := review(t, tc.mutate, admissionv1.Create, in)
			require.True(t, r.Allowed, "mutation: %+v", r.Result)
			out := in
			if r.PatchType != nil {
				p, err := jsonpatch.DecodePatch(r.Patch)
				require.NoError(t, err)
				out, err = p.Apply(in)
				require.NoError(t, err)
			}
			r = review(t, tc.validate, admissionv1.Create, out)
			require.True(t, r.Allowed, "validation of the mutated object: %+v", r.Result)

			if tc.file != "kubevirt-vm-cirros-sata.yaml" {
				return
			}
			vm := &v1.VirtualMachine{}
			require.NoError(t, json.Unmarshal(out, vm))
			assert.Equal(t, []v1.Disk{
				{Name: "containerdisk", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
				{Name: "cloudinitdisk", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}},
			}, vm.Spec.Template.Spec.Domain.Devices.Disks)
		})
	}
}

// anyCaller takes every caller for the API server.
type anyCaller struct{}

func (anyCaller) APIServer(*http.Request) error { return nil }

// TestWebhooksAnswerOnlyTheAPIServer: every admission route refuses a
// review without the API server's certificate, unread.
func TestWebhooksAnswerOnlyTheAPIServer(t *testing.T) {
	srv := httptest.NewServer((&Server{Callers: &frontproxy.Authenticator{CAs: x509.NewCertPool()}}).Handler())
	defer srv.Close()
	for _, path := range []string{PathMutateVMI, PathMutateVM, PathValidateVMI, PathValidateVM, PathValidateVMIM} {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{"request":{"uid":"u1"}}`))
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
	}
}
