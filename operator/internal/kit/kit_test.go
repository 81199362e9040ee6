package kit_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

func TestDeploymentReady(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas *int32
		st       appsv1.DeploymentStatus
		want     bool
	}{
		{"rolled out", ptr.To[int32](2), appsv1.DeploymentStatus{ObservedGeneration: 3, UpdatedReplicas: 2, AvailableReplicas: 2}, true},
		{"replicas unset means one", nil, appsv1.DeploymentStatus{ObservedGeneration: 3, UpdatedReplicas: 1, AvailableReplicas: 1}, true},
		{"generation not yet seen", ptr.To[int32](1), appsv1.DeploymentStatus{ObservedGeneration: 2, UpdatedReplicas: 1, AvailableReplicas: 1}, false},
		{"old replicas still running", ptr.To[int32](2), appsv1.DeploymentStatus{ObservedGeneration: 3, UpdatedReplicas: 1, AvailableReplicas: 2}, false},
		{"not available", ptr.To[int32](2), appsv1.DeploymentStatus{ObservedGeneration: 3, UpdatedReplicas: 2, AvailableReplicas: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Spec: appsv1.DeploymentSpec{Replicas: tc.replicas}, Status: tc.st}
			assert.Equal(t, tc.want, kit.DeploymentReady(dep))
		})
	}
}

func TestDaemonSetReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   appsv1.DaemonSetStatus
		want bool
	}{
		{"rolled out", appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}, true},
		{"no node to run on", appsv1.DaemonSetStatus{ObservedGeneration: 3}, true},
		{"generation not yet seen", appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1}, false},
		{"old pods still running", appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 2}, false},
		{"not available", appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: tc.st}
			assert.Equal(t, tc.want, kit.DaemonSetReady(ds))
		})
	}
}

// An apply claims every field it sends: the object's status and creation
// time must not be among them, the rest must.
func TestApplyConfiguration(t *testing.T) {
	dep := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", Labels: map[string]string{"a": "b"}},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](2)},
		Status:     appsv1.DeploymentStatus{Replicas: 2}}
	u, err := kit.ApplyConfiguration(dep)
	require.NoError(t, err)
	assert.Equal(t, "Deployment", u.GetKind())
	assert.Equal(t, map[string]string{"a": "b"}, u.GetLabels())
	n, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	assert.Equal(t, int64(2), n)
	_, hasStatus := u.Object["status"]
	assert.False(t, hasStatus, "status")
	_, hasCreated, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "creationTimestamp")
	assert.False(t, hasCreated, "metadata.creationTimestamp")
}
