// Package bridgemarker publishes a node's Linux bridges as node extended
// resources, bridge.network.kubevirt.io/<bridge> (capacity 1000, as
// kubevirt/bridge-marker does): a NetworkAttachmentDefinition annotated
// k8s.v1.cni.cncf.io/resourceName with one of them makes the pods using
// it request it, so they are scheduled only where the bridge exists.
package bridgemarker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/vishvananda/netlink"
)

// ResourcePrefix is the resource name of a bridge without the bridge.
const ResourcePrefix = "bridge.network.kubevirt.io/"

// Capacity is how many pods one bridge takes: many, it is not consumed.
var Capacity = resource.NewQuantity(1000, resource.DecimalSI)

// ResourceName is the node resource of a bridge.
func ResourceName(bridge string) corev1.ResourceName {
	return corev1.ResourceName(ResourcePrefix + bridge)
}

// Patch is the merge patch of a node's status that makes its bridge
// resources exactly bridges (capacity and allocatable Capacity each),
// nil when they already are. Bridges whose name cannot be a resource name
// are skipped, and returned.
func Patch(bridges []string, status corev1.NodeStatus) (patch []byte, skipped []string, err error) {
	want := map[corev1.ResourceName]bool{}
	for _, b := range bridges {
		rn := ResourceName(b)
		if len(validation.IsQualifiedName(string(rn))) > 0 {
			skipped = append(skipped, b)
			continue
		}
		want[rn] = true
	}
	changes := map[string]map[corev1.ResourceName]any{}
	for field, list := range map[string]corev1.ResourceList{"capacity": status.Capacity, "allocatable": status.Allocatable} {
		c := map[corev1.ResourceName]any{}
		for rn := range want {
			if q, ok := list[rn]; !ok || q.Cmp(*Capacity) != 0 {
				c[rn] = Capacity.String()
			}
		}
		for rn := range list {
			if strings.HasPrefix(string(rn), ResourcePrefix) && !want[rn] {
				c[rn] = nil // merge patch: null removes
			}
		}
		if len(c) > 0 {
			changes[field] = c
		}
	}
	if len(changes) == 0 {
		return nil, skipped, nil
	}
	patch, err = json.Marshal(map[string]any{"status": changes})
	return patch, skipped, err
}

// Bridges are the Linux bridges of the current network namespace.
func Bridges() ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var out []string
	for _, l := range links {
		if l.Type() == "bridge" {
			out = append(out, l.Attrs().Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Marker keeps one node's bridge resources current.
type Marker struct {
	Client kubernetes.Interface
	Node   string
	// Interval is how often it resyncs besides on link changes (the
	// kubelet or a person may have changed the node's status).
	Interval time.Duration
}

// Sync publishes the bridges there are now.
func (m *Marker) Sync(ctx context.Context) error {
	bridges, err := Bridges()
	if err != nil {
		return err
	}
	node, err := m.Client.CoreV1().Nodes().Get(ctx, m.Node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s: %w", m.Node, err)
	}
	patch, skipped, err := Patch(bridges, node.Status)
	if err != nil {
		return err
	}
	if len(skipped) > 0 {
		slog.Warn("bridges whose names cannot be resource names are not published", "bridges", skipped)
	}
	if patch == nil {
		return nil
	}
	if _, err := m.Client.CoreV1().Nodes().Patch(ctx, m.Node, k8stypes.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patching node %s's status: %w", m.Node, err)
	}
	slog.Info("bridges published", "node", m.Node, "bridges", bridges)
	return nil
}

// Run syncs at start, whenever a link appears, changes or goes, and every
// Interval, until ctx ends.
func (m *Marker) Run(ctx context.Context) error {
	updates := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribe(updates, ctx.Done()); err != nil {
		return fmt.Errorf("subscribing to link updates: %w", err)
	}
	t := time.NewTicker(m.Interval)
	defer t.Stop()
	for {
		if err := m.Sync(ctx); err != nil {
			slog.Error("sync", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case _, ok := <-updates:
			if !ok {
				return fmt.Errorf("link updates ended")
			}
			// One sync for a burst of updates.
			for len(updates) > 0 {
				<-updates
			}
		}
	}
}
