package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

func TestPlanWorkloadUpdate(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	key := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: n} }
	keys := func(ns ...string) []types.NamespacedName {
		var out []types.NamespacedName
		for _, n := range ns {
			out = append(out, key(n))
		}
		return out
	}
	outdated := func(n string, migratable bool) updateVMI {
		return updateVMI{Key: key(n), Known: true, Outdated: true, Labelled: true, Migratable: migratable}
	}
	live := v1.KubeVirtWorkloadUpdateStrategy{WorkloadUpdateMethods: []v1.WorkloadUpdateMethod{v1.WorkloadUpdateMethodLiveMigrate},
		BatchEvictionSize: ptr.To(2), BatchEvictionInterval: &metav1.Duration{Duration: time.Minute}}
	both := live
	both.WorkloadUpdateMethods = []v1.WorkloadUpdateMethod{v1.WorkloadUpdateMethodLiveMigrate, v1.WorkloadUpdateMethodEvict}
	evict := live
	evict.WorkloadUpdateMethods = []v1.WorkloadUpdateMethod{v1.WorkloadUpdateMethodEvict}
	tests := []struct {
		name string
		in   updateInput
		want updatePlan
	}{
		{name: "labels follow the launcher image; unknown launchers keep theirs",
			in: updateInput{Deployed: true, VMIs: []updateVMI{
				{Key: key("new"), Known: true, Outdated: true},
				{Key: key("current"), Known: true, Labelled: true},
				{Key: key("ok"), Known: true},
				{Key: key("unknown"), Labelled: true},
			}},
			want: updatePlan{Label: keys("new"), Unlabel: keys("current"), Outdated: 2}},
		{name: "no methods: only marked",
			in:   updateInput{Deployed: true, VMIs: []updateVMI{outdated("a", true), outdated("b", false)}},
			want: updatePlan{Outdated: 2}},
		{name: "not deployed at the target version yet: only marked",
			in:   updateInput{Strategy: live, VMIs: []updateVMI{outdated("a", true)}},
			want: updatePlan{Outdated: 1}},
		{name: "LiveMigrate: a batch of the migratable, the others left",
			in:   updateInput{Strategy: live, Deployed: true, Now: now, VMIs: []updateVMI{outdated("c", true), outdated("a", true), outdated("b", true), outdated("x", false)}},
			want: updatePlan{Outdated: 4, Migrate: keys("a", "b"), Requeue: time.Minute}},
		{name: "the interval's budget spent by earlier batches",
			in: updateInput{Strategy: live, Deployed: true, Now: now, Recent: []time.Time{now.Add(-40 * time.Second), now.Add(-10 * time.Second)},
				VMIs: []updateVMI{outdated("a", true)}},
			want: updatePlan{Outdated: 1, Requeue: 20 * time.Second}},
		{name: "batches older than the interval do not count",
			in: updateInput{Strategy: live, Deployed: true, Now: now, Recent: []time.Time{now.Add(-2 * time.Minute), now.Add(-30 * time.Second)},
				VMIs: []updateVMI{outdated("a", true), outdated("b", true)}},
			want: updatePlan{Outdated: 2, Migrate: keys("a"), Requeue: 30 * time.Second}},
		{name: "a VMI migrating already is not migrated again",
			in:   updateInput{Strategy: live, Deployed: true, Now: now, VMIs: []updateVMI{{Key: key("a"), Known: true, Outdated: true, Labelled: true, Migratable: true, Migrating: true}}},
			want: updatePlan{Outdated: 1}},
		{name: "LiveMigrate and Evict: migrations first, evictions of the others share the batch",
			in:   updateInput{Strategy: both, Deployed: true, Now: now, VMIs: []updateVMI{outdated("m", true), outdated("e1", false), outdated("e2", false)}},
			want: updatePlan{Outdated: 3, Migrate: keys("m"), Evict: keys("e1"), Requeue: time.Minute}},
		{name: "Evict alone evicts migratable VMIs too",
			in:   updateInput{Strategy: evict, Deployed: true, Now: now, VMIs: []updateVMI{outdated("m", true)}},
			want: updatePlan{Outdated: 1, Evict: keys("m")}},
		{name: "KubeVirt's defaults: 10 per minute",
			in: updateInput{Strategy: v1.KubeVirtWorkloadUpdateStrategy{WorkloadUpdateMethods: []v1.WorkloadUpdateMethod{v1.WorkloadUpdateMethodLiveMigrate}},
				Deployed: true, Now: now, VMIs: func() []updateVMI {
					var out []updateVMI
					for _, n := range "abcdefghijkl" {
						out = append(out, outdated(string(n), true))
					}
					return out
				}()},
			want: updatePlan{Outdated: 12, Migrate: keys("a", "b", "c", "d", "e", "f", "g", "h", "i", "j"), Requeue: time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, planWorkloadUpdate(tc.in))
		})
	}
}
