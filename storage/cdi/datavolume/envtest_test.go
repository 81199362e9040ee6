package datavolume_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/datavolume"
	"github.com/kubevmm/kubevmm/storage/cdi/importcontroller"
	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The DataVolume and import controllers against a real API server (no
// kubelet: the test plays the importer pod's part, its progress served
// by the importer's real metrics handler): a DataVolume gets its PVC and
// importer pod, its phases follow the pod, its progress the importer's,
// an importer that asks for scratch space is made again with a scratch
// PVC, a failing importer's error and restarts show, and success removes
// the pod and the scratch PVC. A size that is not positive fails the
// DataVolume; one made before its class and StorageProfile gets its PVC
// when they appear; deleting a DataVolume leaves no importer pod.
// blankDV is a blank DataVolume of 500Mi in default.
func blankDV(name string) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: cdiv1.DataVolumeSpec{
		Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
		PVC: &corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("500Mi")}}}}}
}

// progressPasses is how often a DataVolume in progress is read again.
const progressPasses = 2 * time.Second

func TestDataVolumeEnvtest(t *testing.T) {
	cfg, k8s := apiserver.StartCDI(t)
	ctx := context.Background()
	s := k8s.Scheme()

	// The progress an importer serves, on a real socket.
	progress := &importer.Progress{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: importer.MetricsHandler(progress, "uid"), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	require.NoError(t, k8s.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-csi",
		Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "kubevirt.io.hostpath-provisioner", VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}))
	sp := &cdiv1.StorageProfile{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-csi"}}
	require.NoError(t, k8s.Create(ctx, sp))
	sp.Status.ClaimPropertySets = []cdiv1.ClaimPropertySet{{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem)}}
	require.NoError(t, k8s.Status().Update(ctx, sp))

	mgr := apiserver.NewManager(t, cfg, ctrl.Options{Scheme: s})
	require.NoError(t, (&datavolume.Reconciler{Client: mgr.GetClient(), MetricsPort: ln.Addr().(*net.TCPAddr).Port}).SetupWithManager(mgr))
	require.NoError(t, (&importcontroller.Reconciler{Client: mgr.GetClient(), Image: "localhost/kubevmm/cdi-importer:envtest",
		PullPolicy: corev1.PullNever}).SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	getDV := func(name string) *cdiv1.DataVolume {
		dv := &cdiv1.DataVolume{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, dv))
		return dv
	}
	waitPhase := func(name string, p cdiv1.DataVolumePhase) *cdiv1.DataVolume {
		var dv *cdiv1.DataVolume
		apiserver.WaitFor(t, name+" "+string(p), func() (bool, string) {
			dv = getDV(name)
			return dv.Status.Phase == p, fmt.Sprintf("%s %s %+v", dv.Status.Phase, dv.Status.Progress, dv.Status.Conditions)
		})
		return dv
	}
	getPod := func(name string) *corev1.Pod {
		pod := &corev1.Pod{}
		apiserver.WaitFor(t, "pod "+name, func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, pod)
			return err == nil, fmt.Sprint(err)
		})
		return pod
	}
	setPod := func(pod *corev1.Pod, st corev1.PodStatus) {
		pod.Status = st
		require.NoError(t, k8s.Status().Update(ctx, pod))
	}
	gone := func(obj client.Object) func() (bool, string) {
		return func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			return apierrors.IsNotFound(err) || (err == nil && obj.GetDeletionTimestamp() != nil), fmt.Sprint(err)
		}
	}

	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fedora"}, Spec: cdiv1.DataVolumeSpec{
		Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://images/fedora.qcow2", CertConfigMap: "ca"}},
		Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
	require.NoError(t, k8s.Create(ctx, dv))
	pod := getPod("importer-fedora")
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fedora"}, pvc))
	assert.Equal(t, "http://images/fedora.qcow2", pvc.Annotations[cdiv1.AnnEndpoint])
	assert.Equal(t, corev1.PersistentVolumeFilesystem, *pvc.Spec.VolumeMode, "from the StorageProfile")
	// Scratch space only once the importer asks for it (a qcow2 image),
	// as upstream: it ends saying so, and is made again with a scratch
	// PVC; its Succeeded phase is not the import's.
	scratch := &corev1.PersistentVolumeClaim{}
	err = k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fedora-scratch"}, scratch)
	assert.True(t, apierrors.IsNotFound(err), "no scratch PVC before the importer asks: %v", err)
	for _, v := range pod.Spec.Volumes {
		assert.NotEqual(t, "cdi-scratch-vol", v.Name)
	}
	setPod(pod, corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "importer",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", Message: importer.ScratchRequiredMessage}}}}})
	first := pod.UID
	apiserver.WaitFor(t, "an importer pod with scratch space", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "importer-fedora"}, pod)
		return err == nil && pod.UID != first, fmt.Sprint(err)
	})
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fedora-scratch"}, scratch))
	assert.True(t, metav1.IsControlledBy(scratch, pvc))
	assert.Contains(t, pod.Spec.Containers[0].Env, corev1.EnvVar{Name: importer.EnvScratchDir, Value: importer.ScratchDir})
	assert.NotEqual(t, cdiv1.Succeeded, getDV("fedora").Status.Phase)
	assert.Equal(t, "fedora", pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	assert.Equal(t, corev1.RestartPolicyOnFailure, pod.Spec.RestartPolicy)
	assert.Equal(t, "localhost/kubevmm/cdi-importer:envtest", pod.Spec.Containers[0].Image)
	assert.Contains(t, pod.Spec.Containers[0].Env, corev1.EnvVar{Name: importer.EnvEndpoint, Value: "http://images/fedora.qcow2"})

	setPod(pod, corev1.PodStatus{Phase: corev1.PodPending})
	waitPhase("fedora", cdiv1.ImportScheduled)

	progress.Set(12.5)
	setPod(pod, corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{Name: "importer",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}})
	apiserver.WaitFor(t, "progress 12.50%", func() (bool, string) {
		dv := getDV("fedora")
		return dv.Status.Phase == cdiv1.ImportInProgress && dv.Status.Progress == "12.50%", string(dv.Status.Phase) + " " + string(dv.Status.Progress)
	})
	progress.Set(60)
	apiserver.WaitFor(t, "progress 60.00%", func() (bool, string) {
		dv := getDV("fedora")
		return dv.Status.Progress == "60.00%", string(dv.Status.Progress)
	})

	// The importer fails, the kubelet restarts it.
	setPod(pod, corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{Name: "importer",
		RestartCount: 2, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
			Message: "GET http://images/fedora.qcow2: HTTP 404 Not Found"}}}}})
	apiserver.WaitFor(t, "the importer's error", func() (bool, string) {
		dv := getDV("fedora")
		c := cdiv1.FindDataVolumeCondition(dv.Status.Conditions, cdiv1.DataVolumeRunning)
		return c != nil && dv.Status.RestartCount == 2 && c.Status == corev1.ConditionFalse && c.Reason == "Error" &&
			c.Message == "GET http://images/fedora.qcow2: HTTP 404 Not Found", fmt.Sprintf("%d %+v", dv.Status.RestartCount, c)
	})

	setPod(pod, corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "importer", RestartCount: 2,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", Message: "Import Complete"}}}}})
	got := waitPhase("fedora", cdiv1.Succeeded)
	assert.Equal(t, cdiv1.DataVolumeProgress("100.0%"), got.Status.Progress)
	assert.Equal(t, corev1.ConditionTrue, cdiv1.FindDataVolumeCondition(got.Status.Conditions, cdiv1.DataVolumeReady).Status)
	apiserver.WaitFor(t, "the importer pod gone", gone(pod))
	apiserver.WaitFor(t, "the scratch PVC gone", gone(scratch))

	// A claim's user can write its annotations: a clone progress is read
	// only from the claim's own clone source pod, not from a pod of
	// another namespace the annotation names.
	t.Run("clone progress from its own source pod only", func(t *testing.T) {
		require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}))
		other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "elsewhere", Name: "metrics"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		require.NoError(t, k8s.Create(ctx, other))
		setPod(other, corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"})
		progress.Set(33)
		require.NoError(t, k8s.Create(ctx, blankDV("peek")))
		pvc := &corev1.PersistentVolumeClaim{}
		apiserver.WaitFor(t, "peek's claim", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "peek"}, pvc)
			return err == nil, fmt.Sprint(err)
		})
		require.NoError(t, k8s.Patch(ctx, pvc, client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(
			`{"metadata":{"annotations":{%q:"elsewhere/x",%q:"elsewhere/metrics",%q:"Running"}}}`,
			cdiv1.AnnCloneRequest, cdiv1.AnnCloneSourcePod, cdiv1.AnnCloneSourcePhase)))))
		waitPhase("peek", cdiv1.CloneInProgress)
		// Passes every 2 s while in progress: a few of them.
		time.Sleep(3 * progressPasses)
		assert.Equal(t, datavolume.ProgressNA, getDV("peek").Status.Progress, "a progress read from a pod of another namespace")
		// The same pod, labelled as this claim's clone source: read.
		require.NoError(t, k8s.Patch(ctx, other, client.RawPatch("application/merge-patch+json",
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, cdiv1.LabelCloneTarget, pvc.UID)))))
		apiserver.WaitFor(t, "peek's progress 33.00%", func() (bool, string) {
			dv := getDV("peek")
			return dv.Status.Progress == "33.00%", string(dv.Status.Progress)
		})
	})

	t.Run("blank", func(t *testing.T) {
		require.NoError(t, k8s.Create(ctx, blankDV("blank")))
		pod := getPod("importer-blank")
		assert.Len(t, pod.Spec.Volumes, 1, "no scratch space for a blank image")
		assert.Contains(t, pod.Spec.Containers[0].Env, corev1.EnvVar{Name: importer.EnvSource, Value: "none"})
		err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "blank-scratch"}, &corev1.PersistentVolumeClaim{})
		assert.True(t, apierrors.IsNotFound(err), "%v", err)
	})

	t.Run("a clone that asks for no size is its source's size", func(t *testing.T) {
		// fedora's claim already holds the filesystem overhead: the
		// clone's is not grown by it again.
		require.NoError(t, k8s.Create(ctx, &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fedora-clone"}, Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "fedora"}}, Storage: &cdiv1.StorageSpec{}}}))
		clone := &corev1.PersistentVolumeClaim{}
		apiserver.WaitFor(t, "the clone's claim", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fedora-clone"}, clone)
			return err == nil, fmt.Sprint(err)
		})
		want, got := pvc.Spec.Resources.Requests[corev1.ResourceStorage], clone.Spec.Resources.Requests[corev1.ResourceStorage]
		assert.Equal(t, int64(1090<<20), want.Value(), "1Gi grown by the overhead")
		assert.Equal(t, want.Value(), got.Value())
	})

	t.Run("a size that is not positive", func(t *testing.T) {
		require.NoError(t, k8s.Create(ctx, &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "negative"}, Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("-1Gi")}}}}}))
		dv := waitPhase("negative", cdiv1.Failed)
		c := cdiv1.FindDataVolumeCondition(dv.Status.Conditions, cdiv1.DataVolumeReady)
		assert.Equal(t, "spec.storage.resources.requests.storage must be positive, not -1Gi", c.Message)
		err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "negative"}, &corev1.PersistentVolumeClaim{})
		assert.True(t, apierrors.IsNotFound(err), "no PVC: %v", err)
	})

	t.Run("a DataVolume made before its class and StorageProfile", func(t *testing.T) {
		// As one manifest makes them (and the CDI operator makes the
		// profile only once it sees the class): the DataVolume fails for
		// want of the profile, then gets its claim when they appear.
		require.NoError(t, k8s.Create(ctx, &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "late"}, Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: &cdiv1.StorageSpec{StorageClassName: ptr.To("late"),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}))
		dv := waitPhase("late", cdiv1.Failed)
		assert.Equal(t, "spec.storage: no accessModes given and StorageProfile late names none",
			cdiv1.FindDataVolumeCondition(dv.Status.Conditions, cdiv1.DataVolumeReady).Message)
		require.NoError(t, k8s.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "late"}, Provisioner: "kubevirt.io.hostpath-provisioner"}))
		sp := &cdiv1.StorageProfile{ObjectMeta: metav1.ObjectMeta{Name: "late"}}
		require.NoError(t, k8s.Create(ctx, sp))
		sp.Status.ClaimPropertySets = []cdiv1.ClaimPropertySet{{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode: ptr.To(corev1.PersistentVolumeBlock)}}
		require.NoError(t, k8s.Status().Update(ctx, sp))
		claim := &corev1.PersistentVolumeClaim{}
		apiserver.WaitFor(t, "the late DataVolume's claim", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "late"}, claim)
			return err == nil, fmt.Sprint(err)
		})
		assert.Equal(t, corev1.PersistentVolumeBlock, *claim.Spec.VolumeMode, "from the late StorageProfile")
	})

	t.Run("deleting a DataVolume removes its importer", func(t *testing.T) {
		dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "doomed"}, Spec: cdiv1.DataVolumeSpec{
			Source:  &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://images/missing"}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}}
		require.NoError(t, k8s.Create(ctx, dv))
		pod := getPod("importer-doomed")
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "doomed"}}
		// The PVC in use by the pod is kept by its protection finalizer, as
		// a kubelet-backed cluster keeps it (no controller manager here).
		require.NoError(t, k8s.Patch(ctx, pvc, client.RawPatch("application/merge-patch+json",
			[]byte(`{"metadata":{"finalizers":["kubernetes.io/pvc-protection"]}}`))))
		require.NoError(t, k8s.Delete(ctx, dv))
		// No garbage collector here either: the DataVolume's PVC is
		// deleted as it would delete it.
		require.NoError(t, k8s.Delete(ctx, pvc))
		apiserver.WaitFor(t, "the importer pod gone", gone(pod))
		require.NoError(t, k8s.Patch(ctx, pvc, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))))
	})
}
