package cdi_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/operator/cdi"
	"github.com/kubevmm/kubevmm/operator/cdi/install"
)

func TestDecide(t *testing.T) {
	opts := cdi.Options{Config: install.Config{ImageRegistry: "r", ImageTag: "t", PullPolicy: corev1.PullIfNotPresent}, Version: "t"}
	now := metav1.Now()
	deleted := metav1.Now()
	tests := []struct {
		name                    string
		cdi                     cdiv1.CDI
		first                   string
		unknown                 []string
		ready                   bool
		dvs                     int
		phase                   cdiv1.CDIPhase
		cond                    cdiv1.ConditionType
		reason                  string
		apply, add, rmFinalizer bool
	}{
		{name: "fresh", cdi: cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, first: "a",
			phase: cdiv1.CDIPhaseDeploying, cond: cdiv1.ConditionProgressing, reason: "DeployStarted", apply: true, add: true},
		{name: "ready", cdi: cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "a", Finalizers: []string{cdi.Finalizer}}}, first: "a", ready: true,
			phase: cdiv1.CDIPhaseDeployed, cond: cdiv1.ConditionAvailable, reason: "DeployCompleted", apply: true},
		{name: "second CDI", cdi: cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, first: "a",
			phase: cdiv1.CDIPhaseError, cond: cdiv1.ConditionDegraded, reason: "ConflictingCDI"},
		{name: "unknown field", cdi: cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, first: "a", unknown: []string{"infra"},
			phase: cdiv1.CDIPhaseError, cond: cdiv1.ConditionDegraded, reason: "InvalidConfiguration"},
		{name: "RemoveWorkloads", cdi: cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "a"},
			Spec: cdiv1.CDISpec{UninstallStrategy: ptr.To(cdiv1.UninstallRemoveWorkloads)}}, first: "a",
			phase: cdiv1.CDIPhaseError, cond: cdiv1.ConditionDegraded, reason: "InvalidConfiguration"},
		{name: "deleted with DataVolumes", cdi: cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "a", DeletionTimestamp: &deleted,
			Finalizers: []string{cdi.Finalizer}}}, first: "a", dvs: 2,
			phase: cdiv1.CDIPhaseDeleting, cond: cdiv1.ConditionDegraded, reason: "UninstallBlocked"},
		{name: "deleted without", cdi: cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "a", DeletionTimestamp: &deleted,
			Finalizers: []string{cdi.Finalizer}}}, first: "a", phase: cdiv1.CDIPhaseDeleting, rmFinalizer: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := cdi.Decide(cdi.Observed{CDI: &tc.cdi, First: tc.first, UnknownFields: tc.unknown,
				Ready: map[string]bool{install.Controller: tc.ready, install.APIServer: tc.ready, install.UploadProxy: tc.ready}, DataVolumes: tc.dvs}, opts, now)
			assert.Equal(t, tc.phase, d.Status.Phase)
			if tc.cond != "" {
				c := cdiv1.FindCondition(d.Status.Conditions, tc.cond)
				require.NotNil(t, c)
				assert.Equal(t, corev1.ConditionTrue, c.Status)
				assert.Equal(t, tc.reason, c.Reason, c.Message)
			}
			assert.Equal(t, tc.apply, len(d.Apply) > 0)
			assert.Equal(t, tc.add, d.AddFinalizer)
			assert.Equal(t, tc.rmFinalizer, d.RemoveFinalizer)
		})
	}
}

func TestConfigStatus(t *testing.T) {
	classes := []storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}}},
	}
	st := cdi.ConfigStatus(cdiv1.CDIConfigSpec{}, classes)
	assert.Nil(t, st.UploadProxyURL)
	assert.Equal(t, "b", st.ScratchSpaceStorageClass, "the default class")
	assert.Equal(t, map[string]cdiv1.Percent{"a": "0.06", "b": "0.06"}, st.FilesystemOverhead.StorageClass)
	st = cdi.ConfigStatus(cdiv1.CDIConfigSpec{UploadProxyURLOverride: ptr.To("https://u"), ScratchSpaceStorageClass: ptr.To("a"),
		FilesystemOverhead: &cdiv1.FilesystemOverhead{Global: "0.1", StorageClass: map[string]cdiv1.Percent{"a": "0.2"}}}, classes)
	assert.Equal(t, "https://u", *st.UploadProxyURL)
	assert.Equal(t, "a", st.ScratchSpaceStorageClass)
	assert.Equal(t, cdiv1.Percent("0.1"), st.FilesystemOverhead.Global)
	assert.Equal(t, map[string]cdiv1.Percent{"a": "0.2", "b": "0.1"}, st.FilesystemOverhead.StorageClass)
}

func TestProfileStatus(t *testing.T) {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Provisioner: "unknown.example.org"}
	assert.Empty(t, cdi.ProfileStatus(sc, nil).ClaimPropertySets, "nothing known of the provisioner")
	sc.Provisioner = "kubevirt.io.hostpath-provisioner"
	assert.Len(t, cdi.ProfileStatus(sc, nil).ClaimPropertySets, 2)
	user := []cdiv1.ClaimPropertySet{{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, VolumeMode: ptr.To(corev1.PersistentVolumeBlock)}}
	assert.Equal(t, user, cdi.ProfileStatus(sc, &cdiv1.StorageProfile{Spec: cdiv1.StorageProfileSpec{ClaimPropertySets: user}}).ClaimPropertySets)
}
