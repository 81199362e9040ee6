package upload

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// startEnvtest runs the controller on an API server; it returns an admin
// client, and the controller's own, which records what it did.
func startEnvtest(t *testing.T) (client.Client, *apiserver.Recorder) {
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
	require.NoError(t, cdiv1.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	require.NoError(t, err)
	rec := apiserver.NewRecorder(mgr.GetClient())
	r := &Reconciler{Client: rec, Namespace: "cdi", Image: "registry/cdi-uploadserver:t", PullPolicy: corev1.PullIfNotPresent,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	require.NoError(t, r.SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, mgr.Start(ctx))
	}()
	t.Cleanup(func() { cancel(); <-done })
	return mgr.GetClient(), rec
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	require.Eventually(t, f, time.Minute, 100*time.Millisecond, what)
}

// TestUploadServerLifecycle: an upload target PVC gets its server, the
// PVC follows the pod, and a finished upload removes the server. The PVC
// is written before the pod exists and not while the pod waits to be
// scheduled: kube-scheduler writes a WaitForFirstConsumer claim (its
// selected node) from its own copy while it places the pod, and a write
// of ours in between fails that with a conflict (the pod then waits out
// the scheduler's backoff).
func TestUploadServerLifecycle(t *testing.T) {
	c, rec := startEnvtest(t)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cdi"}}))
	// The claims' namespace enforces the restricted PodSecurity level: the
	// API server's admission refuses an upload pod that breaks it.
	def := &corev1.Namespace{}
	require.NoError(t, c.Get(ctx, types.NamespacedName{Name: "default"}, def))
	def.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
	require.NoError(t, c.Update(ctx, def))
	ca, err := certs.NewCA("cdi-uploadserver-ca", certs.Config{Duration: 48 * time.Hour, RenewBefore: time.Hour}, time.Now())
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: CASecret, Namespace: "cdi"},
		Data: map[string][]byte{corev1.TLSCertKey: ca.Cert, corev1.TLSPrivateKeyKey: ca.Key}}))

	newPVC := func(name string, mode corev1.PersistentVolumeMode, ann map[string]string) {
		require.NoError(t, c.Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: ptr.To(mode),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}))
	}
	newPVC("disk", corev1.PersistentVolumeFilesystem, map[string]string{cdiv1.AnnUploadRequest: ""})
	newPVC("dev", corev1.PersistentVolumeBlock, map[string]string{cdiv1.AnnUploadRequest: ""})
	newPVC("plain", corev1.PersistentVolumeFilesystem, nil)

	get := func(name string, o client.Object) error {
		return c.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, o)
	}
	annotations := func(name string) map[string]string {
		pvc := &corev1.PersistentVolumeClaim{}
		require.NoError(t, get(name, pvc))
		return pvc.Annotations
	}
	pod := &corev1.Pod{}
	eventually(t, "the upload pod", func() bool { return get("cdi-upload-disk", pod) == nil })
	eventually(t, "phase Pending", func() bool {
		a := annotations("disk")
		return a[cdiv1.AnnPodPhase] == "Pending" && a[cdiv1.AnnPodReady] == "false"
	})
	// seen waits until the controller has read the pod as it is now. A
	// pass over the claim begins only once the one before has ended, so
	// it also says that the pass before (and its writes) is done.
	seen := func(what string) {
		eventually(t, "the controller to read the pod "+what, func() bool { return rec.Seen(pod) })
	}
	seen("as made")
	assert.Equal(t, []string{"patch *v1.PersistentVolumeClaim disk", "create *v1.Secret cdi-upload-disk", "create *v1.Service cdi-upload-disk",
		"create *v1.Pod cdi-upload-disk"}, rec.Writes("disk", "cdi-upload-disk"), "the claim first")
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, get("disk", pvc))
	// The scheduler's failed attempts: each rewrites the pod's
	// PodScheduled condition, none says anything new of the upload.
	version := pvc.ResourceVersion
	for i := range 4 { // the last one's read says the pass before it is done
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: fmt.Sprintf("attempt %d: 0/1 nodes are available", i), LastTransitionTime: metav1.Now()}}
		require.NoError(t, c.Status().Update(ctx, pod))
		seen(fmt.Sprintf("unschedulable (%d)", i))
	}
	require.NoError(t, get("disk", pvc))
	assert.Equal(t, version, pvc.ResourceVersion, "the claim was written while its pod was being scheduled")
	assert.Len(t, rec.Writes("disk", "cdi-upload-disk"), 4)
	ctr := pod.Spec.Containers[0]
	assert.Equal(t, "registry/cdi-uploadserver:t", ctr.Image)
	assert.Contains(t, ctr.Args, "--dest=/data")
	assert.Contains(t, ctr.Args, "--size=1009316864", "1 GiB less 6% (no CDIConfig), in whole sectors")
	assert.Contains(t, ctr.Args, "--client-name=cdi-uploadproxy")
	assert.Equal(t, "disk", pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	svc := &corev1.Service{}
	require.NoError(t, get("cdi-upload-disk", svc))
	assert.Equal(t, pod.Labels, svc.Spec.Selector)
	secret := &corev1.Secret{}
	require.NoError(t, get("cdi-upload-disk", secret))
	leaf, _, err := certs.Parse(certs.KeyPair{Cert: secret.Data[corev1.TLSCertKey], Key: secret.Data[corev1.TLSPrivateKeyKey]})
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "cdi-upload-disk.default.svc"})
	require.NoError(t, err, "the server's certificate names its Service and comes from the upload CA")
	assert.Equal(t, ca.Cert, secret.Data["ca.crt"])

	blockPod := &corev1.Pod{}
	eventually(t, "the block volume's upload pod", func() bool { return get("cdi-upload-dev", blockPod) == nil })
	assert.Contains(t, blockPod.Spec.Containers[0].Args, "--block-device=/dev/cdi-block-volume")
	assert.Equal(t, "/dev/cdi-block-volume", blockPod.Spec.Containers[0].VolumeDevices[0].DevicePath)

	// No upload server for a PVC that is not a target.
	err = get("cdi-upload-plain", &corev1.Pod{})
	assert.True(t, apierrors.IsNotFound(err), "%v", err)

	// The kubelet's part: the pod runs and is ready.
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	require.NoError(t, c.Status().Update(ctx, pod))
	eventually(t, "ready", func() bool {
		a := annotations("disk")
		return a[cdiv1.AnnPodPhase] == "Running" && a[cdiv1.AnnPodReady] == "true"
	})
	// The server wrote the image and exited.
	require.NoError(t, get("cdi-upload-disk", pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	require.NoError(t, c.Status().Update(ctx, pod))
	eventually(t, "succeeded", func() bool {
		a := annotations("disk")
		return a[cdiv1.AnnPodPhase] == "Succeeded" && a[cdiv1.AnnPodReady] == "false"
	})
	for _, o := range []client.Object{&corev1.Pod{}, &corev1.Service{}, &corev1.Secret{}} {
		eventually(t, "the upload server removed", func() bool { return apierrors.IsNotFound(get("cdi-upload-disk", o)) })
	}
}
