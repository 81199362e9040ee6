package upload

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

func TestDecide(t *testing.T) {
	target := func(kv ...string) *corev1.PersistentVolumeClaim {
		ann := map[string]string{cdiv1.AnnUploadRequest: ""}
		for i := 0; i+1 < len(kv); i += 2 {
			ann[kv[i]] = kv[i+1]
		}
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: ann}}
	}
	pod := func(phase corev1.PodPhase, ready bool, restarts int32) *corev1.Pod {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		return &corev1.Pod{Status: corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}},
			ContainerStatuses: []corev1.ContainerStatus{{RestartCount: restarts}}}}
	}
	ann := func(phase, ready, restarts string) map[string]string {
		return map[string]string{cdiv1.AnnPodPhase: phase, cdiv1.AnnPodReady: ready, cdiv1.AnnPodRestarts: restarts}
	}
	for _, tc := range []struct {
		name string
		pvc  *corev1.PersistentVolumeClaim
		pod  *corev1.Pod
		want action
	}{
		{"not a target", &corev1.PersistentVolumeClaim{}, nil, action{}},
		{"new target", target(), nil,
			action{create: true, annotations: map[string]string{cdiv1.AnnPodPhase: "Pending", cdiv1.AnnPodReady: "false"}}},
		{"pod pending", target(cdiv1.AnnPodPhase, "Pending", cdiv1.AnnPodReady, "false"), pod(corev1.PodPending, false, 0),
			action{annotations: ann("Pending", "false", "0")}},
		{"pod ready", target(cdiv1.AnnPodPhase, "Pending", cdiv1.AnnPodReady, "false"), pod(corev1.PodRunning, true, 0),
			action{annotations: ann("Running", "true", "0")}},
		{"nothing changed", target(cdiv1.AnnPodPhase, "Running", cdiv1.AnnPodReady, "true", cdiv1.AnnPodRestarts, "0"), pod(corev1.PodRunning, true, 0),
			action{}},
		{"restarted, not ready", target(cdiv1.AnnPodPhase, "Running", cdiv1.AnnPodReady, "true", cdiv1.AnnPodRestarts, "0"), pod(corev1.PodRunning, false, 1),
			action{annotations: ann("Running", "false", "1")}},
		{"pod succeeded", target(cdiv1.AnnPodPhase, "Running", cdiv1.AnnPodReady, "true"), pod(corev1.PodSucceeded, false, 0),
			action{cleanup: true, annotations: ann("Succeeded", "false", "0")}},
		{"pod failed", target(cdiv1.AnnPodPhase, "Running", cdiv1.AnnPodReady, "true"), pod(corev1.PodFailed, false, 3),
			action{annotations: ann("Failed", "false", "3")}},
		{"done, pod gone", target(cdiv1.AnnPodPhase, "Succeeded"), nil, action{}},
		{"done, pod left", target(cdiv1.AnnPodPhase, "Succeeded"), pod(corev1.PodSucceeded, false, 0), action{cleanup: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, decide(tc.pvc, tc.pod))
		})
	}
}

func TestUsableSize(t *testing.T) {
	assert.Equal(t, int64(1009316864), UsableSize(1<<30, 0.06), "0.94 GiB in whole sectors")
	assert.Equal(t, int64(1<<30), UsableSize(1<<30, 0))
	assert.Equal(t, int64(0), UsableSize(511, 0))
}
