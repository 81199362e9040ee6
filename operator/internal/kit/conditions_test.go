package kit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// The three conditions move together, and the state logged is the one
// that holds, Degraded first.
func TestSetConditionsAndState(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	assert.Equal(t, "none", kit.State(nil))
	conds := kit.SetConditions(nil, corev1.ConditionFalse, corev1.ConditionTrue, corev1.ConditionFalse, "Deploying", "not ready yet", t0)
	assert.Equal(t, []conditions.Condition{
		{Type: conditions.Available, Status: corev1.ConditionFalse, Reason: "Deploying", Message: "not ready yet", LastHeartbeatTime: t0, LastTransitionTime: t0},
		{Type: conditions.Progressing, Status: corev1.ConditionTrue, Reason: "Deploying", Message: "not ready yet", LastHeartbeatTime: t0, LastTransitionTime: t0},
		{Type: conditions.Degraded, Status: corev1.ConditionFalse, Reason: "Deploying", Message: "not ready yet", LastHeartbeatTime: t0, LastTransitionTime: t0},
	}, conds)
	assert.Equal(t, conditions.Progressing, kit.State(conds))
	conds = kit.SetConditions(conds, corev1.ConditionTrue, corev1.ConditionTrue, corev1.ConditionTrue, "Odd", "", t1)
	assert.Len(t, conds, 3)
	assert.Equal(t, conditions.Degraded, kit.State(conds))
	assert.Equal(t, t0, conditions.Find(conds, conditions.Progressing).LastTransitionTime, "status unchanged")
	assert.Equal(t, t1, conditions.Find(conds, conditions.Available).LastTransitionTime)
}
