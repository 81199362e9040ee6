package hostpath

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// startEnvtest runs a real kube-apiserver and etcd (KUBEBUILDER_ASSETS, or
// what hack/cluster/build.sh envtest leaves in the cache) with the
// provisioner of driver d; there is no PV controller: the test plays it.
func startEnvtest(t *testing.T, d *Driver) client.Client {
	t.Helper()
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "kubevmm", "k8s", "bin")
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		t.Skipf("no kube-apiserver in %s (KUBEBUILDER_ASSETS): build it with `hack/cluster/build.sh envtest`", dir)
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	env := &envtest.Environment{BinaryAssetsDirectory: dir, ControlPlaneStartTimeout: 3 * time.Minute}
	cfg, err := env.Start()
	require.NoError(t, err)
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	require.NoError(t, err)
	// Capacity: published on each volume made or deleted, and hourly
	// (never within a test: what it shows comes from the triggers).
	p := &Provisioner{Client: mgr.GetClient(), Driver: d, Recorder: mgr.GetEventRecorder("hostpath-provisioner"),
		Capacity: &Capacity{Client: mgr.GetClient(), Driver: d, Namespace: "default", Interval: time.Hour}}
	require.NoError(t, p.SetupWithManager(mgr))
	require.NoError(t, mgr.Add(p.Capacity))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// waitFor polls until cond holds, with a generous upper bound: slowness is
// not a failure, a condition that never holds is.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waiting for %s: never happened", what)
}

func claim(name, node string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Annotations: map[string]string{AnnSelectedNode: node, AnnStorageProvisioner: DriverName}},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("hostpath-csi"), VolumeMode: &mode,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}}},
	}
}

// TestProvisionerEnvtest: a claim the scheduler put on this node gets a
// volume in the pool and a PV bound to it; another node's claim is left to
// that node; a bound claim asking for more grows its volume; a released
// volume is deleted, from the pool and the API.
func TestProvisionerEnvtest(t *testing.T) {
	d, pool := newDriver(t)
	k := startEnvtest(t, d)
	ctx := context.Background()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	require.NoError(t, k.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-csi"}, Provisioner: DriverName,
		Parameters: map[string]string{StoragePoolParameter: "local"}, VolumeBindingMode: &wffc, AllowVolumeExpansion: ptr.To(true)}))

	// Another node's first: the claims are reconciled in order, so when
	// this node's has its volume, the other's was seen and left.
	other := claim("elsewhere", "node-b", corev1.PersistentVolumeFilesystem)
	require.NoError(t, k.Create(ctx, other))
	mine := claim("here", "node-a", corev1.PersistentVolumeBlock)
	require.NoError(t, k.Create(ctx, mine))
	pv := &corev1.PersistentVolume{}
	waitFor(t, "the claim's PV", func() bool { return k.Get(ctx, client.ObjectKey{Name: "pvc-" + string(mine.UID)}, pv) == nil })
	err := k.Get(ctx, client.ObjectKey{Name: "pvc-" + string(other.UID)}, &corev1.PersistentVolume{})
	assert.True(t, apierrors.IsNotFound(err), "no PV for another node's claim: %v", err)
	assert.NoDirExists(t, filepath.Join(pool, "csi", "pvc-"+string(other.UID)))

	assert.Equal(t, DriverName, pv.Spec.CSI.Driver)
	assert.Equal(t, pv.Name, pv.Spec.CSI.VolumeHandle)
	assert.Equal(t, mine.UID, pv.Spec.ClaimRef.UID)
	assert.Equal(t, corev1.PersistentVolumeBlock, *pv.Spec.VolumeMode)
	assert.Equal(t, corev1.PersistentVolumeReclaimDelete, pv.Spec.PersistentVolumeReclaimPolicy)
	assert.Equal(t, "hostpath-csi", pv.Spec.StorageClassName)
	assert.Equal(t, "node-a", volumeNode(pv))
	q := pv.Spec.Capacity[corev1.ResourceStorage]
	assert.Equal(t, int64(16<<20), q.Value())
	fi, err := os.Stat(filepath.Join(pool, "csi", pv.Name))
	require.NoError(t, err)
	assert.Equal(t, int64(16<<20), fi.Size())

	// Bound (the PV controller's part), then asked to grow.
	mine.Spec.VolumeName = pv.Name
	require.NoError(t, k.Update(ctx, mine))
	mine.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: mine.Spec.AccessModes,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("16Mi")}}
	require.NoError(t, k.Status().Update(ctx, mine))
	mine.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("32Mi")
	require.NoError(t, k.Update(ctx, mine))
	waitFor(t, "the claim's new capacity", func() bool {
		var got corev1.PersistentVolumeClaim
		require.NoError(t, k.Get(ctx, client.ObjectKeyFromObject(mine), &got))
		q := got.Status.Capacity[corev1.ResourceStorage]
		return q.Value() == 32<<20 && len(got.Status.AllocatedResourceStatuses) == 0
	})
	require.NoError(t, k.Get(ctx, client.ObjectKey{Name: pv.Name}, pv))
	q = pv.Spec.Capacity[corev1.ResourceStorage]
	assert.Equal(t, int64(32<<20), q.Value(), "the PV's capacity")
	fi, err = os.Stat(filepath.Join(pool, "csi", pv.Name))
	require.NoError(t, err)
	assert.Equal(t, int64(32<<20), fi.Size(), "the volume's file grew")

	// A pass that read a stale claim and volume from its cache marks the
	// claim resizing again after the resize is done: the mark is cleared.
	require.NoError(t, k.Get(ctx, client.ObjectKeyFromObject(mine), mine))
	mine.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
		corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInProgress}
	require.NoError(t, k.Status().Update(ctx, mine))
	waitFor(t, "the stale resize mark cleared", func() bool {
		var got corev1.PersistentVolumeClaim
		require.NoError(t, k.Get(ctx, client.ObjectKeyFromObject(mine), &got))
		q := got.Status.Capacity[corev1.ResourceStorage]
		return q.Value() == 32<<20 && len(got.Status.AllocatedResourceStatuses) == 0
	})

	// The PV controller's part: the claim is gone, the volume released.
	pv.Status.Phase = corev1.VolumeReleased
	require.NoError(t, k.Status().Update(ctx, pv))
	// Deleted: the API server's PV-protection finalizer then keeps it
	// until kube-controller-manager (absent here) removes it.
	waitFor(t, "the released PV's deletion", func() bool {
		var got corev1.PersistentVolume
		err := k.Get(ctx, client.ObjectKey{Name: pv.Name}, &got)
		return apierrors.IsNotFound(err) || (err == nil && got.DeletionTimestamp != nil)
	})
	_, err = os.Lstat(filepath.Join(pool, "csi", pv.Name))
	assert.ErrorIs(t, err, os.ErrNotExist, "the volume is removed from the pool")

	t.Run("sharedOnNode", func(t *testing.T) { testSharedOnNode(t, k, pool) })
	t.Run("capacity", func(t *testing.T) { testCapacity(t, k) })
	t.Run("missingPool", func(t *testing.T) { testMissingPool(t, k) })
}

// capacityOf is the published capacity of class on node-a, -1 without one.
func capacityOf(t *testing.T, k client.Client, class string) int64 {
	var c storagev1.CSIStorageCapacity
	if err := k.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: CapacityName("node-a", class)}, &c); err != nil {
		require.True(t, apierrors.IsNotFound(err), "%v", err)
		return -1
	}
	assert.Equal(t, class, c.StorageClassName)
	assert.Equal(t, map[string]string{TopologyKey: "node-a"}, c.NodeTopology.MatchLabels)
	return c.Capacity.Value()
}

// The classes of pool local each have this node's capacity object; a
// Block claim's volume takes its size from it (its file is sparse, the
// space promised), and gives it back when deleted. (Part of
// TestProvisionerEnvtest.)
func testCapacity(t *testing.T, k client.Client) {
	ctx := context.Background()
	var before int64
	waitFor(t, "the class's capacity", func() bool { before = capacityOf(t, k, "hostpath-csi"); return before > 0 })
	// Half of what is free: far more than anything else on this machine
	// writes meanwhile, so the direction is the volume's.
	size := before / 2 &^ 4095
	c := claim("big", "node-a", corev1.PersistentVolumeBlock)
	c.Spec.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(size, resource.BinarySI)
	require.NoError(t, k.Create(ctx, c))
	pv := &corev1.PersistentVolume{}
	waitFor(t, "the claim's PV", func() bool { return k.Get(ctx, client.ObjectKey{Name: "pvc-" + string(c.UID)}, pv) == nil })
	var during int64
	waitFor(t, "the capacity to shrink", func() bool { during = capacityOf(t, k, "hostpath-csi"); return during < before-size/2 })
	assert.Positive(t, capacityOf(t, k, "hostpath-csi-shared"), "the shared class, of the same pool")

	pv.Status.Phase = corev1.VolumeReleased
	require.NoError(t, k.Status().Update(ctx, pv))
	waitFor(t, "the capacity to grow back", func() bool { return capacityOf(t, k, "hostpath-csi") > during+size/2 })
}

// A class naming a pool no node has: its claim gets an event naming the
// pool, no volume, and the class no capacity object (the scheduler places
// none of its pods). (Part of TestProvisionerEnvtest.)
func testMissingPool(t *testing.T, k client.Client) {
	ctx := context.Background()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	c := claim("on-ssd", "", corev1.PersistentVolumeFilesystem)
	c.Annotations = nil // no node selected: the scheduler finds none
	c.Spec.StorageClassName = ptr.To("hostpath-ssd")
	require.NoError(t, k.Create(ctx, c))
	// The class after its claim: the provisioner first sees a claim of no
	// class it knows, then must come back to it when the class appears.
	// (Created the other way round, as one manifest does, the claim's
	// event can still beat the class's into the provisioner's cache: CI
	// once saw that.)
	require.NoError(t, k.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-ssd"}, Provisioner: DriverName,
		Parameters: map[string]string{StoragePoolParameter: "ssd"}, VolumeBindingMode: &wffc}))
	waitFor(t, "the missing pool's event", func() bool {
		var evs corev1.EventList
		require.NoError(t, k.List(ctx, &evs, client.InNamespace("default")))
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == c.Name && e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, `storage pool "ssd" is not on node node-a`) {
				return true
			}
		}
		return false
	})
	assert.Equal(t, int64(-1), capacityOf(t, k, "hostpath-ssd"))
	err := k.Get(ctx, client.ObjectKey{Name: "pvc-" + string(c.UID)}, &corev1.PersistentVolume{})
	assert.True(t, apierrors.IsNotFound(err), "no PV: %v", err)
}

// An RWX claim gets a volume from a class with sharedOnNode: "true" only:
// its PV is ReadWriteMany, pinned to the node like any other, with the
// parameter in its context for the node's publish. Of the default class
// it gets no volume, and an event says why. (Part of
// TestProvisionerEnvtest: one envtest per process.)
func testSharedOnNode(t *testing.T, k client.Client, pool string) {
	ctx := context.Background()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	require.NoError(t, k.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-csi-shared"}, Provisioner: DriverName,
		Parameters: map[string]string{StoragePoolParameter: "local", SharedOnNodeParameter: "true"}, VolumeBindingMode: &wffc}))

	refused := claim("rwx-default", "node-a", corev1.PersistentVolumeFilesystem)
	refused.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	require.NoError(t, k.Create(ctx, refused))
	shared := claim("rwx-shared", "node-a", corev1.PersistentVolumeBlock)
	shared.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}
	shared.Spec.StorageClassName = ptr.To("hostpath-csi-shared")
	require.NoError(t, k.Create(ctx, shared))

	pv := &corev1.PersistentVolume{}
	waitFor(t, "the shared claim's PV", func() bool { return k.Get(ctx, client.ObjectKey{Name: "pvc-" + string(shared.UID)}, pv) == nil })
	assert.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, pv.Spec.AccessModes)
	assert.Equal(t, "node-a", volumeNode(pv))
	assert.Equal(t, "true", pv.Spec.CSI.VolumeAttributes[SharedOnNodeParameter])
	fi, err := os.Stat(filepath.Join(pool, "csi", pv.Name))
	require.NoError(t, err)
	assert.Equal(t, int64(16<<20), fi.Size())

	waitFor(t, "the refusal's event", func() bool {
		var evs corev1.EventList
		require.NoError(t, k.List(ctx, &evs, client.InNamespace("default")))
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == refused.Name && strings.Contains(e.Message, "hostpath volumes are on one node") {
				return true
			}
		}
		return false
	})
	err = k.Get(ctx, client.ObjectKey{Name: "pvc-" + string(refused.UID)}, &corev1.PersistentVolume{})
	assert.True(t, apierrors.IsNotFound(err), "no PV for an RWX claim of the default class: %v", err)
}
