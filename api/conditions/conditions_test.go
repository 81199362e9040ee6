package conditions_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// A condition's transition time moves with its status only, its heartbeat
// with any change; an unchanged condition keeps both (no write).
func TestSet(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1, t2, t3 := metav1.NewTime(t0.Add(time.Minute)), metav1.NewTime(t0.Add(2*time.Minute)), metav1.NewTime(t0.Add(3*time.Minute))
	c := func(s corev1.ConditionStatus, msg string) conditions.Condition {
		return conditions.Condition{Type: conditions.Available, Status: s, Reason: "Available", Message: msg}
	}
	conds := conditions.Set(nil, c(corev1.ConditionFalse, "deploying"), t0)
	conds = conditions.Set(conds, c(corev1.ConditionFalse, "deploying"), t1)
	assert.Equal(t, t0, conds[0].LastTransitionTime)
	assert.Equal(t, t0, conds[0].LastHeartbeatTime, "unchanged")
	conds = conditions.Set(conds, c(corev1.ConditionFalse, "still deploying"), t2)
	assert.Equal(t, t0, conds[0].LastTransitionTime)
	assert.Equal(t, t2, conds[0].LastHeartbeatTime, "a new message")
	conds = conditions.Set(conds, c(corev1.ConditionTrue, "available"), t3)
	assert.Equal(t, t3, conds[0].LastTransitionTime, "a new status")
	assert.Len(t, conds, 1)
	assert.Nil(t, conditions.Find(conds, conditions.Degraded))
	assert.Equal(t, "available", conditions.Find(conds, conditions.Available).Message)
}
