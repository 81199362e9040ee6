package importcontroller_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/importcontroller"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The claim is written before its importer pod exists and not again while
// the pod waits to be scheduled: kube-scheduler writes a
// WaitForFirstConsumer claim (its selected node) from its own copy while
// it places the pod, and a write of ours in between fails that with a
// conflict (the pod then waits out the scheduler's backoff). The test
// plays the scheduler's failed attempts and the kubelet's first word.
func TestClaimWrittenBeforePod(t *testing.T) {
	cfg, k8s := apiserver.StartCDI(t)
	ctx := context.Background()
	s := k8s.Scheme()
	mgr := apiserver.NewManager(t, cfg, ctrl.Options{Scheme: s})
	rec := apiserver.NewRecorder(mgr.GetClient())
	require.NoError(t, (&importcontroller.Reconciler{Client: rec, Image: "localhost/kubevmm/cdi-importer:envtest",
		PullPolicy: corev1.PullNever}).SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "disk",
		Annotations: map[string]string{cdiv1.AnnSource: cdiv1.SourceHTTP, cdiv1.AnnEndpoint: "http://images/disk.img"}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("hostpath-csi"),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	require.NoError(t, k8s.Create(ctx, pvc))
	pod := &corev1.Pod{}
	apiserver.WaitFor(t, "the importer pod", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "importer-disk"}, pod)
		return err == nil, fmt.Sprint(err)
	})
	// seen waits until the controller has read the pod as it is now. A
	// pass over the claim begins only once the one before has ended, so
	// it also says that the pass before (and its writes) is done.
	seen := func(what string) {
		apiserver.WaitFor(t, "the controller to read the pod "+what, func() (bool, string) {
			return rec.Seen(pod), pod.ResourceVersion
		})
	}
	seen("as made")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
	assert.Equal(t, []string{"patch *v1.PersistentVolumeClaim disk", "create *v1.Pod importer-disk"}, rec.Writes(), "the claim first")
	for k, v := range map[string]string{cdiv1.AnnImportPod: "importer-disk", cdiv1.AnnPodPhase: "Pending", cdiv1.AnnPodRestarts: "0",
		cdiv1.AnnRunningCondition: "false", cdiv1.AnnRunningConditionReason: "Pending"} {
		assert.Equal(t, v, pvc.Annotations[k], k)
	}

	// The scheduler's failed attempts: each rewrites the pod's
	// PodScheduled condition, none says anything new of the import.
	version := pvc.ResourceVersion
	for i := range 4 { // the last one's read says the pass before it is done
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: fmt.Sprintf("attempt %d: 0/1 nodes are available", i), LastTransitionTime: metav1.Now()}}
		require.NoError(t, k8s.Status().Update(ctx, pod))
		seen(fmt.Sprintf("unschedulable (%d)", i))
	}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
	assert.Equal(t, version, pvc.ResourceVersion, "the claim was written while its pod was being scheduled")
	assert.Len(t, rec.Writes(), 2)

	// Scheduled: the kubelet makes the container, which the claim says.
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: importcontroller.Container,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	require.NoError(t, k8s.Status().Update(ctx, pod))
	apiserver.WaitFor(t, "the claim to say ContainerCreating", func() (bool, string) {
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
		return pvc.Annotations[cdiv1.AnnRunningConditionReason] == "ContainerCreating", pvc.Annotations[cdiv1.AnnRunningConditionReason]
	})
	// The patch is recorded once the controller's call returns, a moment
	// after the API server shows it.
	apiserver.WaitFor(t, "the patch recorded", func() (bool, string) { return len(rec.Writes()) >= 3, fmt.Sprint(rec.Writes()) })
	assert.Equal(t, []string{"patch *v1.PersistentVolumeClaim disk", "create *v1.Pod importer-disk", "patch *v1.PersistentVolumeClaim disk"}, rec.Writes())
}
