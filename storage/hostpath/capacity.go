package hostpath

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Capacity publishes this node's storage capacity for the scheduler, as
// the external-provisioner does for a driver whose CSIDriver says
// storageCapacity: one CSIStorageCapacity in Namespace per StorageClass
// of the driver whose pool is on this node, its topology this node, its
// capacity (and largest volume) the pool's PoolCapacity. A class whose
// pool is not here gets none: the scheduler then places none of its
// claims' pods on this node. Objects of this node for classes gone are
// deleted.
//
// Sync runs when Trigger is called (the provisioner does, after each
// volume it creates or deletes) and every Interval (what users write into
// volumes, and classes made or changed).
type Capacity struct {
	Client    client.Client
	Driver    *Driver
	Namespace string
	// Owner, when set, owns the objects (the driver's DaemonSet): they
	// go with it.
	Owner    *metav1.OwnerReference
	Interval time.Duration

	once    sync.Once
	trigger chan struct{}
}

func (c *Capacity) ch() chan struct{} {
	c.once.Do(func() { c.trigger = make(chan struct{}, 1) })
	return c.trigger
}

// Trigger asks for a Sync soon; it never blocks.
func (c *Capacity) Trigger() {
	if c == nil {
		return
	}
	select {
	case c.ch() <- struct{}{}:
	default:
	}
}

// Start runs Sync at once, on each Trigger and every Interval until ctx
// ends (a manager.Runnable). A failed Sync is logged and retried at the
// next.
func (c *Capacity) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("capacity")
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		if err := c.Sync(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "publishing storage capacity")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-c.ch():
		}
	}
}

// CapacityName is the CSIStorageCapacity of class on node: a digest, as
// both names together may exceed an object name's length.
func CapacityName(node, class string) string {
	h := sha256.Sum256([]byte(node + "/" + class))
	return "hpp-" + hex.EncodeToString(h[:10])
}

// Sync makes this node's CSIStorageCapacity objects what the pools have.
func (c *Capacity) Sync(ctx context.Context) error {
	var classes storagev1.StorageClassList
	if err := c.Client.List(ctx, &classes); err != nil {
		return fmt.Errorf("listing storage classes: %w", err)
	}
	want := map[string]*storagev1.CSIStorageCapacity{}
	for _, sc := range classes.Items {
		pool := sc.Parameters[StoragePoolParameter]
		if sc.Provisioner != DriverName || c.Driver.Pools[pool] == "" {
			continue
		}
		n, err := c.Driver.PoolCapacity(pool)
		if err != nil {
			return err
		}
		q := resource.NewQuantity(n, resource.BinarySI)
		obj := &storagev1.CSIStorageCapacity{
			ObjectMeta: metav1.ObjectMeta{Name: CapacityName(c.Driver.NodeID, sc.Name), Namespace: c.Namespace,
				Labels: map[string]string{"csi.storage.k8s.io/drivername": DriverName}},
			NodeTopology:     &metav1.LabelSelector{MatchLabels: map[string]string{TopologyKey: c.Driver.NodeID}},
			StorageClassName: sc.Name, Capacity: q, MaximumVolumeSize: q,
		}
		if c.Owner != nil {
			obj.OwnerReferences = []metav1.OwnerReference{*c.Owner}
		}
		want[obj.Name] = obj
	}
	var have storagev1.CSIStorageCapacityList
	if err := c.Client.List(ctx, &have, client.InNamespace(c.Namespace)); err != nil {
		return fmt.Errorf("listing storage capacities: %w", err)
	}
	for i := range have.Items {
		h := &have.Items[i]
		if h.NodeTopology == nil || h.NodeTopology.MatchLabels[TopologyKey] != c.Driver.NodeID {
			continue // another node's
		}
		w, ok := want[h.Name]
		if !ok {
			if err := c.Client.Delete(ctx, h); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting storage capacity %s: %w", h.Name, err)
			}
			continue
		}
		delete(want, h.Name)
		if h.StorageClassName == w.StorageClassName && h.Capacity != nil && h.Capacity.Cmp(*w.Capacity) == 0 {
			continue
		}
		// The class is immutable: recreate when it differs (a hash
		// collision only).
		if h.StorageClassName != w.StorageClassName {
			if err := c.Client.Delete(ctx, h); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("deleting storage capacity %s: %w", h.Name, err)
			}
			want[w.Name] = w
			continue
		}
		h.Capacity, h.MaximumVolumeSize, h.OwnerReferences = w.Capacity, w.MaximumVolumeSize, w.OwnerReferences
		if err := c.Client.Update(ctx, h); err != nil {
			return fmt.Errorf("updating storage capacity %s: %w", h.Name, err)
		}
	}
	for _, w := range want {
		if err := c.Client.Create(ctx, w); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating storage capacity %s: %w", w.Name, err)
		}
	}
	return nil
}

// missingPoolEvent tells a claim of class sc why it cannot be placed when
// sc's pool is not on this node: every node runs the same pools (the
// HostPathProvisioner's), so it is on none, and without its capacity
// object the scheduler never selects a node for the claim.
func (p *Provisioner) missingPoolEvent(pvc *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass) bool {
	pool := sc.Parameters[StoragePoolParameter]
	if _, ok := p.Driver.Pools[pool]; ok {
		return false
	}
	p.Recorder.Eventf(pvc, nil, corev1.EventTypeWarning, "ProvisioningFailed", "Provision",
		"StorageClass %s: storage pool %q is not on node %s (its pools: %v)", sc.Name, pool, p.Driver.NodeID, p.Driver.poolNames())
	return true
}
