package virtapi

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// dvVM is the e2e VM with a disk on a DataVolume from a template.
func dvVM(t *testing.T, spec string) *v1.VirtualMachine {
	t.Helper()
	vm := &v1.VirtualMachine{}
	require.NoError(t, json.Unmarshal(testdata(t, "vm.yaml"), vm))
	vm.Namespace = "ns"
	vm.Spec.Template.Spec.Volumes = []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "root"}}}}
	vm.Spec.Template.Spec.Domain.Devices.Disks = []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}}}
	vm.Spec.DataVolumeTemplates = []v1.DataVolumeTemplateSpec{{
		ObjectMeta: metav1.ObjectMeta{Name: "root", Labels: map[string]string{"a": "b"}},
		Spec:       v1.Unmodeled{Raw: []byte(spec)},
	}}
	return vm
}

const dvSpecHTTP = `{"source":{"http":{"url":"http://images/disk.img"}},"storage":{"resources":{"requests":{"storage":"1Gi"}}}}`

func TestValidateDataVolumeTemplates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   string
		mutate func(vm *v1.VirtualMachine)
		want   string // "" : admitted
	}{
		{name: "http import", spec: dvSpecHTTP},
		{name: "blank with pvc", spec: `{"source":{"blank":{}},"pvc":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"1Gi"}}}}`},
		{name: "a standalone DataVolume volume besides", spec: dvSpecHTTP, mutate: func(vm *v1.VirtualMachine) {
			vm.Spec.Template.Spec.Volumes = append(vm.Spec.Template.Spec.Volumes, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "data"}}})
			vm.Spec.Template.Spec.Domain.Devices.Disks = append(vm.Spec.Template.Spec.Domain.Devices.Disks, v1.Disk{Name: "data", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: "virtio"}}})
		}},
		{name: "no source", spec: `{"storage":{"resources":{"requests":{"storage":"1Gi"}}}}`, want: "spec.dataVolumeTemplates[0].spec.source: Required value"},
		{name: "two sources", spec: `{"source":{"http":{"url":"http://x"},"blank":{}},"storage":{"resources":{"requests":{"storage":"1Gi"}}}}`, want: "spec.dataVolumeTemplates[0].spec.source: Invalid value"},
		{name: "clone", spec: `{"source":{"pvc":{"namespace":"ns","name":"golden"}},"storage":{"resources":{"requests":{"storage":"1Gi"}}}}`},
		{name: "clone without size", spec: `{"source":{"pvc":{"namespace":"ns","name":"golden"}},"storage":{}}`},
		{name: "clone without name", spec: `{"source":{"pvc":{"namespace":"ns"}},"storage":{}}`, want: "spec.dataVolumeTemplates[0].spec.source.pvc.name: Required value"},
		{name: "sourceRef", spec: `{"sourceRef":{"kind":"DataSource","name":"fedora"},"storage":{}}`},
		{name: "registry import", spec: `{"source":{"registry":{"url":"docker://quay.io/kubevirt/alpine-container-disk-demo:v1.9.0"}},"storage":{"resources":{"requests":{"storage":"2Gi"}}}}`},
		{name: "registry import by the node", spec: `{"source":{"registry":{"url":"docker://10.200.0.1:5000/alpine:1","pullMethod":"node"}},"storage":{"resources":{"requests":{"storage":"2Gi"}}}}`},
		{name: "registry without url", spec: `{"source":{"registry":{}},"storage":{"resources":{"requests":{"storage":"2Gi"}}}}`, want: "spec.dataVolumeTemplates[0].spec.source.registry.url: Required value"},
		{name: "registry url of another scheme", spec: `{"source":{"registry":{"url":"oci-archive:///x.tar"}},"storage":{"resources":{"requests":{"storage":"2Gi"}}}}`, want: "spec.dataVolumeTemplates[0].spec.source.registry.url: Invalid value"},
		{name: "registry image stream", spec: `{"source":{"registry":{"imageStream":"fedora"}},"storage":{"resources":{"requests":{"storage":"2Gi"}}}}`, want: "spec.dataVolumeTemplates[0].spec.source.registry.imageStream"},
		{name: "registry pulled by the node with credentials", spec: `{"source":{"registry":{"url":"docker://r/i","pullMethod":"node","secretRef":"creds"}},"storage":{"resources":{"requests":{"storage":"2Gi"}}}}`, want: "spec.dataVolumeTemplates[0].spec.source.registry.pullMethod: Forbidden"},
		{name: "registry pull method unknown", spec: `{"source":{"registry":{"url":"docker://r/i","pullMethod":"carrier-pigeon"}},"storage":{"resources":{"requests":{"storage":"2Gi"}}}}`, want: "spec.dataVolumeTemplates[0].spec.source.registry.pullMethod"},
		{name: "sourceRef of another kind", spec: `{"sourceRef":{"kind":"PersistentVolumeClaim","name":"fedora"},"storage":{}}`, want: "spec.dataVolumeTemplates[0].spec.sourceRef.kind"},
		{name: "blank without size", spec: `{"source":{"blank":{}},"storage":{}}`, want: "spec.dataVolumeTemplates[0].spec.storage.resources.requests.storage: Required value"},
		{name: "neither pvc nor storage", spec: `{"source":{"blank":{}}}`, want: "exactly one of pvc and storage is required"},
		{name: "no size", spec: `{"source":{"blank":{}},"storage":{}}`, want: "spec.dataVolumeTemplates[0].spec.storage.resources.requests.storage: Required value"},
		{name: "a field CDI does not have", spec: `{"source":{"blank":{}},"storage":{"resources":{"requests":{"storage":"1Gi"}}},"colour":"red"}`, want: `unknown field "colour"`},
		{name: "archive", spec: `{"source":{"blank":{}},"contentType":"archive","storage":{"resources":{"requests":{"storage":"1Gi"}}}}`, want: "spec.dataVolumeTemplates[0].spec.contentType"},
		{name: "no spec", spec: `null`, want: "spec.dataVolumeTemplates[0].spec: Required value"},
		{name: "not used by a volume", spec: dvSpecHTTP, mutate: func(vm *v1.VirtualMachine) {
			vm.Spec.Template.Spec.Volumes[0].DataVolume.Name = "other"
		}, want: "spec.dataVolumeTemplates[0].metadata.name: Invalid value: \"root\": must be referenced by a dataVolume volume"},
		{name: "two of one name", spec: dvSpecHTTP, mutate: func(vm *v1.VirtualMachine) {
			vm.Spec.DataVolumeTemplates = append(vm.Spec.DataVolumeTemplates, vm.Spec.DataVolumeTemplates[0])
		}, want: "spec.dataVolumeTemplates[1].metadata.name: Duplicate value"},
		{name: "no name", spec: dvSpecHTTP, mutate: func(vm *v1.VirtualMachine) {
			vm.Spec.DataVolumeTemplates[0].ObjectMeta.Name = ""
		}, want: "spec.dataVolumeTemplates[0].metadata.name: Required value"},
		{name: "another namespace", spec: dvSpecHTTP, mutate: func(vm *v1.VirtualMachine) {
			vm.Spec.DataVolumeTemplates[0].ObjectMeta.Namespace = "elsewhere"
		}, want: "spec.dataVolumeTemplates[0].metadata.namespace"},
		{name: "hotpluggable on a virtio disk", spec: dvSpecHTTP, mutate: func(vm *v1.VirtualMachine) {
			vm.Spec.Template.Spec.Volumes[0].DataVolume.Hotpluggable = true
		}, want: `spec.template.spec.domain.devices.disks[0].disk.bus: "virtio" is not supported by kubevmm (hot-plugged disks are on the scsi bus)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vm := dvVM(t, tc.spec)
			if tc.mutate != nil {
				tc.mutate(vm)
			}
			b, err := json.Marshal(vm)
			require.NoError(t, err)
			r := review(t, PathValidateVM, admissionv1.Create, b)
			if tc.want == "" {
				assert.True(t, r.Allowed, "refused: %v", r.Result)
				return
			}
			require.False(t, r.Allowed)
			assert.Contains(t, r.Result.Message, tc.want)
		})
	}
}
