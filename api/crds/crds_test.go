package crds_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/kubevmm/kubevmm/api/crds"
)

func TestEmbeddedCRDs(t *testing.T) {
	all, err := crds.All()
	require.NoError(t, err)
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, c := range all {
		byName[c.Name] = c
	}
	type col struct{ name, path string }
	tests := []struct {
		crd        string
		kind       string
		shortNames []string
		columns    []col
	}{
		{
			crd: "virtualmachines.kubevirt.io", kind: "VirtualMachine", shortNames: []string{"vm", "vms"},
			columns: []col{{"Age", ".metadata.creationTimestamp"}, {"Status", ".status.printableStatus"}, {"Ready", ".status.conditions[?(@.type=='Ready')].status"}},
		},
		{
			crd: "virtualmachineinstances.kubevirt.io", kind: "VirtualMachineInstance", shortNames: []string{"vmi", "vmis"},
			columns: []col{
				{"Age", ".metadata.creationTimestamp"}, {"Phase", ".status.phase"}, {"IP", ".status.interfaces[0].ipAddress"},
				{"NodeName", ".status.nodeName"}, {"Ready", ".status.conditions[?(@.type=='Ready')].status"},
				{"Live-Migratable", ".status.conditions[?(@.type=='LiveMigratable')].status"}, {"Paused", ".status.conditions[?(@.type=='Paused')].status"},
			},
		},
		{
			crd: "virtualmachineinstancemigrations.kubevirt.io", kind: "VirtualMachineInstanceMigration", shortNames: []string{"vmim", "vmims"},
			columns: []col{{"Phase", ".status.phase"}, {"VMI", ".spec.vmiName"}},
		},
	}
	require.Len(t, all, len(tests), "one CRD per kind, nothing else")
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			c := byName[tc.crd]
			require.NotNil(t, c, "CRD %s", tc.crd)
			assert.Equal(t, "kubevirt.io", c.Spec.Group)
			assert.Equal(t, apiextensionsv1.NamespaceScoped, c.Spec.Scope)
			assert.Equal(t, tc.kind, c.Spec.Names.Kind)
			assert.Equal(t, tc.shortNames, c.Spec.Names.ShortNames)
			assert.Equal(t, []string{"all"}, c.Spec.Names.Categories)
			require.Len(t, c.Spec.Versions, 1)
			v := c.Spec.Versions[0]
			assert.Equal(t, "v1", v.Name)
			assert.True(t, v.Served && v.Storage)
			require.NotNil(t, v.Subresources)
			assert.NotNil(t, v.Subresources.Status, "status subresource")
			var got []col
			for _, pc := range v.AdditionalPrinterColumns {
				got = append(got, col{pc.Name, pc.JSONPath})
			}
			assert.Equal(t, tc.columns, got)
		})
	}

	// Unmodeled KubeVirt fields are kept, not pruned, so admission sees them.
	vmi := byName["virtualmachineinstances.kubevirt.io"].Spec.Versions[0].Schema.OpenAPIV3Schema
	gpus := vmi.Properties["spec"].Properties["domain"].Properties["devices"].Properties["gpus"]
	require.NotNil(t, gpus.Items)
	assert.True(t, ptrTrue(gpus.Items.Schema.XPreserveUnknownFields), "devices.gpus items preserve unknown fields")
	// Template metadata is a real schema, so labels/annotations survive.
	vm := byName["virtualmachines.kubevirt.io"].Spec.Versions[0].Schema.OpenAPIV3Schema
	meta := vm.Properties["spec"].Properties["template"].Properties["metadata"]
	assert.Contains(t, meta.Properties, "labels")
	assert.Contains(t, meta.Properties, "annotations")
}

func ptrTrue(b *bool) bool { return b != nil && *b }
