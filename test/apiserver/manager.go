package apiserver

import (
	"context"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// NewManager makes a controller manager on cfg for a test: o as given,
// with the metrics and health endpoints off (tests run side by side and
// would fight over their ports).
func NewManager(t testing.TB, cfg *rest.Config, o ctrl.Options) ctrl.Manager {
	t.Helper()
	o.Metrics = metricsserver.Options{BindAddress: "0"}
	o.HealthProbeBindAddress = "0"
	mgr, err := ctrl.NewManager(cfg, o)
	if err != nil {
		t.Fatalf("making the manager: %v", err)
	}
	return mgr
}

// Run starts mgr (its reconcilers set up) until the test ends, and fails
// the test if it stopped with an error.
func Run(t testing.TB, mgr ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped: %v", err)
		}
	})
}

// WaitFor polls until cond holds. There is no time budget to meet, only a
// generous upper bound after which the test fails with the last state
// cond reported.
func WaitFor(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("waiting for %s: never happened; last seen: %s", what, last)
}

// WithCRDs installs crds too (an operator's own, beside kubevirt.io's).
func WithCRDs(crds ...*apiextensionsv1.CustomResourceDefinition) func(*envtest.Environment) {
	return func(e *envtest.Environment) { e.CRDs = append(e.CRDs, crds...) }
}

// AsServiceAccount is cfg acting as the service account namespace/name:
// an operator under test runs with the RBAC it is deployed with, so a
// missing rule fails the test.
func AsServiceAccount(cfg *rest.Config, namespace, name string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + name}
	return c
}
