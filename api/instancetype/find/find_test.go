package find_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/find"
	"github.com/kubevmm/kubevmm/api/scheme"
)

// TestForVMErrors: what a VM's matchers name must exist, and a revision
// must hold the kind of object the matcher names (a revisionName set by
// hand may name any ControllerRevision).
func TestForVMErrors(t *testing.T) {
	s, err := scheme.New()
	require.NoError(t, err)
	rev := func(name, raw string) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: runtime.RawExtension{Raw: []byte(raw)}}
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		rev("pref-rev", `{"kind":"VirtualMachineClusterPreference","spec":{}}`),
		rev("garbage", `{"kind":"VirtualMachineClusterPreference","spec":{"cpu":"fast"}}`),
	).Build()
	tests := []struct {
		name string
		it   *v1.InstancetypeMatcher
		pref *v1.PreferenceMatcher
		want string
	}{
		{"missing type", &v1.InstancetypeMatcher{Name: "u1.x"}, nil, `failure to find VirtualMachineClusterInstancetype "u1.x"`},
		{"missing namespaced preference", nil, &v1.PreferenceMatcher{Name: "p", Kind: "VirtualMachinePreference"}, `failure to find VirtualMachinePreference "p"`},
		{"missing revision", &v1.InstancetypeMatcher{Name: "u1.x", RevisionName: "nope"}, nil, "getting ControllerRevision nope"},
		{"a preference's revision as an instance type's", &v1.InstancetypeMatcher{Name: "u1.x", RevisionName: "pref-rev"}, nil,
			`ControllerRevision pref-rev holds a "VirtualMachineClusterPreference", not a VirtualMachineInstancetype or VirtualMachineClusterInstancetype`},
		{"a revision of the wrong shape", nil, &v1.PreferenceMatcher{Name: "p", RevisionName: "garbage"}, "decoding ControllerRevision garbage"},
		{"unknown kind", &v1.InstancetypeMatcher{Name: "u1.x", Kind: "Flavor"}, nil, `spec.instancetype.kind "Flavor" is not an instance type kind`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vm := &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns"}, Spec: v1.VirtualMachineSpec{Instancetype: tc.it, Preference: tc.pref}}
			_, err := find.ForVM(context.Background(), c, vm)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
