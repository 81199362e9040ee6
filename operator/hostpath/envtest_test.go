package hostpath_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/conditions"
	"github.com/kubevmm/kubevmm/api/hostpathprovisioner/crd"
	hppv1 "github.com/kubevmm/kubevmm/api/hostpathprovisioner/v1beta1"
	"github.com/kubevmm/kubevmm/operator/hostpath"
	"github.com/kubevmm/kubevmm/operator/hostpath/install"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The operator against a real API server (no kubelet and no garbage
// collector: the test reports the DaemonSet ready itself, and checks the
// owner references the collector follows), running as its service account
// with the RBAC it is deployed with: the CR deploys the driver with its
// pools, owned, and becomes Available with its pools Ready; edits and
// deletions are reverted; what kubevmm does not implement is refused by
// name; the API server refuses both or neither of storagePools and
// pathConfig, naming them; a second CR is refused while the first
// deploys the driver.
func TestHostPathProvisionerEnvtest(t *testing.T) {
	hppCRD, err := crd.HostPathProvisioner()
	require.NoError(t, err)
	cfg, k8s := apiserver.Start(t, apiserver.WithCRDs(hppCRD))
	ctx := context.Background()
	s := k8s.Scheme()
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	require.NoError(t, hppv1.AddToScheme(s))

	ops, err := hostpath.Operator(hostpath.OperatorConfig{ImageRegistry: "localhost/kubevmm", ImageTag: "envtest", PullPolicy: corev1.PullNever, KubeletRoot: "/var/lib/kubelet"})
	require.NoError(t, err)
	for _, o := range ops {
		if _, ok := o.(*apiextensionsv1.CustomResourceDefinition); !ok { // installed by Start
			require.NoError(t, k8s.Create(ctx, o))
		}
	}
	opCfg := rest.CopyConfig(cfg)
	opCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + install.Namespace + ":" + hostpath.OperatorName}
	mgr := apiserver.NewManager(t, opCfg, ctrl.Options{Scheme: s, Cache: kit.OwnNamespaceCache(install.Namespace)})
	r := &hostpath.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: hostpath.Options{Version: "envtest",
		Image: "localhost/kubevmm/hostpath-provisioner:envtest", PullPolicy: corev1.PullIfNotPresent, KubeletRoot: "/var/lib/kubelet"}}
	require.NoError(t, r.SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	get := func(name string) *hppv1.HostPathProvisioner {
		out := &hppv1.HostPathProvisioner{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: name}, out))
		return out
	}
	patch := func(name, p string) {
		require.NoError(t, k8s.Patch(ctx, &hppv1.HostPathProvisioner{ObjectMeta: metav1.ObjectMeta{Name: name}},
			client.RawPatch("application/merge-patch+json", []byte(p))))
	}
	waitCond := func(name string, ct hppv1.ConditionType, prefix string) *hppv1.HostPathProvisioner {
		var cur *hppv1.HostPathProvisioner
		apiserver.WaitFor(t, fmt.Sprintf("%s %s %s", name, ct, prefix), func() (bool, string) {
			cur = get(name)
			c := "none"
			if cond := conditions.Find(cur.Status.Conditions, ct); cond != nil {
				c = string(cond.Status) + "/" + cond.Reason + ": " + cond.Message
			}
			return strings.HasPrefix(c, prefix), c
		})
		return cur
	}
	ds := func() *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.Name}, d))
		return d
	}

	t.Run("storagePools xor pathConfig", func(t *testing.T) {
		for spec, want := range map[string]string{
			`{}`: "exactly one of spec.storagePools and spec.pathConfig must be set",
			`{"pathConfig":{"path":"/a"},"storagePools":[{"name":"local","path":"/b"}]}`: "exactly one of spec.storagePools and spec.pathConfig must be set",
			`{"storagePools":[{"name":"local","path":"relative"}]}`:                      "spec.storagePools[0].path",
		} {
			u := &unstructured.Unstructured{}
			require.NoError(t, u.UnmarshalJSON([]byte(`{"apiVersion":"hostpathprovisioner.kubevirt.io/v1beta1","kind":"HostPathProvisioner","metadata":{"name":"bad"},"spec":`+spec+`}`)))
			err := k8s.Create(ctx, u)
			require.Error(t, err, spec)
			assert.Contains(t, err.Error(), want, spec)
		}
	})

	h := &hppv1.HostPathProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-provisioner"}, Spec: hppv1.HostPathProvisionerSpec{
		ImagePullPolicy: corev1.PullNever,
		StoragePools:    []hppv1.StoragePool{{Name: "local", Path: "/var/hpvolumes"}, {Name: "ssd", Path: "/mnt/ssd"}}}}
	require.NoError(t, k8s.Create(ctx, h))
	cur := waitCond(h.Name, hppv1.ConditionProgressing, "True/Deploying")
	assert.Equal(t, []hppv1.StoragePoolStatus{{Name: "local", Phase: hppv1.StoragePoolPending}, {Name: "ssd", Phase: hppv1.StoragePoolPending}}, cur.Status.StoragePoolStatuses)
	d := ds()
	assert.Contains(t, d.Spec.Template.Spec.Containers[0].Args, "--storage-pool=ssd=/mnt/ssd")
	assert.Equal(t, corev1.PullNever, d.Spec.Template.Spec.Containers[0].ImagePullPolicy)
	for _, obj := range []client.Object{d, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt.io.hostpath-provisioner"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: install.Name}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: install.Namespace, Name: install.Name}}} {
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj))
		assert.True(t, metav1.IsControlledBy(obj, cur), "%T %s is the CR's: uninstalling removes it", obj, obj.GetName())
	}

	ready := func() {
		d := ds()
		d.Status = appsv1.DaemonSetStatus{ObservedGeneration: d.Generation, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
			UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1}
		require.NoError(t, k8s.Status().Update(ctx, d))
	}
	ready()
	cur = waitCond(h.Name, hppv1.ConditionAvailable, "True/Complete")
	assert.Equal(t, "envtest", cur.Status.ObservedVersion)
	assert.Equal(t, []hppv1.StoragePoolStatus{{Name: "local", Phase: hppv1.StoragePoolReady}, {Name: "ssd", Phase: hppv1.StoragePoolReady}}, cur.Status.StoragePoolStatuses)

	t.Run("the driver's RBAC", func(t *testing.T) {
		// What the driver does, as its service account: the claims, volumes
		// and classes everywhere, its capacity objects in its namespace
		// (a cache of that namespace only) and its DaemonSet, their owner.
		drvCfg := rest.CopyConfig(cfg)
		drvCfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + install.Namespace + ":" + install.Name}
		drv, err := client.New(drvCfg, client.Options{Scheme: s})
		require.NoError(t, err)
		require.NoError(t, drv.List(ctx, &corev1.PersistentVolumeClaimList{}))
		require.NoError(t, drv.List(ctx, &corev1.PersistentVolumeList{}))
		require.NoError(t, drv.List(ctx, &storagev1.StorageClassList{}))
		require.NoError(t, drv.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.Name}, &appsv1.DaemonSet{}))
		c := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Namespace: install.Namespace, Name: "hpp-rbac"}, StorageClassName: "hostpath-csi"}
		require.NoError(t, drv.Create(ctx, c))
		require.NoError(t, drv.List(ctx, &storagev1.CSIStorageCapacityList{}, client.InNamespace(install.Namespace)))
		require.NoError(t, drv.Update(ctx, c))
		require.NoError(t, drv.Delete(ctx, c))
	})

	t.Run("drift is reverted", func(t *testing.T) {
		require.NoError(t, k8s.Patch(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: install.Namespace, Name: install.Name}},
			client.RawPatch("application/strategic-merge-patch+json",
				[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"hostpath-provisioner","image":"elsewhere/hpp:old"}]}}}}`)),
			client.FieldOwner("someone")))
		require.NoError(t, k8s.Delete(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt.io.hostpath-provisioner"}}))
		apiserver.WaitFor(t, "the image and the CSIDriver back", func() (bool, string) {
			img := ds().Spec.Template.Spec.Containers[0].Image
			derr := k8s.Get(ctx, client.ObjectKey{Name: "kubevirt.io.hostpath-provisioner"}, &storagev1.CSIDriver{})
			return img == "localhost/kubevmm/hostpath-provisioner:envtest" && derr == nil, fmt.Sprintf("image %s, CSIDriver: %v", img, derr)
		})
	})

	t.Run("a pool's change reaches the driver", func(t *testing.T) {
		patch(h.Name, `{"spec":{"storagePools":[{"name":"local","path":"/var/hpvolumes"}]}}`)
		apiserver.WaitFor(t, "pool ssd gone from the DaemonSet", func() (bool, string) {
			args := ds().Spec.Template.Spec.Containers[0].Args
			return !strings.Contains(strings.Join(args, " "), "ssd"), strings.Join(args, " ")
		})
		apiserver.WaitFor(t, "pool ssd gone from the status", func() (bool, string) {
			st := get(h.Name).Status.StoragePoolStatuses
			return len(st) == 1 && st[0].Name == "local", fmt.Sprint(st)
		})
		waitCond(h.Name, hppv1.ConditionProgressing, "True/Deploying")
		ready()
		waitCond(h.Name, hppv1.ConditionAvailable, "True/Complete")
	})

	t.Run("what kubevmm does not implement is refused by name", func(t *testing.T) {
		patch(h.Name, `{"spec":{"storagePools":[{"name":"local","path":"/var/hpvolumes","pvcTemplate":{"storageClassName":"x"}}],"featureGates":["Snapshotting"]}}`)
		waitCond(h.Name, hppv1.ConditionDegraded,
			"True/InvalidConfiguration: not supported by kubevmm: spec.storagePools[0].pvcTemplate; spec.featureGates: kubevmm implements none of Snapshotting")
		patch(h.Name, `{"spec":{"storagePools":[{"name":"local","path":"/var/hpvolumes"}],"featureGates":null}}`)
		waitCond(h.Name, hppv1.ConditionAvailable, "True/Complete")
	})

	t.Run("one per cluster", func(t *testing.T) {
		second := &hppv1.HostPathProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "second"}, Spec: hppv1.HostPathProvisionerSpec{
			StoragePools: []hppv1.StoragePool{{Name: "other", Path: "/other"}}}}
		require.NoError(t, k8s.Create(ctx, second))
		waitCond(second.Name, hppv1.ConditionDegraded, "True/InvalidConfiguration: HostPathProvisioner hostpath-provisioner deploys the hostpath provisioner already")
		assert.NotContains(t, strings.Join(ds().Spec.Template.Spec.Containers[0].Args, " "), "other", "the first's driver is untouched")
		require.NoError(t, k8s.Delete(ctx, second))
	})
}
