package crds_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/kubevmm/kubevmm/api/ssp/crds"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	tektonv1alpha1 "github.com/kubevmm/kubevmm/api/tektontasks/v1alpha1"
)

// The CRDs as upstream names and serves them; the SSP's spec keeps fields
// kubevmm does not declare (the operator refuses them by name), and the
// TektonTasks spec is kept as written.
func TestCRDs(t *testing.T) {
	all, err := crds.All()
	require.NoError(t, err)
	require.Len(t, all, 2)
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, c := range all {
		assert.Equal(t, "CustomResourceDefinition", c.Kind)
		byName[c.Name] = c
	}
	tests := []struct {
		crd, group, kind, plural, version string
	}{
		{sspv1beta3.CRDName, "ssp.kubevirt.io", "SSP", "ssps", "v1beta3"},
		{tektonv1alpha1.CRDName, "tektontasks.kubevirt.io", "TektonTasks", "tektontasks", "v1alpha1"},
	}
	for _, tc := range tests {
		c := byName[tc.crd]
		require.NotNil(t, c, tc.crd)
		assert.Equal(t, tc.group, c.Spec.Group)
		assert.Equal(t, tc.kind, c.Spec.Names.Kind)
		assert.Equal(t, tc.plural, c.Spec.Names.Plural)
		assert.Equal(t, apiextensionsv1.NamespaceScoped, c.Spec.Scope)
		require.Len(t, c.Spec.Versions, 1)
		v := c.Spec.Versions[0]
		assert.Equal(t, tc.version, v.Name)
		assert.True(t, v.Served && v.Storage)
		require.NotNil(t, v.Subresources)
		assert.NotNil(t, v.Subresources.Status)
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		require.NotNil(t, spec.XPreserveUnknownFields, tc.crd)
		assert.True(t, *spec.XPreserveUnknownFields, "%s keeps unknown spec fields", tc.crd)
	}
	spec := byName[sspv1beta3.CRDName].Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	assert.Equal(t, []string{"commonTemplates"}, spec.Required)
	ct := spec.Properties["commonTemplates"]
	assert.Equal(t, []string{"namespace"}, ct.Required)
	assert.True(t, *ct.XPreserveUnknownFields, "commonTemplates keeps unknown fields")
	replicas := spec.Properties["templateValidator"].Properties["replicas"]
	require.NotNil(t, replicas.Default)
	assert.JSONEq(t, "2", string(replicas.Default.Raw), "upstream's default")
}
