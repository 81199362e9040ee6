package datasource_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/datasource"
)

func TestStatus(t *testing.T) {
	dv := func(p cdiv1.DataVolumePhase) *cdiv1.DataVolume {
		return &cdiv1.DataVolume{Status: cdiv1.DataVolumeStatus{Phase: p}}
	}
	pvc := &cdiv1.DataVolumeSourcePVC{Name: "golden"}
	tests := []struct {
		name        string
		source      *cdiv1.DataVolumeSourcePVC
		seen        datasource.Seen
		want        corev1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		{"no pvc", nil, datasource.Seen{}, corev1.ConditionFalse, "NoSource", "No source PVC set"},
		{"nothing there", pvc, datasource.Seen{}, corev1.ConditionFalse, "NotFound", "PVC ns/golden not found"},
		{"a PVC without DataVolume", pvc, datasource.Seen{Claim: true}, corev1.ConditionTrue, "Ready", ""},
		{"importing", pvc, datasource.Seen{Claim: true, DataVolume: dv(cdiv1.ImportInProgress)}, corev1.ConditionFalse, "ImportInProgress", "DataVolume ns/golden is ImportInProgress"},
		{"DataVolume without phase yet", pvc, datasource.Seen{DataVolume: dv("")}, corev1.ConditionFalse, "Pending", ""},
		{"cloning", pvc, datasource.Seen{Claim: true, DataVolume: dv("CloneInProgress")}, corev1.ConditionFalse, "CloneInProgress", ""},
		{"imported", pvc, datasource.Seen{Claim: true, DataVolume: dv(cdiv1.Succeeded)}, corev1.ConditionTrue, "Ready", ""},
		{"failed", pvc, datasource.Seen{Claim: true, DataVolume: dv(cdiv1.Failed)}, corev1.ConditionFalse, "Failed", ""},
	}
	now := metav1.NewTime(time.Unix(1000, 0).UTC())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ds"},
				Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: tc.source}}}
			st := datasource.Status(ds, tc.seen, now)
			assert.Equal(t, ds.Spec.Source, st.Source)
			c := cdiv1.FindDataSourceCondition(st.Conditions, cdiv1.DataSourceReady)
			if assert.NotNil(t, c) {
				assert.Equal(t, tc.want, c.Status)
				assert.Equal(t, tc.wantReason, c.Reason)
				if tc.wantMessage != "" {
					assert.Equal(t, tc.wantMessage, c.Message)
				}
				assert.Equal(t, now, c.LastTransitionTime)
			}
		})
	}
}

// A condition that does not change keeps its transition time.
func TestStatusKeepsTransitionTime(t *testing.T) {
	ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ds"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "img"}}}}
	first := metav1.NewTime(time.Unix(1000, 0).UTC())
	ds.Status = datasource.Status(ds, datasource.Seen{Claim: true}, first)
	st := datasource.Status(ds, datasource.Seen{Claim: true}, metav1.NewTime(time.Unix(2000, 0).UTC()))
	assert.Equal(t, ds.Status, st)
}
