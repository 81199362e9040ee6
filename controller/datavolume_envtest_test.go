package controller_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

const dvTemplateSpec = `{"source":{"http":{"url":"http://images/golden.raw"}},"storage":{"resources":{"requests":{"storage":"64Mi"}}}}`

// newDVVM is newVM with its root disk on a DataVolume from a template.
func newDVVM(ns, name, dv string) *v1.VirtualMachine {
	vm := newVM(ns, name, v1.RunStrategyAlways)
	vm.Spec.Template.Spec.Volumes[0].VolumeSource = v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: dv}}
	vm.Spec.DataVolumeTemplates = []v1.DataVolumeTemplateSpec{{
		ObjectMeta: metav1.ObjectMeta{Name: dv, Labels: map[string]string{"disk": "root"}, Annotations: map[string]string{"note": "golden"}},
		Spec:       v1.Unmodeled{Raw: []byte(dvTemplateSpec)},
	}}
	return vm
}

// setDVStatus plays CDI's DataVolume controller.
func setDVStatus(t *testing.T, ns, name string, st cdiv1.DataVolumeStatus) {
	t.Helper()
	dv := &cdiv1.DataVolume{}
	require.NoError(t, get(t, ns, name, dv))
	dv.Status = st
	require.NoError(t, k8s.Status().Update(context.Background(), dv))
}

// TestVMDataVolumeTemplates: the VM controller creates the template's
// DataVolume (the VM its controller, the template's labels and
// annotations) against the real CRD, is Provisioning and makes no VMI
// while it imports, says DataVolumeError with CDI's message when it
// fails, and creates the VMI once it succeeds; the launcher pod mounts
// the DataVolume's claim (status.claimName) as a PVC volume.
func TestVMDataVolumeTemplates(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	vm := newDVVM(ns, "dvvm", "dvvm-root")
	require.NoError(t, k8s.Create(ctx, vm))

	dv := &cdiv1.DataVolume{}
	waitFor(t, "the DataVolume", func() (bool, string) {
		err := get(t, ns, "dvvm-root", dv)
		return err == nil, "not yet"
	})
	require.NoError(t, get(t, ns, "dvvm", vm))
	assert.True(t, metav1.IsControlledBy(dv, vm), "the VM controls its DataVolume: %+v", dv.OwnerReferences)
	assert.Equal(t, "root", dv.Labels["disk"])
	assert.Equal(t, "golden", dv.Annotations["note"])
	require.NotNil(t, dv.Spec.Source.HTTP)
	assert.Equal(t, "http://images/golden.raw", dv.Spec.Source.HTTP.URL)

	setDVStatus(t, ns, "dvvm-root", cdiv1.DataVolumeStatus{Phase: cdiv1.ImportInProgress, Progress: "12.00%", ClaimName: "dvvm-root-claim"})
	waitVM(t, ns, "dvvm", "to be Provisioning", func(vm *v1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == v1.VirtualMachineStatusProvisioning
	})
	assert.Error(t, get(t, ns, "dvvm", &v1.VirtualMachineInstance{}), "no VMI while the DataVolume imports")

	// A failing importer (CDI restarts it and says why).
	failing := cdiv1.DataVolumeStatus{Phase: cdiv1.ImportInProgress, ClaimName: "dvvm-root-claim", Conditions: []cdiv1.DataVolumeCondition{{
		Type: cdiv1.DataVolumeRunning, ConditionState: cdiv1.ConditionState{Status: corev1.ConditionFalse, Reason: "Error", Message: "GET http://images/golden.raw: HTTP 404 Not Found"},
	}}}
	setDVStatus(t, ns, "dvvm-root", failing)
	vm = waitVM(t, ns, "dvvm", "to be DataVolumeError", func(vm *v1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == v1.VirtualMachineStatusDataVolumeError
	})
	failure := vm.GetCondition(v1.VirtualMachineFailure)
	require.NotNil(t, failure)
	assert.Contains(t, failure.Message, "DataVolume dvvm-root failed: GET http://images/golden.raw: HTTP 404 Not Found")
	assert.Error(t, get(t, ns, "dvvm", &v1.VirtualMachineInstance{}), "no VMI on a failed DataVolume")

	// CDI's claim, then success.
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "dvvm-root-claim", Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}}},
	}
	require.NoError(t, k8s.Create(ctx, claim))
	setDVStatus(t, ns, "dvvm-root", cdiv1.DataVolumeStatus{Phase: cdiv1.Succeeded, Progress: "100.0%", ClaimName: "dvvm-root-claim"})
	vmi := waitVMI(t, ns, "dvvm", "to exist", func(*v1.VirtualMachineInstance) bool { return true })
	assert.Equal(t, "dvvm-root", vmi.Spec.Volumes[0].DataVolume.Name)
	pod := waitOnePod(t, vmi)
	var mounted string
	for _, pv := range pod.Spec.Volumes {
		if pv.Name == "root" && pv.PersistentVolumeClaim != nil {
			mounted = pv.PersistentVolumeClaim.ClaimName
		}
	}
	assert.Equal(t, "dvvm-root-claim", mounted, "the launcher pod mounts the DataVolume's claim: %+v", pod.Spec.Volumes)
	vm = waitVM(t, ns, "dvvm", "to be Starting", func(vm *v1.VirtualMachine) bool {
		return vm.Status.PrintableStatus == v1.VirtualMachineStatusStarting
	})
	assert.Nil(t, vm.GetCondition(v1.VirtualMachineFailure))
}

// TestVMDataVolumeNotOwned: a template naming a DataVolume that exists and
// is not the VM's leaves it untouched, and the VM's Failure condition
// names it; no VMI is created.
func TestVMDataVolumeNotOwned(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	other := &cdiv1.DataVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns, Labels: map[string]string{"owner": "someone"}},
		Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}},
	}
	require.NoError(t, k8s.Create(ctx, other))
	require.NoError(t, k8s.Create(ctx, newDVVM(ns, "vm", "taken")))
	vm := waitVM(t, ns, "vm", "to name the DataVolume it does not own", func(vm *v1.VirtualMachine) bool {
		c := vm.GetCondition(v1.VirtualMachineFailure)
		return c != nil && c.Reason == "FailedDataVolumeCreate"
	})
	assert.Contains(t, vm.GetCondition(v1.VirtualMachineFailure).Message, "DataVolume taken exists and is not controlled by this VirtualMachine")
	dv := &cdiv1.DataVolume{}
	require.NoError(t, get(t, ns, "taken", dv))
	assert.Empty(t, dv.OwnerReferences)
	assert.Equal(t, map[string]string{"owner": "someone"}, dv.Labels)
	assert.NotNil(t, dv.Spec.Source.Blank, "left as it was")
	// The pass that set the condition is the one that would have started it.
	assert.Error(t, get(t, ns, "vm", &v1.VirtualMachineInstance{}))
}
