package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

func dvIn(name string, phase cdiv1.DataVolumePhase, conds ...cdiv1.DataVolumeCondition) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: cdiv1.DataVolumeStatus{Phase: phase, Progress: "45.00%", Conditions: conds}}
}

func dvCond(t cdiv1.DataVolumeConditionType, s corev1.ConditionStatus, reason, msg string) cdiv1.DataVolumeCondition {
	return cdiv1.DataVolumeCondition{Type: t, ConditionState: cdiv1.ConditionState{Status: s, Reason: reason, Message: msg}}
}

func TestDecideDataVolumes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dvs     []*cdiv1.DataVolume
		want    dvVerdict
		wantErr string
		status  v1.VirtualMachinePrintableStatus // with no VMI
	}{
		{name: "none named", want: dvVerdict{ready: true}},
		{name: "all succeeded", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.Succeeded), dvIn("b", cdiv1.Succeeded)}, want: dvVerdict{ready: true}},
		{name: "one importing", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.Succeeded), dvIn("b", cdiv1.ImportInProgress)},
			wantErr: "DataVolume b is ImportInProgress (45.00%)", status: v1.VirtualMachineStatusProvisioning},
		{name: "one clone scheduled", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.CloneScheduled), dvIn("b", cdiv1.Succeeded)},
			wantErr: "DataVolume a is CloneScheduled", status: v1.VirtualMachineStatusProvisioning},
		{name: "one cloning", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.Succeeded), dvIn("b", cdiv1.CloneInProgress)},
			wantErr: "DataVolume b is CloneInProgress (45.00%)", status: v1.VirtualMachineStatusProvisioning},
		{name: "one not made yet", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.Succeeded)},
			wantErr: "DataVolume b does not exist yet", status: v1.VirtualMachineStatusProvisioning},
		{name: "no phase yet", dvs: []*cdiv1.DataVolume{dvIn("a", ""), dvIn("b", cdiv1.Succeeded)},
			wantErr: "DataVolume a is Pending", status: v1.VirtualMachineStatusProvisioning},
		{name: "waiting for the first consumer", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.WaitForFirstConsumer), dvIn("b", cdiv1.Succeeded)},
			want: dvVerdict{ready: true, waitingForBinding: true}},
		{name: "pending population", dvs: []*cdiv1.DataVolume{dvIn("a", "PendingPopulation"), dvIn("b", cdiv1.Succeeded)},
			want: dvVerdict{ready: true, waitingForBinding: true}},
		{name: "failed, the Running condition's message", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.ImportInProgress),
			dvIn("b", cdiv1.Failed, dvCond(cdiv1.DataVolumeReady, corev1.ConditionFalse, "", ""), dvCond(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "ErrClaimNotValid", "size must be positive"))},
			wantErr: "DataVolume b failed: size must be positive", status: v1.VirtualMachineStatusDataVolumeError},
		{name: "importer failing and restarted", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.ImportInProgress,
			dvCond(cdiv1.DataVolumeRunning, corev1.ConditionFalse, "Error", "GET http://x/d.img: HTTP 404 Not Found")), dvIn("b", cdiv1.Succeeded)},
			wantErr: "DataVolume a failed: GET http://x/d.img: HTTP 404 Not Found", status: v1.VirtualMachineStatusDataVolumeError},
		{name: "importer running", dvs: []*cdiv1.DataVolume{dvIn("a", cdiv1.ImportInProgress,
			dvCond(cdiv1.DataVolumeRunning, corev1.ConditionTrue, "Pod is running", "")), dvIn("b", cdiv1.Succeeded)},
			wantErr: "DataVolume a is ImportInProgress", status: v1.VirtualMachineStatusProvisioning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := []string{"a", "b"}
			if tc.dvs == nil {
				names = nil
			}
			m := map[string]*cdiv1.DataVolume{}
			for _, dv := range tc.dvs {
				m[dv.Name] = dv
			}
			got := decideDataVolumes(names, m)
			if tc.wantErr != "" {
				require.Error(t, got.err)
				assert.Contains(t, got.err.Error(), tc.wantErr)
				assert.False(t, got.ready)
			} else {
				assert.Equal(t, tc.want, got)
			}
			want := tc.status
			if want == "" {
				want = v1.VirtualMachineStatusStopped
			}
			assert.Equal(t, want, withDataVolumeStatus(v1.VirtualMachineStatusStopped, nil, got))
		})
	}
}

func TestWithDataVolumeStatus(t *testing.T) {
	starting := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Scheduling}}
	failedVMI := &v1.VirtualMachineInstance{Status: v1.VirtualMachineInstanceStatus{Phase: v1.Failed}}
	failed := dvVerdict{failed: true}
	importing := dvVerdict{}
	wffc := dvVerdict{ready: true, waitingForBinding: true}
	for _, tc := range []struct {
		name string
		p    v1.VirtualMachinePrintableStatus
		vmi  *v1.VirtualMachineInstance
		v    dvVerdict
		want v1.VirtualMachinePrintableStatus
	}{
		{"running stays running", v1.VirtualMachineStatusRunning, starting, failed, v1.VirtualMachineStatusRunning},
		{"stopping stays stopping", v1.VirtualMachineStatusStopping, starting, importing, v1.VirtualMachineStatusStopping},
		{"no VMI, importing", v1.VirtualMachineStatusStopped, nil, importing, v1.VirtualMachineStatusProvisioning},
		{"a failed VMI, a failed DataVolume", v1.VirtualMachineStatusCrashLoopBackOff, failedVMI, failed, v1.VirtualMachineStatusDataVolumeError},
		{"starting on a claim waiting for its consumer", v1.VirtualMachineStatusStarting, starting, wffc, v1.VirtualMachineStatusWaitingForVolumeBinding},
		{"unschedulable stays so", v1.VirtualMachineStatusUnschedulable, starting, wffc, v1.VirtualMachineStatusUnschedulable},
		{"ready DataVolumes change nothing", v1.VirtualMachineStatusStopped, nil, dvVerdict{ready: true}, v1.VirtualMachineStatusStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, withDataVolumeStatus(tc.p, tc.vmi, tc.v))
		})
	}
}

func TestDataVolumeFromTemplate(t *testing.T) {
	vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns", UID: "u1"}}
	tmpl := &v1.DataVolumeTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "ns", Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"}},
		Spec:       v1.Unmodeled{Raw: []byte(`{"source":{"http":{"url":"http://x/d.img"}},"storage":{"resources":{"requests":{"storage":"1Gi"}}}}`)},
	}
	dv, err := dataVolumeFromTemplate(vm, tmpl)
	require.NoError(t, err)
	assert.Equal(t, "root", dv.Name)
	assert.Equal(t, "ns", dv.Namespace)
	assert.Equal(t, map[string]string{"l": "1"}, dv.Labels)
	assert.Equal(t, map[string]string{"a": "2"}, dv.Annotations)
	require.Len(t, dv.OwnerReferences, 1)
	assert.True(t, metav1.IsControlledBy(dv, vm))
	assert.Equal(t, "VirtualMachine", dv.OwnerReferences[0].Kind)
	assert.Equal(t, "http://x/d.img", dv.Spec.Source.HTTP.URL)

	tmpl.Spec.Raw = []byte(`{"source":{"blank":{}},"sorage":{}}`)
	_, err = dataVolumeFromTemplate(vm, tmpl)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `spec.dataVolumeTemplates[root].spec: not a DataVolume spec: json: unknown field "sorage"`)
}
