package vmispec

import (
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Live migration, as virt-controller, virt-handler and virt-launcher agree
// on it.
const (
	// SocketRootDir is the launcher's socket directory in its pod (the
	// SocketsVolume emptyDir).
	SocketRootDir = "/var/run/kubevmm/sockets"
	// GatewayMAC is the MAC address of the tap (the guest's gateway,
	// GatewayIP) in every launcher pod. It is the same in every pod so
	// that a migrated guest's neighbour entry for its gateway stays right
	// on the target. Derived guest MACs start 02:6b:76, never like this.
	GatewayMAC = "02:00:00:6b:76:01"
	// MigrationPort is reserved for live migration in every launcher pod:
	// the masquerade NAT leaves it alone, so the guest never gets it
	// (KubeVirt reserves 49152 and 49153 the same way). The stream itself
	// goes between the handlers (see MigrationInSocket).
	MigrationPort = 49152
	// IncomingEnv, on a migration target pod's launcher, is the address it
	// receives the migration on: MigrationInSocket in its socket directory.
	IncomingEnv = "KUBEVMM_MIGRATION_INCOMING"
	// MigrationInSocket, in a target launcher's socket directory, is where
	// its VMM waits for the guest; the target's virt-handler joins the
	// authenticated stream from the source's handler to it.
	MigrationInSocket = "migration-in.sock"
	// HandlerMigrationPort is where every virt-handler accepts migration
	// streams from the other handlers, over TLS (its API is on 8186, its
	// health probes on 8187).
	HandlerMigrationPort = 8188
	// MigrationOutSocket, in a source launcher's socket directory, is where
	// its virt-handler waits for the VMM's outgoing stream and carries it
	// to the target's handler over TLS.
	MigrationOutSocket = "migration-out.sock"
	// SocketsVolume is the launcher pod's emptyDir holding its socket
	// directory; virt-handler reaches it in the kubelet's directory of the
	// pod (<kubelet root>/pods/<pod UID>/volumes/kubernetes.io~empty-dir/
	// sockets), so every launcher pod, a migration's target included, has
	// its own, gone with the pod.
	SocketsVolume = "sockets"
)

// IsMigrationTarget reports whether the pod is the target of a migration
// that has not (yet) made it the VMI's launcher pod.
func IsMigrationTarget(pod *corev1.Pod) bool {
	_, ok := pod.Labels[v1.MigrationJobLabel]
	return ok
}

// PodEnded reports whether the pod's containers ended for good (its
// launcher exited): it will never answer again.
func PodEnded(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// PodDown reports whether the pod's launcher ended or is being torn down.
func PodDown(p *corev1.Pod) bool {
	return p.DeletionTimestamp != nil || PodEnded(p)
}

// ActiveLauncherPod is the pod whose launcher runs (or will run) the VMI's
// guest, among the VMI's launcher pods:
//
//   - once the VMI's migration completed, its target pod, whatever state
//     it is in (the guest is there now, or nowhere);
//   - otherwise one that is not a migration target: the oldest that still
//     runs, else the oldest not being deleted, else the oldest. (After a
//     migration the ended source pod stays until the VMI goes; the target,
//     no longer labelled a target, is the one that runs.)
//
// virt-controller and virt-handler both decide with it, so they never
// disagree on which launcher speaks for the VMI.
func ActiveLauncherPod(vmi *v1.VirtualMachineInstance, pods []*corev1.Pod) *corev1.Pod {
	var own []*corev1.Pod
	for _, p := range pods {
		if p.Labels[v1.CreatedByLabel] != string(vmi.UID) || !metav1.IsControlledBy(p, vmi) {
			continue
		}
		own = append(own, p)
	}
	if ms := vmi.Status.MigrationState; ms != nil && ms.Completed && !ms.Failed && ms.TargetPod != "" {
		for _, p := range own {
			if p.Name == ms.TargetPod {
				return p
			}
		}
		return nil
	}
	var cand []*corev1.Pod
	for _, p := range own {
		if !IsMigrationTarget(p) {
			cand = append(cand, p)
		}
	}
	sort.SliceStable(cand, func(i, j int) bool {
		return cand[i].CreationTimestamp.Before(&cand[j].CreationTimestamp)
	})
	for _, p := range cand {
		if !PodDown(p) {
			return p
		}
	}
	for _, p := range cand {
		if p.DeletionTimestamp == nil {
			return p
		}
	}
	if len(cand) > 0 {
		return cand[0]
	}
	return nil
}

// Reasons of the LiveMigratable condition (KubeVirt's where it has one).
const (
	ReasonDisksNotLiveMigratable   = "DisksNotLiveMigratable"
	ReasonBackendNotLiveMigratable = "BackendNotLiveMigratable"
	// ReasonInterfaceNotLiveMigratable: a NIC bridge-bound on the pod
	// network; the guest has its pod's IP, which a target pod does not
	// (KubeVirt allows it only with its
	// kubevirt.io/allow-pod-bridge-network-live-migration annotation, a
	// guest that renews its address; kubevmm does not).
	ReasonInterfaceNotLiveMigratable = "InterfaceNotLiveMigratable"
)

// LiveMigratable says whether kubevmm can live-migrate a VMI, and if not,
// why (a condition reason and message). Only our VMM migrates (the QEMU
// backend's migration is not wired to the cluster), and only disks whose
// data both ends see move (see disksNotMigratable); pvcs is what
// virt-controller read of the VMI's PVC volumes, by volume name.
//
// The backend is the one the launcher reports (ActiveBackendAnnotation)
// once the VMI runs: a disk boot's backend depends on the image, which
// only the launcher reads. Before that it is SelectBackend's guess
// without the image.
func LiveMigratable(annotations map[string]string, s *v1.VirtualMachineInstanceSpec, pvcs map[string]PVCInfo) (bool, string, string) {
	b, _, err := SelectBackend(annotations, s, nil)
	if err != nil {
		return false, ReasonBackendNotLiveMigratable, err.Error()
	}
	if a := annotations[ActiveBackendAnnotation]; a != "" {
		b = Backend(a)
	}
	if b != BackendKubevmm {
		return false, ReasonBackendNotLiveMigratable, "the VMI runs on the QEMU backend, which kubevmm cannot live-migrate yet"
	}
	for _, n := range PodNICs(s) {
		if n.PodBridge() {
			return false, ReasonInterfaceNotLiveMigratable, "interface " + n.Name + " is bridge-bound on the pod network: the guest has the pod's IP, which a migration target's pod does not"
		}
	}
	if msg := disksNotMigratable(s, pvcs); msg != "" {
		return false, ReasonDisksNotLiveMigratable, msg
	}
	return true, "", ""
}

// CompletionTimeout is how long a live migration of the VMI may take: the
// configuration's seconds per GiB times the guest memory in GiB (rounded
// up, at least one), as KubeVirt computes it.
func CompletionTimeout(s *v1.VirtualMachineInstanceSpec, perGiB int64) time.Duration {
	gib := int64(1)
	if q, err := GuestMemory(s); err == nil {
		gib = max(1, (q.Value()+(1<<30)-1)>>30)
	}
	return time.Duration(perGiB*gib) * time.Second
}
