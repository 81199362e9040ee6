package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cdicrds "github.com/kubevmm/kubevmm/api/cdi/crds"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/crds"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/controller"
)

// These tests run the reconcilers against a real kube-apiserver and etcd
// (envtest), built by hack/cluster/build.sh envtest; `make test-envtest`
// (part of `make test`) builds them and sets KUBEBUILDER_ASSETS. There is no
// scheduler, kubelet or garbage collector: where a test needs one of them it
// plays that part itself, visibly (binding a pod, setting a pod's status,
// finishing a pod's graceful deletion).

const launcherImage = "localhost/kubevmm/virt-launcher:envtest"

var (
	// env is nil when the envtest binaries are missing; skipReason says why.
	env        *envtest.Environment
	skipReason string
	k8s        client.Client
	restConfig *rest.Config
	testScheme *runtime.Scheme
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	var err error
	if testScheme, err = kvscheme.New(); err != nil {
		panic(err) // static registration; cannot fail at run time
	}
	assets, reason := findAssets()
	if assets == "" {
		skipReason = reason
		fmt.Fprintf(os.Stderr, "controller: envtest tests SKIPPED: %s\n", reason)
		return m.Run()
	}

	all, err := crds.All()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loading CRDs:", err)
		return 1
	}
	// CDI's, so that VMs on DataVolumes meet the real DataVolume CRD.
	cdi, err := cdicrds.All()
	if err != nil {
		fmt.Fprintln(os.Stderr, "loading CDI's CRDs:", err)
		return 1
	}
	all = append(all, cdi...)
	env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDs:                  all,
		// An upper bound for a busy 2-core machine, not an expectation.
		ControlPlaneStartTimeout: 3 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "controller: envtest (etcd + kube-apiserver from %s, CRDs installed) started in %.2fs\n", assets, time.Since(start).Seconds())
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, err := startManager(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	restConfig = cfg
	k8s, err = client.New(cfg, client.Options{Scheme: testScheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating client:", err)
		return 1
	}
	code := m.Run()
	cancel()
	<-done
	return code
}

// findAssets returns the directory with etcd and kube-apiserver:
// $KUBEBUILDER_ASSETS, else what hack/cluster/build.sh envtest leaves in
// the cache, or "" and why not.
func findAssets() (string, string) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		cache := os.Getenv("KUBEVMM_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "kubevmm")
		}
		dir = filepath.Join(cache, "k8s", "bin")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Sprintf("no %s in %s (KUBEBUILDER_ASSETS); build them with `hack/cluster/build.sh envtest` or run `make test-envtest`", b, dir)
		}
	}
	return dir, ""
}

func startManager(ctx context.Context, cfg *rest.Config) (<-chan struct{}, error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := controller.Setup(mgr, controller.Options{
		Launcher: controller.LauncherConfig{Image: launcherImage},
		Config: func() (controller.ClusterConfig, error) {
			if c := testConfig.Load(); c != nil {
				return *c, nil
			}
			return controller.ClusterConfig{}, nil
		},
	}); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return done, nil
}

// zapLevel keeps controller logs quiet unless KUBEVMM_TEST_VERBOSE is set.
func zapLevel() zapcore.Level {
	if os.Getenv("KUBEVMM_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

// needEnv skips the test, with the reason, when envtest cannot run.
func needEnv(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip(skipReason)
	}
}

var nsCounter atomic.Int32

// testConfig is the cluster configuration the manager's migration
// and VMI controllers read; nil is KubeVirt's defaults. Tests run one at a
// time.
var testConfig atomic.Pointer[controller.ClusterConfig]

// withConfig sets the cluster configuration for one test.
func withConfig(t *testing.T, c controller.ClusterConfig) {
	t.Helper()
	testConfig.Store(&c)
	t.Cleanup(func() { testConfig.Store(nil) })
}

// namespace creates a namespace of its own for one test.
func namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(name) > 63 {
		name = name[:63]
	}
	name = strings.TrimRight(name, "-")
	require.NoError(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

// waitFor polls until cond holds. There is no time budget to meet, only a
// generous upper bound after which the test fails with the last state seen:
// slowness is never a failure, a condition that never holds is.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("waiting for %s: never happened; last seen: %s", what, last)
}

func get(t *testing.T, ns, name string, obj client.Object) error {
	t.Helper()
	return k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)
}

// launcherPods lists the VMI's launcher pods straight from the API server.
func launcherPods(t *testing.T, vmi *v1.VirtualMachineInstance) []corev1.Pod {
	t.Helper()
	list := &corev1.PodList{}
	require.NoError(t, k8s.List(context.Background(), list, client.InNamespace(vmi.Namespace),
		client.MatchingLabels{v1.CreatedByLabel: string(vmi.UID)}))
	return list.Items
}

// waitVMI waits for a VMI with the given name to exist and satisfy cond.
func waitVMI(t *testing.T, ns, name, what string, cond func(*v1.VirtualMachineInstance) bool) *v1.VirtualMachineInstance {
	t.Helper()
	vmi := &v1.VirtualMachineInstance{}
	waitFor(t, "VMI "+name+" "+what, func() (bool, string) {
		vmi = &v1.VirtualMachineInstance{}
		if err := get(t, ns, name, vmi); err != nil {
			return false, err.Error()
		}
		return cond(vmi), fmt.Sprintf("phase=%q uid=%s labels=%v migrationState=%+v conditions=%+v", vmi.Status.Phase, vmi.UID, vmi.Labels, vmi.Status.MigrationState, vmi.Status.Conditions)
	})
	return vmi
}

func waitVMIGone(t *testing.T, ns, name string) {
	t.Helper()
	waitFor(t, "VMI "+name+" to be gone", func() (bool, string) {
		vmi := &v1.VirtualMachineInstance{}
		err := get(t, ns, name, vmi)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("err=%v phase=%q deleting=%v finalizers=%v", err, vmi.Status.Phase, vmi.DeletionTimestamp != nil, vmi.Finalizers)
	})
}

func waitVM(t *testing.T, ns, name, what string, cond func(*v1.VirtualMachine) bool) *v1.VirtualMachine {
	t.Helper()
	vm := &v1.VirtualMachine{}
	waitFor(t, "VM "+name+" "+what, func() (bool, string) {
		vm = &v1.VirtualMachine{}
		if err := get(t, ns, name, vm); err != nil {
			return false, err.Error()
		}
		return cond(vm), fmt.Sprintf("status=%+v", vm.Status)
	})
	return vm
}

// waitOnePod waits until the VMI has exactly one launcher pod and returns it.
func waitOnePod(t *testing.T, vmi *v1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	waitFor(t, "one launcher pod for VMI "+vmi.Name, func() (bool, string) {
		pods := launcherPods(t, vmi)
		if len(pods) != 1 {
			return false, fmt.Sprintf("%d pods", len(pods))
		}
		pod = &pods[0]
		return true, ""
	})
	return pod
}

// setVMIPhase plays virt-handler: it writes a phase (and its transition
// timestamp) into the VMI status.
func setVMIPhase(t *testing.T, vmi *v1.VirtualMachineInstance, phase v1.VirtualMachineInstancePhase) {
	t.Helper()
	waitFor(t, "writing VMI phase "+string(phase), func() (bool, string) {
		cur := &v1.VirtualMachineInstance{}
		if err := get(t, vmi.Namespace, vmi.Name, cur); err != nil {
			return false, err.Error()
		}
		orig := cur.DeepCopy()
		cur.Status.Phase = phase
		cur.Status.PhaseTransitionTimestamps = append(cur.Status.PhaseTransitionTimestamps,
			v1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: phase, PhaseTransitionTimestamp: metav1.Now()})
		// Optimistic lock, as virt-handler will do; a conflict with the
		// controller just means try again on fresh data.
		err := k8s.Status().Patch(context.Background(), cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// patchVMStatus changes the VM's status as virt-api does (a request
// appended), with an optimistic lock: a conflict with the controller just
// means try again on fresh data.
func patchVMStatus(t *testing.T, ns, name, what string, mutate func(*v1.VirtualMachineStatus)) {
	t.Helper()
	waitFor(t, what, func() (bool, string) {
		cur := &v1.VirtualMachine{}
		if err := get(t, ns, name, cur); err != nil {
			return false, err.Error()
		}
		orig := cur.DeepCopy()
		mutate(&cur.Status)
		if err := k8s.Status().Patch(context.Background(), cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// bindPod plays the scheduler: it binds the pod to a node.
func bindPod(t *testing.T, pod *corev1.Pod, node string) {
	t.Helper()
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}
	require.NoError(t, k8s.SubResource("binding").Create(context.Background(), pod, b))
}

// setPodStatus plays the kubelet: it writes the pod's status.
func setPodStatus(t *testing.T, pod *corev1.Pod, mutate func(*corev1.PodStatus)) {
	t.Helper()
	waitFor(t, "writing pod status", func() (bool, string) {
		cur := &corev1.Pod{}
		if err := get(t, pod.Namespace, pod.Name, cur); err != nil {
			return false, err.Error()
		}
		mutate(&cur.Status)
		if err := k8s.Status().Update(context.Background(), cur); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// finishPodDeletion plays the kubelet: once the pod is being deleted, it
// confirms the container is gone (grace period 0).
func finishPodDeletion(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	waitFor(t, "pod "+pod.Name+" to be deleted", func() (bool, string) {
		cur := &corev1.Pod{}
		err := get(t, pod.Namespace, pod.Name, cur)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		if cur.DeletionTimestamp == nil {
			return false, "pod not being deleted"
		}
		err = k8s.Delete(context.Background(), cur, client.GracePeriodSeconds(0))
		return false, fmt.Sprintf("force delete: %v", err)
	})
}

// waitEvent waits for an Event about the object with that reason and note.
func waitEvent(t *testing.T, ns, kind, name, reason, note string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("event %s on %s %s", reason, kind, name), func() (bool, string) {
		list := &corev1.EventList{}
		if err := k8s.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason && e.Message == note {
				return true, ""
			}
			seen = append(seen, e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name+" "+e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "; ")
	})
}
