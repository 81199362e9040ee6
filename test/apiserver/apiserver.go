// Package apiserver starts a real kube-apiserver and etcd (envtest) with
// the kubevirt.io CRDs installed, for tests. Its binaries are built by
// `hack/cluster/build.sh envtest` (`make envtest-assets`); without them the
// test is skipped, saying so.
package apiserver

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubevmm/kubevmm/api/crds"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/vmm/migration/tlstest"
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
// kube-apiserver flags). The API server is set up as the dev cluster's
// (WithFrontProxy): a webhook or extension API server reads how to know
// its calls from kube-system/extension-apiserver-authentication.
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
	withFrontProxy(t, env)
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

// FrontProxyName is the front proxy's client certificate's name, the one
// allowed name.
const FrontProxyName = "front-proxy-client"

// withFrontProxy configures the aggregation layer (a front-proxy CA and
// the client certificate the API server proxies with) and has the API
// server present that certificate to admission webhooks too, as
// hack/cluster/up.sh does; webhooks accept only calls that carry it.
func withFrontProxy(t testing.TB, env *envtest.Environment) {
	ca := tlstest.NewCA(t, "front-proxy-ca")
	proxy := ca.Issue(t, FrontProxyName)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "webhook-client.kubeconfig")
	// '*' matches every webhook's host.
	writeFile(t, kubeconfig, fmt.Sprintf("apiVersion: v1\nkind: Config\nusers:\n- name: '*'\n  user:\n    client-certificate: %s\n    client-key: %s\n", proxy.Cert, proxy.Key))
	admission := filepath.Join(dir, "admission.yaml")
	writeFile(t, admission, AdmissionConfig(kubeconfig))
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("requestheader-client-ca-file", proxy.CA)
	args.Set("requestheader-allowed-names", FrontProxyName)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", proxy.Cert)
	args.Set("proxy-client-key-file", proxy.Key)
	args.Set("admission-control-config-file", admission)
}

// AdmissionConfig is an AdmissionConfiguration giving both webhook
// admission plugins the client credentials in kubeconfig.
func AdmissionConfig(kubeconfig string) string {
	plugin := func(name string) string {
		return fmt.Sprintf("- name: %s\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: %s\n", name, kubeconfig)
	}
	return "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" +
		plugin("ValidatingAdmissionWebhook") + plugin("MutatingAdmissionWebhook")
}

func writeFile(t testing.TB, path, body string) {
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}
