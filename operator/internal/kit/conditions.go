package kit

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// SetConditions sets Available, Progressing and Degraded in conds to the
// statuses given, all with reason and msg (conditions.Set stamps them
// with now where they change).
func SetConditions(conds []conditions.Condition, available, progressing, degraded corev1.ConditionStatus, reason, msg string, now metav1.Time) []conditions.Condition {
	for _, c := range []conditions.Condition{
		{Type: conditions.Available, Status: available}, {Type: conditions.Progressing, Status: progressing}, {Type: conditions.Degraded, Status: degraded}} {
		c.Reason, c.Message = reason, msg
		conds = conditions.Set(conds, c, now)
	}
	return conds
}

// State names the condition of conds that holds, Degraded before
// Available before Progressing, "none" if none does: the state a
// reconcile logs when it changes.
func State(conds []conditions.Condition) string {
	for _, t := range []conditions.Type{conditions.Degraded, conditions.Available, conditions.Progressing} {
		if c := conditions.Find(conds, t); c != nil && c.Status == corev1.ConditionTrue {
			return string(t)
		}
	}
	return "none"
}
