package hco

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// The spec's dataImportCronTemplates reach the SSP in the boot image
// namespace (created first) and are listed in the status; kubevmm's
// built-in list is empty, so enableCommonBootImageImport adds nothing.
func TestDecideGoldenImages(t *testing.T) {
	tmpl := sspv1beta3.DataImportCronTemplate{ObjectMeta: metav1.ObjectMeta{Name: "fedora-image-cron", Namespace: "ignored"},
		Spec: cdiv1.DataImportCronSpec{Schedule: "* * * * *", ManagedDataSource: "fedora"}}
	for _, tc := range []struct {
		name   string
		ns     *string
		enable *bool
		wantNS string
	}{
		{"defaults", nil, nil, "kubevirt-os-images"},
		{"own namespace, common images off", ptr.To("golden"), ptr.To(false), "golden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := newHCO()
			hc.Spec.WorkloadSources.CommonBootImageNamespace = tc.ns
			hc.Spec.WorkloadSources.EnableCommonBootImageImport = tc.enable
			hc.Spec.WorkloadSources.DataImportCronTemplates = []sspv1beta3.DataImportCronTemplate{tmpl}
			d := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs()}, now)
			require.Equal(t, Apply, d.Action, d.Status.Conditions)
			require.Equal(t, "Namespace", d.Objects[0].GetKind(), "the namespace before the SSP")
			assert.Equal(t, tc.wantNS, d.Objects[0].GetName())
			ssp := byKind(d.Objects)["SSP"]
			tmpls, _, err := unstructured.NestedSlice(ssp.Object, "spec", "commonTemplates", "dataImportCronTemplates")
			require.NoError(t, err)
			require.Len(t, tmpls, 1)
			assert.Equal(t, map[string]any{"name": "fedora-image-cron", "namespace": tc.wantNS}, tmpls[0].(map[string]any)["metadata"])
			assert.Equal(t, "fedora", tmpls[0].(map[string]any)["spec"].(map[string]any)["managedDataSource"])
			require.Len(t, d.Status.DataImportCronTemplates, 1)
			assert.Equal(t, tc.wantNS, d.Status.DataImportCronTemplates[0].Namespace)
			assert.False(t, d.Status.DataImportCronTemplates[0].Status.CommonTemplate)
		})
	}

	// No golden images: no namespace, nothing passed.
	d := Decide(Observed{HCO: newHCO(), Namespace: "kubevirt", CRDs: allCRDs()}, now)
	assert.Nil(t, byKind(d.Objects)["Namespace"])
	_, found, _ := unstructured.NestedSlice(byKind(d.Objects)["SSP"].Object, "spec", "commonTemplates", "dataImportCronTemplates")
	assert.False(t, found)
	assert.Empty(t, d.Status.DataImportCronTemplates)
	assert.Empty(t, commonGoldenImages, "upstream's built-in images are at quay.io: none here (README)")
}
