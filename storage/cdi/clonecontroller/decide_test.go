package clonecontroller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

func TestDecide(t *testing.T) {
	target := func(kv ...string) *corev1.PersistentVolumeClaim {
		ann := map[string]string{cdiv1.AnnCloneRequest: "golden/fedora", cdiv1.AnnUploadRequest: ""}
		for i := 0; i < len(kv); i += 2 {
			ann[kv[i]] = kv[i+1]
		}
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t", UID: "u", Annotations: ann}}
	}
	source := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "fedora"}}
	pod := func(p corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "cdi-clone-source-u"}, Status: corev1.PodStatus{Phase: p}}
	}
	ready := []string{cdiv1.AnnPodPhase, "Running", cdiv1.AnnPodReady, "true"}
	refusal := map[string]string{cdiv1.AnnRunningCondition: "false", cdiv1.AnnRunningConditionReason: ReasonValidationFailed, cdiv1.AnnRunningConditionMessage: "no clone token"}
	var refusalKV []string
	for k, v := range refusal {
		refusalKV = append(refusalKV, k, v)
	}
	tests := []struct {
		name string
		seen seen
		want action
	}{
		{"no source claim", seen{target: target(ready...)}, action{wait: true}},
		{"source in use", seen{target: target(ready...), source: source, users: []string{"virt-launcher-vm"}},
			action{inUse: []string{"virt-launcher-vm"}, wait: true}},
		{"server not ready", seen{target: target(cdiv1.AnnPodPhase, "Pending", cdiv1.AnnPodReady, "false"), source: source}, action{}},
		// The target first, the pod on the next pass: never both at once.
		{"server ready", seen{target: target(ready...), source: source},
			action{annotations: map[string]string{cdiv1.AnnCloneSourcePod: "golden/cdi-clone-source-u", cdiv1.AnnCloneSourcePhase: "Pending"}}},
		{"server ready, target annotated", seen{target: target(append(ready, cdiv1.AnnCloneSourcePod, "golden/cdi-clone-source-u", cdiv1.AnnCloneSourcePhase, "Pending")...), source: source},
			action{create: true}},
		{"source pod gone while running", seen{target: target(append(ready, cdiv1.AnnCloneSourcePod, "golden/cdi-clone-source-u", cdiv1.AnnCloneSourcePhase, "Running")...), source: source},
			action{annotations: map[string]string{cdiv1.AnnCloneSourcePod: "golden/cdi-clone-source-u", cdiv1.AnnCloneSourcePhase: "Pending"}}},
		{"source pod pending", seen{target: target(append(ready, cdiv1.AnnCloneSourcePod, "golden/cdi-clone-source-u", cdiv1.AnnCloneSourcePhase, "Pending")...), source: source, pod: pod(corev1.PodPending)},
			action{}},
		{"source pod running", seen{target: target(append(ready, cdiv1.AnnCloneSourcePod, "golden/cdi-clone-source-u", cdiv1.AnnCloneSourcePhase, "Pending")...), source: source, pod: pod(corev1.PodRunning)},
			action{annotations: map[string]string{cdiv1.AnnCloneSourcePod: "golden/cdi-clone-source-u", cdiv1.AnnCloneSourcePhase: "Running"}}},
		{"nothing changed", seen{target: target(append(ready, cdiv1.AnnCloneSourcePod, "golden/cdi-clone-source-u", cdiv1.AnnCloneSourcePhase, "Running")...), source: source, pod: pod(corev1.PodRunning)},
			action{}},
		{"done", seen{target: target(cdiv1.AnnPodPhase, "Succeeded"), source: source, pod: pod(corev1.PodSucceeded)}, action{cleanup: true}},
		{"done, nothing left", seen{target: target(cdiv1.AnnPodPhase, "Succeeded"), source: source}, action{}},
		// Not authorized: never a source pod, whatever the server says.
		{"not authorized", seen{target: target(ready...), source: source, unauthorized: "no clone token"},
			action{refuse: "no clone token", annotations: refusal}},
		{"not authorized, said", seen{target: target(append(ready, refusalKV...)...), source: source, unauthorized: "no clone token"}, action{}},
		{"not authorized, a source pod there", seen{target: target(append(ready, refusalKV...)...), source: source, pod: pod(corev1.PodRunning), unauthorized: "no clone token"},
			action{cleanup: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, decide(tc.seen))
		})
	}
}
