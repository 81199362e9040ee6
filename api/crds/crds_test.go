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
		{
			crd: "kubevirts.kubevirt.io", kind: "KubeVirt", shortNames: []string{"kv", "kvs"},
			columns: []col{{"Age", ".metadata.creationTimestamp"}, {"Phase", ".status.phase"}},
		},
	}
	require.Len(t, all, len(tests)+5, "one CRD per kind, nothing else")

	// VirtualMachineInstancePresets: served deprecated, as KubeVirt v1.9
	// serves them, with no status.
	preset := byName["virtualmachineinstancepresets.kubevirt.io"]
	require.NotNil(t, preset, "the preset CRD")
	assert.Equal(t, apiextensionsv1.NamespaceScoped, preset.Spec.Scope)
	assert.Equal(t, []string{"vmipreset", "vmipresets"}, preset.Spec.Names.ShortNames)
	require.Len(t, preset.Spec.Versions, 1)
	assert.True(t, preset.Spec.Versions[0].Deprecated)
	assert.Equal(t, "kubevirt.io/v1 VirtualMachineInstancePresets is now deprecated and will be removed in v2.", *preset.Spec.Versions[0].DeprecationWarning)
	assert.Nil(t, preset.Spec.Versions[0].Subresources)
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

// The instancetype.kubevirt.io kinds: KubeVirt's names and scopes, v1beta1
// only (KubeVirt also serves the long-deprecated v1alpha1 and v1alpha2).
func TestInstancetypeCRDs(t *testing.T) {
	all, err := crds.All()
	require.NoError(t, err)
	byName := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, c := range all {
		byName[c.Name] = c
	}
	tests := []struct {
		plural, kind string
		scope        apiextensionsv1.ResourceScope
		shortNames   []string
		categories   []string
	}{
		{"virtualmachineinstancetypes", "VirtualMachineInstancetype", apiextensionsv1.NamespaceScoped, []string{"vminstancetype", "vminstancetypes", "vmf", "vmfs"}, []string{"all"}},
		{"virtualmachineclusterinstancetypes", "VirtualMachineClusterInstancetype", apiextensionsv1.ClusterScoped, []string{"vmclusterinstancetype", "vmclusterinstancetypes", "vmcf", "vmcfs"}, nil},
		{"virtualmachinepreferences", "VirtualMachinePreference", apiextensionsv1.NamespaceScoped, []string{"vmpref", "vmprefs", "vmp", "vmps"}, []string{"all"}},
		{"virtualmachineclusterpreferences", "VirtualMachineClusterPreference", apiextensionsv1.ClusterScoped, []string{"vmcp", "vmcps"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			c := byName[tc.plural+".instancetype.kubevirt.io"]
			require.NotNil(t, c)
			assert.Equal(t, tc.kind, c.Spec.Names.Kind)
			assert.Equal(t, tc.scope, c.Spec.Scope)
			assert.Equal(t, tc.shortNames, c.Spec.Names.ShortNames)
			assert.Equal(t, tc.categories, c.Spec.Names.Categories)
			require.Len(t, c.Spec.Versions, 1)
			assert.Equal(t, "v1beta1", c.Spec.Versions[0].Name)
			assert.True(t, c.Spec.Versions[0].Served && c.Spec.Versions[0].Storage)
		})
	}
}

func ptrTrue(b *bool) bool { return b != nil && *b }
