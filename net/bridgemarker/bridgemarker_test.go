package bridgemarker_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kubevmm/kubevmm/net/bridgemarker"
)

func list(kv ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestPatch(t *testing.T) {
	const br1, br2, gone = "bridge.network.kubevirt.io/br1", "bridge.network.kubevirt.io/br2", "bridge.network.kubevirt.io/gone"
	for _, tc := range []struct {
		name        string
		bridges     []string
		status      corev1.NodeStatus
		want        string // the patch, "" for none
		wantSkipped []string
	}{
		{name: "new bridges, other resources untouched", bridges: []string{"br1", "br2"},
			status: corev1.NodeStatus{Capacity: list("cpu", "2"), Allocatable: list("cpu", "2")},
			want:   `{"status":{"allocatable":{"` + br1 + `":"1k","` + br2 + `":"1k"},"capacity":{"` + br1 + `":"1k","` + br2 + `":"1k"}}}`},
		{name: "up to date", bridges: []string{"br1"},
			status: corev1.NodeStatus{Capacity: list(br1, "1k", "cpu", "2"), Allocatable: list(br1, "1000")}},
		{name: "vanished bridge removed", bridges: []string{"br1"},
			status: corev1.NodeStatus{Capacity: list(br1, "1k", gone, "1k"), Allocatable: list(br1, "1k", gone, "1k")},
			want:   `{"status":{"allocatable":{"` + gone + `":null},"capacity":{"` + gone + `":null}}}`},
		{name: "allocatable only missing (the kubelet reset it)", bridges: []string{"br1"},
			status: corev1.NodeStatus{Capacity: list(br1, "1k")},
			want:   `{"status":{"allocatable":{"` + br1 + `":"1k"}}}`},
		{name: "wrong count corrected", bridges: []string{"br1"},
			status: corev1.NodeStatus{Capacity: list(br1, "1"), Allocatable: list(br1, "1k")},
			want:   `{"status":{"capacity":{"` + br1 + `":"1k"}}}`},
		{name: "no bridges left", bridges: nil,
			status: corev1.NodeStatus{Capacity: list(gone, "1k")},
			want:   `{"status":{"capacity":{"` + gone + `":null}}}`},
		{name: "names that are no resource name skipped", bridges: []string{"br#1", "br1"},
			status: corev1.NodeStatus{Capacity: list(br1, "1k"), Allocatable: list(br1, "1k")}, wantSkipped: []string{"br#1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch, skipped, err := bridgemarker.Patch(tc.bridges, tc.status)
			require.NoError(t, err)
			assert.Equal(t, tc.wantSkipped, skipped)
			if tc.want == "" {
				assert.Nil(t, patch, "%s", patch)
				return
			}
			assert.JSONEq(t, tc.want, string(patch))
		})
	}
}
