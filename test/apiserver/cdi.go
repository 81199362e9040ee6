package apiserver

import (
	"testing"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cdicrds "github.com/kubevmm/kubevmm/api/cdi/crds"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// StartCDI is Start with CDI's CRDs installed too and its types in the
// client's scheme (the scheme a test's manager may share).
func StartCDI(t testing.TB, configure ...func(*envtest.Environment)) (*rest.Config, client.Client) {
	t.Helper()
	all, err := cdicrds.All()
	if err != nil {
		t.Fatal(err)
	}
	cfg, c := Start(t, append([]func(*envtest.Environment){WithCRDs(all...)}, configure...)...)
	if err := cdiv1.AddToScheme(c.Scheme()); err != nil {
		t.Fatal(err)
	}
	return cfg, c
}
