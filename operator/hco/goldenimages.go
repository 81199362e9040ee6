package hco

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// commonGoldenImages is the HCO's built-in list of golden images, which
// spec.workloadSources.enableCommonBootImageImport turns on. Upstream's
// point at quay.io/containerdisks, which a kubevmm cluster (air-gapped,
// like the dev cluster) need not reach: kubevmm ships none, and golden
// images are the spec's dataImportCronTemplates, at a registry the
// cluster reaches.
var commonGoldenImages []sspv1beta3.DataImportCronTemplate

// goldenImages are the golden images passed to the SSP, each in the boot
// image namespace: the built-in ones when enabled (a spec template of the
// same name replaces one), then the spec's.
func goldenImages(s *hcov1.HyperConvergedSpec) []hcov1.DataImportCronTemplateStatus {
	ns := bootImageNamespace(s)
	custom := map[string]bool{}
	for _, t := range s.WorkloadSources.DataImportCronTemplates {
		custom[t.Name] = true
	}
	var out []hcov1.DataImportCronTemplateStatus
	add := func(t sspv1beta3.DataImportCronTemplate, st hcov1.DataImportCronStatus) {
		t = *t.DeepCopy()
		t.Namespace = ns
		out = append(out, hcov1.DataImportCronTemplateStatus{DataImportCronTemplate: t, Status: st})
	}
	if ptr.Deref(s.WorkloadSources.EnableCommonBootImageImport, true) {
		for _, t := range commonGoldenImages {
			if !custom[t.Name] {
				add(t, hcov1.DataImportCronStatus{CommonTemplate: true})
			}
		}
	}
	for _, t := range s.WorkloadSources.DataImportCronTemplates {
		add(t, hcov1.DataImportCronStatus{})
	}
	return out
}

// bootImageNamespace is spec.workloadSources.commonBootImageNamespace or
// its default.
func bootImageNamespace(s *hcov1.HyperConvergedSpec) string {
	return ptr.Deref(s.WorkloadSources.CommonBootImageNamespace, hcov1.DefaultCommonBootImageNamespace)
}

// bootImageNamespaceObject is the boot image namespace, which the HCO
// creates for the golden images (and never deletes: it holds them).
func bootImageNamespaceObject(hc *hcov1.HyperConverged) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Namespace")
	u.SetName(bootImageNamespace(&hc.Spec))
	u.SetLabels(map[string]string{AppLabel: hc.Name, ManagedByLabel: ManagedBy})
	return u
}
