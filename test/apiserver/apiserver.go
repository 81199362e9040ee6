// Package apiserver starts a real kube-apiserver and etcd (envtest) with
// the kubevirt.io CRDs installed, for tests. Its binaries are built by
// `hack/cluster/build.sh envtest` (`make envtest-assets`); without them the
// test is skipped, saying so.
package apiserver

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubevmm/kubevmm/api/crds"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
)

// Assets is the directory of the envtest binaries: KUBEBUILDER_ASSETS,
// else the project's cache.
func Assets() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	cache := os.Getenv("KUBEVMM_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "kubevmm")
	}
	return filepath.Join(cache, "k8s", "bin")
}

// Start starts an API server for the test (stopped when it ends) and
// returns its admin config and a client with kubevmm's scheme. Each
// configure function may change the environment first (e.g. add
// kube-apiserver flags).
func Start(t testing.TB, configure ...func(*envtest.Environment)) (*rest.Config, client.Client) {
	t.Helper()
	dir := Assets()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Skipf("no %s in %s (KUBEBUILDER_ASSETS): run `make envtest-assets`", b, dir)
		}
	}
	all, err := crds.All()
	if err != nil {
		t.Fatal(err)
	}
	// The timeouts are upper bounds for a busy 2-core machine.
	env := &envtest.Environment{BinaryAssetsDirectory: dir, CRDs: all, ControlPlaneStartTimeout: 3 * time.Minute, ControlPlaneStopTimeout: time.Minute}
	for _, f := range configure {
		f(env)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the API server: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the API server: %v", err)
		}
	})
	scheme, err := kvscheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cfg, c
}
