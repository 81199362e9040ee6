package importcontroller_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/importcontroller"
	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/test/podsecuritytest"
)

func TestNames(t *testing.T) {
	assert.Equal(t, "importer-disk", importcontroller.PodName("disk"))
	assert.Equal(t, "disk-scratch", importcontroller.ScratchName("disk"))
	long := strings.Repeat("a", 60)
	for _, n := range []string{importcontroller.PodName(long), importcontroller.ScratchName(long)} {
		assert.LessOrEqual(t, len(n), 63, n)
	}
	assert.NotEqual(t, importcontroller.PodName(long), importcontroller.PodName(long+"b"), "a hash tells them apart")
}

func TestPod(t *testing.T) {
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "disk", UID: "uid", Annotations: map[string]string{
		cdiv1.AnnSource: "http", cdiv1.AnnEndpoint: "https://x/d.img", cdiv1.AnnSecret: "auth", cdiv1.AnnCertConfigMap: "ca",
		cdiv1.AnnExtraHeaders: `["A: b"]`, cdiv1.AnnSecretExtraHeaders: `["h1","h2"]`}},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeMode: ptr.To(corev1.PersistentVolumeBlock),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	pod, err := importcontroller.Pod(pvc, importcontroller.PodConfig{Image: "img", Overhead: 0.06})
	require.NoError(t, err)
	c := pod.Spec.Containers[0]
	assert.Equal(t, []corev1.VolumeDevice{{Name: "cdi-data-vol", DevicePath: importer.BlockPath}}, c.VolumeDevices, "a Block PVC is a device")
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	assert.Equal(t, map[string]string{importer.CertDir: "cdi-cert-vol",
		importer.SecretHeadersDir + "/0": "cdi-extra-headers-0", importer.SecretHeadersDir + "/1": "cdi-extra-headers-1"}, mounts)
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil {
			env[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	assert.Equal(t, map[string]string{importer.EnvSource: "http", importer.EnvEndpoint: "https://x/d.img", importer.EnvChecksum: "",
		importer.EnvImageSize: "1073741824", importer.EnvOverhead: "0.06", importer.EnvOwnerUID: "uid", importer.EnvExtraHeaders: `["A: b"]`,
		importer.EnvAccessKey: "auth/accessKeyId", importer.EnvSecretKey: "auth/secretKey"}, env)
	assert.True(t, metav1.IsControlledBy(pod, pvc))
	assert.Equal(t, corev1.RestartPolicyOnFailure, pod.Spec.RestartPolicy)

	// Once the importer asked for scratch space.
	pvc.Annotations[cdiv1.AnnRequiresScratch] = "true"
	pod, err = importcontroller.Pod(pvc, importcontroller.PodConfig{Image: "img", Overhead: 0.06})
	require.NoError(t, err)
	c = pod.Spec.Containers[0]
	assert.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: "cdi-scratch-vol", MountPath: importer.ScratchDir})
	assert.Contains(t, pod.Spec.Volumes, corev1.Volume{Name: "cdi-scratch-vol", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "disk-scratch"}}})
	assert.Contains(t, c.Env, corev1.EnvVar{Name: importer.EnvScratchDir, Value: importer.ScratchDir})

	pvc.Annotations[cdiv1.AnnSecretExtraHeaders] = "not json"
	_, err = importcontroller.Pod(pvc, importcontroller.PodConfig{})
	require.Error(t, err)
}

func TestAnnotations(t *testing.T) {
	failed := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "GET u: HTTP 404 Not Found"}}
	for _, tc := range []struct {
		name                                  string
		pod                                   corev1.PodStatus
		phase, restarts, running, reason, msg string
	}{
		{"pending", corev1.PodStatus{Phase: corev1.PodPending}, "Pending", "0", "false", "Pending", ""},
		{"running", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "importer",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}, "Running", "0", "true", "", ""},
		{"back-off", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "importer", RestartCount: 3,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: failed}}},
			"Running", "3", "false", "Error", "GET u: HTTP 404 Not Found"},
		{"retrying", corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "importer", RestartCount: 4,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, LastTerminationState: failed}}},
			"Running", "4", "true", "", "GET u: HTTP 404 Not Found"},
		{"done", corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "importer",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", Message: "Import Complete"}}}}},
			"Succeeded", "0", "false", "Completed", "Import Complete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := importcontroller.Annotations(&corev1.Pod{Status: tc.pod})
			assert.Equal(t, []string{tc.phase, tc.restarts, tc.running, tc.reason, tc.msg}, []string{a[cdiv1.AnnPodPhase], a[cdiv1.AnnPodRestarts],
				a[cdiv1.AnnRunningCondition], a[cdiv1.AnnRunningConditionReason], a[cdiv1.AnnRunningConditionMessage]})
		})
	}
}

// The importer's request for scratch space is its termination message,
// upstream's JSON; any other message is not one.
func TestScratchRequired(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		want      bool
	}{
		{"asked", importer.ScratchRequiredMessage, true},
		{"done", "Import Complete", false},
		{"upstream's completion", `{"scratchSpaceRequired":false,"message":"Import Complete"}`, false},
		{"an error", "GET u: HTTP 404 Not Found", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "importer",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: tc.msg}}}}}}
			assert.Equal(t, tc.want, importcontroller.ScratchRequired(pod))
		})
	}
	assert.False(t, importcontroller.ScratchRequired(&corev1.Pod{}), "still running")
}

// Every importer pod passes the restricted PodSecurity level, running as
// user 107 with the claim's files group 107's (fsGroup): a Filesystem or
// Block claim, with scratch space, and a registry import whose importer
// runs in the user's image.
func TestPodsAreRestricted(t *testing.T) {
	http := func(mode corev1.PersistentVolumeMode, scratch bool) *corev1.PersistentVolumeClaim {
		pvc := registryPVC("", "https://x/d.qcow2")
		pvc.Annotations[cdiv1.AnnSource] = "http"
		pvc.Spec.VolumeMode = ptr.To(mode)
		if scratch {
			pvc.Annotations[cdiv1.AnnRequiresScratch] = "true"
		}
		return pvc
	}
	for name, pvc := range map[string]*corev1.PersistentVolumeClaim{
		"http filesystem":     http(corev1.PersistentVolumeFilesystem, false),
		"http block, scratch": http(corev1.PersistentVolumeBlock, true),
		"registry pod pull":   registryPVC("pod", "docker://r:5000/guest:v1"),
		"registry node pull":  registryPVC("node", "docker://r:5000/guest:v1"),
	} {
		t.Run(name, func(t *testing.T) {
			pod, err := importcontroller.Pod(pvc, importcontroller.PodConfig{Image: "img"})
			require.NoError(t, err)
			podsecuritytest.RequireRestricted(t, pod)
			sc := pod.Spec.SecurityContext
			assert.Equal(t, int64(107), *sc.RunAsUser)
			assert.Equal(t, int64(107), *sc.RunAsGroup)
			assert.Equal(t, int64(107), *sc.FSGroup, "the claim's files are the group's")
		})
	}
}
