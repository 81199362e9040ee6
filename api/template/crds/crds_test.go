package crds_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/kubevmm/kubevmm/api/template/crds"
)

// The CRD is OpenShift's resource as clients address it, and keeps every
// field of the objects a template holds (they are any kind).
func TestCRD(t *testing.T) {
	c, err := crds.CRD()
	require.NoError(t, err)
	assert.Equal(t, "templates.template.openshift.io", c.Name)
	assert.Equal(t, "template.openshift.io", c.Spec.Group)
	assert.Equal(t, apiextensionsv1.NamespaceScoped, c.Spec.Scope)
	assert.Equal(t, apiextensionsv1.CustomResourceDefinitionNames{Plural: "templates", Singular: "template", Kind: "Template", ListKind: "TemplateList"}, c.Spec.Names)
	require.Len(t, c.Spec.Versions, 1)
	v := c.Spec.Versions[0]
	assert.Equal(t, "v1", v.Name)
	assert.True(t, v.Served)
	assert.True(t, v.Storage)
	props := v.Schema.OpenAPIV3Schema.Properties
	objects := props["objects"]
	require.NotNil(t, objects.Items)
	assert.True(t, *objects.Items.Schema.XPreserveUnknownFields, "objects keep their fields")
	assert.Equal(t, []string{"name"}, props["parameters"].Items.Schema.Required)
	for _, f := range []string{"message", "labels", "parameters"} {
		assert.Contains(t, props, f)
	}
}
