package upload

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/test/podsecuritytest"
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
		// The claim first, the pod on the next pass: never both at once.
		{"new target", target(), nil, action{annotations: ann("Pending", "false", "0")}},
		{"annotated, no pod", target(cdiv1.AnnPodPhase, "Pending", cdiv1.AnnPodReady, "false", cdiv1.AnnPodRestarts, "0"), nil, action{create: true}},
		{"pod gone while running", target(cdiv1.AnnPodPhase, "Running", cdiv1.AnnPodReady, "true", cdiv1.AnnPodRestarts, "0"), nil,
			action{annotations: ann("Pending", "false", "0")}},
		// A new pod, and one the scheduler could not place yet, say what
		// the claim already says: no write while it is being scheduled.
		{"pod pending", target(cdiv1.AnnPodPhase, "Pending", cdiv1.AnnPodReady, "false", cdiv1.AnnPodRestarts, "0"),
			&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, action{}},
		{"pod unschedulable", target(cdiv1.AnnPodPhase, "Pending", cdiv1.AnnPodReady, "false", cdiv1.AnnPodRestarts, "0"),
			&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled,
				Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available"}}}}, action{}},
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

// An upload target's server takes the proxy's client certificate; a
// clone target's takes its own clone source's alone (named by the
// target's UID), not another clone's.
func TestServerClient(t *testing.T) {
	r := &Reconciler{Image: "img"}
	for ann, want := range map[string]string{cdiv1.AnnUploadRequest: ProxyClientName, cdiv1.AnnCloneRequest: "cdi-clone-source-9b1c"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns", UID: "9b1c", Annotations: map[string]string{ann: "src/disk"}},
			Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		pod, err := r.pod(pvc, metav1.ObjectMeta{Name: "cdi-upload-t"}, 0.055)
		require.NoError(t, err)
		assert.Contains(t, pod.Spec.Containers[0].Args, "--client-name="+want, ann)
	}
}

// The upload server pod passes the restricted PodSecurity level and runs
// as user 107, the claim's files group 107's (fsGroup), for a Filesystem
// claim and a Block one.
func TestPodRestricted(t *testing.T) {
	r := &Reconciler{Image: "img"}
	for _, mode := range []corev1.PersistentVolumeMode{corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "ns", Annotations: map[string]string{cdiv1.AnnUploadRequest: ""}},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeMode: &mode,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		pod, err := r.pod(pvc, metav1.ObjectMeta{Name: "cdi-upload-t"}, 0.055)
		require.NoError(t, err)
		podsecuritytest.RequireRestricted(t, pod)
		sc := pod.Spec.SecurityContext
		assert.Equal(t, []int64{107, 107, 107}, []int64{*sc.RunAsUser, *sc.RunAsGroup, *sc.FSGroup}, mode)
	}
}
