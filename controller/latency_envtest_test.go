package controller_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// TestReconcileLatency measures (and only reports) how long the controllers
// take from a VirtualMachine being created to its launcher pod existing:
// VM -> VMI -> pod, two reconcilers and three API writes in between. The
// pod's arrival is taken from a watch, not from polling.
func TestReconcileLatency(t *testing.T) {
	needEnv(t)
	ns := namespace(t)
	ctx := context.Background()
	wc, err := client.NewWithWatch(restConfig, client.Options{Scheme: testScheme})
	require.NoError(t, err)
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
	require.NoError(t, err)
	defer w.Stop()

	// Run 0 warms up (informers of a fresh manager may still be syncing);
	// it is not counted.
	const runs = 10
	var lat []time.Duration
	for i := 0; i <= runs; i++ {
		name := fmt.Sprintf("lat%d", i)
		start := time.Now()
		require.NoError(t, k8s.Create(ctx, newVM(ns, name, v1.RunStrategyAlways)))
		for got := false; !got; {
			select {
			case ev, ok := <-w.ResultChan():
				require.True(t, ok, "pod watch closed")
				if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type == watch.Added && p.Labels[v1.VirtualMachineNameLabel] == name {
					if i > 0 {
						lat = append(lat, time.Since(start))
					}
					got = true
				}
			case <-time.After(2 * time.Minute):
				t.Fatalf("no launcher pod for VM %s", name)
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("VM create -> launcher pod created (watch), %d runs: min %v, median %v, max %v",
		runs, lat[0].Round(time.Millisecond), lat[runs/2].Round(time.Millisecond), lat[runs-1].Round(time.Millisecond))
}
