// Package handler is virt-handler, the per-node daemon: device plugins
// offering /dev/kvm and /dev/net/tun to launcher pods, the node's
// kubevirt.io/schedulable label, the VMI loop that reads each launcher's
// state over its control socket and writes the VMI status, the pod network
// (masquerade) the launchers wait for, and the node-side API virt-api uses
// for pause, unpause and the serial console.
//
// Logging is controller-runtime's logr, from the reconcile's context (it
// names the VMI): one Info line per state change (a VMI's phase, a
// migration's end on this node); V(1) for what a healthy node repeats,
// e.g. a starting launcher that does not answer yet.
package handler

//go:generate go tool controller-gen rbac:roleName=kubevirt-handler paths=. output:rbac:artifacts:config=rbac
