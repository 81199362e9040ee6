package instancetypes_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubevmm/kubevmm/api/instancetype/expand"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	"github.com/kubevmm/kubevmm/operator/ssp/instancetypes"
)

// The common set decodes strictly; every u1 size and every preference uses
// only what kubevmm honours, and the o1 and cx1 sizes are refused naming
// what it does not (a VM using one is refused the same way).
func TestCommon(t *testing.T) {
	objs, err := instancetypes.Common()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, o := range objs {
		names[o.GetName()] = true
		switch o := o.(type) {
		case *v1beta1.VirtualMachineClusterInstancetype:
			errs := expand.UnsupportedInstancetype(field.NewPath("spec"), &o.Spec)
			var fields []string
			for _, e := range errs {
				fields = append(fields, e.Field)
			}
			switch {
			case strings.HasPrefix(o.Name, "o1."):
				assert.Equal(t, []string{"spec.memory.overcommitPercent"}, fields, o.Name)
				continue
			case strings.HasPrefix(o.Name, "cx1."):
				assert.Subset(t, fields, []string{"spec.cpu.numa", "spec.memory.hugepages"}, o.Name)
				continue
			}
			assert.Empty(t, errs, o.Name)
			assert.Equal(t, o.Labels["instancetype.kubevirt.io/memory"], o.Spec.Memory.Guest.String(), o.Name)
		case *v1beta1.VirtualMachineClusterPreference:
			assert.Empty(t, expand.UnsupportedPreference(field.NewPath("spec"), &o.Spec), o.Name)
		default:
			t.Errorf("unexpected %T", o)
		}
	}
	for _, n := range []string{"u1.nano", "u1.micro", "u1.small", "u1.medium", "u1.large", "u1.8xlarge", "o1.nano", "o1.8xlarge",
		"cx1.medium", "cx1.8xlarge", "linux", "cirros", "alpine", "fedora", "ubuntu", "centos.stream9"} {
		assert.True(t, names[n], "%s in the common set", n)
	}
	assert.Len(t, objs, 25+6)
}
