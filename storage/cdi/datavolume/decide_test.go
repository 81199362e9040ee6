package datavolume_test

import (
	"bufio"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/datavolume"
)

var hostpath = datavolume.Env{
	Classes: []storagev1.StorageClass{{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-csi",
		Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}}, Provisioner: "kubevirt.io.hostpath-provisioner"}},
	Profiles: map[string]*cdiv1.StorageProfile{"hostpath-csi": {Status: cdiv1.StorageProfileStatus{ClaimPropertySets: []cdiv1.ClaimPropertySet{
		{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem)},
		{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock)}}}}},
}

func storageDV(size string, mode *corev1.PersistentVolumeMode) *cdiv1.DataVolume {
	return &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dv", UID: "u"}, Spec: cdiv1.DataVolumeSpec{
		Source: &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: "http://x/d.qcow2", ExtraHeaders: []string{"A: b"}, SecretRef: "s"}},
		Storage: &cdiv1.StorageSpec{VolumeMode: mode, Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}}
}

func TestClaim(t *testing.T) {
	pvc, err := datavolume.Claim(storageDV("1Gi", nil), hostpath)
	require.NoError(t, err)
	assert.Equal(t, "hostpath-csi", *pvc.Spec.StorageClassName, "the default class")
	assert.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, pvc.Spec.AccessModes, "the profile's")
	assert.Equal(t, corev1.PersistentVolumeFilesystem, *pvc.Spec.VolumeMode, "the profile's first")
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	assert.Equal(t, int64(1090*1024*1024), size.Value(), "1024 MiB / 0.94, rounded up to a MiB")
	assert.Equal(t, map[string]string{cdiv1.AnnContentType: "kubevirt", cdiv1.AnnSource: "http", cdiv1.AnnEndpoint: "http://x/d.qcow2",
		cdiv1.AnnExtraHeaders: `["A: b"]`, cdiv1.AnnSecret: "s"}, pvc.Annotations)
	assert.True(t, metav1.IsControlledBy(pvc, storageDV("1Gi", nil)))

	pvc, err = datavolume.Claim(storageDV("1Gi", ptr.To(corev1.PersistentVolumeBlock)), hostpath)
	require.NoError(t, err)
	size = pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	assert.Equal(t, int64(1<<30), size.Value(), "no overhead on a Block claim")

	dv := storageDV("1Gi", nil)
	dv.Spec.Source = &cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}}
	pvc, err = datavolume.Claim(dv, hostpath)
	require.NoError(t, err)
	assert.Contains(t, pvc.Annotations, cdiv1.AnnUploadRequest, "the upload controller's")
	assert.NotContains(t, pvc.Annotations, cdiv1.AnnSource)

	dv.Spec.Source = &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}
	dv.Spec.Storage, dv.Spec.PVC = nil, &corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("500Mi")}}}
	pvc, err = datavolume.Claim(dv, hostpath)
	require.NoError(t, err)
	assert.Equal(t, *dv.Spec.PVC, pvc.Spec, "pvc is taken as it is")
	assert.Equal(t, "none", pvc.Annotations[cdiv1.AnnSource])

	dv.Spec.Source = &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "golden"}}
	pvc, err = datavolume.Claim(dv, hostpath)
	require.NoError(t, err)
	assert.Equal(t, "ns/golden", pvc.Annotations[cdiv1.AnnCloneRequest], "a clone's source, in the DataVolume's namespace by default")
	assert.Contains(t, pvc.Annotations, cdiv1.AnnUploadRequest, "its upload server takes the image")
	assert.NotContains(t, pvc.Annotations, cdiv1.AnnSource)

	for _, tc := range []struct {
		name string
		dv   *cdiv1.DataVolume
		env  datavolume.Env
		want string
	}{
		{"negative", storageDV("-1Gi", nil), hostpath, "spec.storage.resources.requests.storage must be positive, not -1Gi"},
		{"zero", storageDV("0", nil), hostpath, "spec.storage.resources.requests.storage must be positive, not 0"},
		{"no default class", storageDV("1Gi", nil), datavolume.Env{}, "spec.storage.storageClassName is unset and the cluster has no default StorageClass"},
		{"no profile", storageDV("1Gi", nil), datavolume.Env{Classes: hostpath.Classes}, "spec.storage: no accessModes given and StorageProfile hostpath-csi names none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := datavolume.Claim(tc.dv, tc.env)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

func TestStatus(t *testing.T) {
	now := metav1.Now()
	dv := storageDV("1Gi", nil)
	pvc := func(phase corev1.PersistentVolumeClaimPhase, ann map[string]string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "dv", Annotations: ann}, Status: corev1.PersistentVolumeClaimStatus{Phase: phase}}
	}
	failing := map[string]string{cdiv1.AnnSource: "http", cdiv1.AnnPodPhase: "Running", cdiv1.AnnPodRestarts: "3", cdiv1.AnnRunningCondition: "false",
		cdiv1.AnnRunningConditionReason: "Error", cdiv1.AnnRunningConditionMessage: "GET http://x: HTTP 404 Not Found"}
	for _, tc := range []struct {
		name     string
		seen     datavolume.Seen
		phase    cdiv1.DataVolumePhase
		progress cdiv1.DataVolumeProgress
		restarts int32
		running  string
	}{
		{"no PVC", datavolume.Seen{}, cdiv1.Pending, "N/A", 0, ""},
		{"invalid", datavolume.Seen{Invalid: "spec.storage...: must be positive"}, cdiv1.Failed, "N/A", 0, "ErrClaimNotValid"},
		{"foreign", datavolume.Seen{Claim: pvc(corev1.ClaimBound, nil), Foreign: true}, cdiv1.Pending, "N/A", 0, "ErrResourceExists"},
		{"pending", datavolume.Seen{Claim: pvc(corev1.ClaimPending, map[string]string{cdiv1.AnnSource: "http"})}, cdiv1.Pending, "N/A", 0, ""},
		{"bound", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnSource: "http"})}, cdiv1.PVCBound, "N/A", 0, ""},
		{"scheduled", datavolume.Seen{Claim: pvc(corev1.ClaimPending, map[string]string{cdiv1.AnnSource: "http", cdiv1.AnnPodPhase: "Pending"})}, cdiv1.ImportScheduled, "N/A", 0, ""},
		{"running", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnSource: "http", cdiv1.AnnPodPhase: "Running",
			cdiv1.AnnRunningCondition: "true"}), Progress: "45.50%"}, cdiv1.ImportInProgress, "45.50%", 0, ""},
		{"failing", datavolume.Seen{Claim: pvc(corev1.ClaimBound, failing)}, cdiv1.ImportInProgress, "N/A", 3, "Error: GET http://x: HTTP 404 Not Found"},
		{"done", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnSource: "http", cdiv1.AnnPodPhase: "Succeeded",
			cdiv1.AnnRunningConditionReason: "Completed", cdiv1.AnnRunningConditionMessage: "Import Complete"})}, cdiv1.Succeeded, "100.0%", 0, "Completed: Import Complete"},
		{"upload scheduled", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnPodPhase: "Running"})}, cdiv1.UploadScheduled, "N/A", 0, ""},
		{"upload ready", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnPodPhase: "Running",
			cdiv1.AnnPodReady: "true"})}, cdiv1.UploadReady, "N/A", 0, ""},
		{"uploaded", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnPodPhase: "Succeeded"})}, cdiv1.Succeeded, "100.0%", 0, ""},
		{"waiting for a DataSource", datavolume.Seen{Waiting: &datavolume.Waiting{Reason: datavolume.ReasonDataSourceNotReady, Message: "DataSource golden/fedora is not ready"}},
			cdiv1.Pending, "N/A", 0, "DataSourceNotReady: DataSource golden/fedora is not ready"},
		{"clone target, server not ready", datavolume.Seen{Claim: pvc(corev1.ClaimPending, map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnCloneRequest: "src/disk",
			cdiv1.AnnPodPhase: "Running"})}, cdiv1.CloneScheduled, "N/A", 0, ""},
		{"clone target, server ready", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnCloneRequest: "src/disk",
			cdiv1.AnnPodPhase: "Running", cdiv1.AnnPodReady: "true"})}, cdiv1.CloneScheduled, "N/A", 0, ""},
		{"cloning", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnCloneRequest: "src/disk",
			cdiv1.AnnPodPhase: "Running", cdiv1.AnnPodReady: "true", cdiv1.AnnCloneSourcePhase: "Running"}), Progress: "12.00%"}, cdiv1.CloneInProgress, "12.00%", 0, ""},
		{"cloned", datavolume.Seen{Claim: pvc(corev1.ClaimBound, map[string]string{cdiv1.AnnUploadRequest: "", cdiv1.AnnCloneRequest: "src/disk",
			cdiv1.AnnPodPhase: "Succeeded", cdiv1.AnnCloneSourcePhase: "Succeeded"})}, cdiv1.Succeeded, "100.0%", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := datavolume.Status(dv, tc.seen, now)
			assert.Equal(t, tc.phase, st.Phase)
			assert.Equal(t, tc.progress, st.Progress)
			assert.Equal(t, tc.restarts, st.RestartCount)
			assert.Equal(t, "dv", st.ClaimName)
			run := cdiv1.FindDataVolumeCondition(st.Conditions, cdiv1.DataVolumeRunning)
			require.NotNil(t, run)
			got := run.Reason
			if run.Message != "" {
				got += ": " + run.Message
			}
			assert.True(t, strings.HasPrefix(got, tc.running), got)
			ready := cdiv1.FindDataVolumeCondition(st.Conditions, cdiv1.DataVolumeReady)
			require.NotNil(t, ready)
			assert.Equal(t, tc.phase == cdiv1.Succeeded, ready.Status == corev1.ConditionTrue)
		})
	}
}

func TestParseProgress(t *testing.T) {
	p, err := datavolume.ParseProgress(bufio.NewScanner(strings.NewReader("# HELP x\n# TYPE kubevirt_cdi_import_progress_total counter\n" +
		`kubevirt_cdi_import_progress_total{ownerUID="u"} 45.5` + "\n")))
	require.NoError(t, err)
	assert.Equal(t, cdiv1.DataVolumeProgress("45.50%"), p)
	p, err = datavolume.ParseProgress(bufio.NewScanner(strings.NewReader("other 1\n")))
	require.NoError(t, err)
	assert.Empty(t, p)
	_, err = datavolume.ParseProgress(bufio.NewScanner(strings.NewReader("kubevirt_cdi_import_progress_total 250\n")))
	require.Error(t, err)
}
