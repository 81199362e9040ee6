package datasource_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/datasource"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The controller against a real API server: a DataSource's Ready follows
// the DataVolume and PVC it names in another namespace as they come, move
// through their phases and go, each change seen without touching the
// DataSource.
func TestDataSourceEnvtest(t *testing.T) {
	cfg, k8s := apiserver.StartCDI(t)
	ctx := context.Background()
	s := k8s.Scheme()
	mgr := apiserver.NewManager(t, cfg, ctrl.Options{Scheme: s})
	require.NoError(t, (&datasource.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "golden"}}))
	ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "fedora"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "img"}}}}
	require.NoError(t, k8s.Create(ctx, ds))
	waitReady := func(status corev1.ConditionStatus, reason string) {
		t.Helper()
		got := &cdiv1.DataSource{}
		apiserver.WaitFor(t, fmt.Sprintf("Ready %s %s", status, reason), func() (bool, string) {
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(ds), got))
			c := cdiv1.FindDataSourceCondition(got.Status.Conditions, cdiv1.DataSourceReady)
			if c == nil {
				return false, "no Ready condition"
			}
			return c.Status == status && c.Reason == reason, fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		})
		require.Equal(t, ds.Spec.Source, got.Status.Source)
	}
	waitReady(corev1.ConditionFalse, datasource.ReasonNotFound)

	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "img"},
		Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}}}
	require.NoError(t, k8s.Create(ctx, dv))
	waitReady(corev1.ConditionFalse, string(cdiv1.Pending))
	setPhase := func(p cdiv1.DataVolumePhase) {
		dv.Status.Phase = p
		require.NoError(t, k8s.Status().Update(ctx, dv))
	}
	setPhase(cdiv1.ImportInProgress)
	waitReady(corev1.ConditionFalse, string(cdiv1.ImportInProgress))
	setPhase(cdiv1.Succeeded)
	waitReady(corev1.ConditionTrue, datasource.ReasonReady)

	require.NoError(t, k8s.Delete(ctx, dv))
	waitReady(corev1.ConditionFalse, datasource.ReasonNotFound)
	require.NoError(t, k8s.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "img"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}}))
	waitReady(corev1.ConditionTrue, datasource.ReasonReady)
}
