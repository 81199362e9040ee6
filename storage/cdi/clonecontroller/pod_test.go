package clonecontroller_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevmm/kubevmm/storage/cdi/clonecontroller"
	"github.com/kubevmm/kubevmm/test/podsecuritytest"
)

// The clone source pod passes the restricted PodSecurity level and reads
// the source claim as user 107 (group 107, fsGroup), whether a
// Filesystem claim (mounted read-only) or a Block one.
func TestPodRestricted(t *testing.T) {
	target := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "dst", UID: "t-uid"}}
	for _, mode := range []corev1.PersistentVolumeMode{corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock} {
		src := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "src"},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeMode: ptr.To(mode)}}
		pod := clonecontroller.Pod(target, src, "10.0.0.1", metav1.ObjectMeta{Name: "cdi-clone-source", Namespace: "src"}, "img", corev1.PullNever)
		podsecuritytest.RequireRestricted(t, pod)
		sc := pod.Spec.SecurityContext
		assert.Equal(t, []int64{107, 107, 107}, []int64{*sc.RunAsUser, *sc.RunAsGroup, *sc.FSGroup}, mode)
	}
}
