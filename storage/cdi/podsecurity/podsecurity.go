// Package podsecurity is the security context of CDI's worker pods (the
// importer, the upload server, the clone source): the PodSecurity
// "restricted" level, so that a DataVolume is filled in a namespace that
// enforces it, as upstream CDI's pods are.
package podsecurity

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// UID is the user and group the workers run as: 107, KubeVirt's qemu
// user, which the launchers also run as and which owns a containerDisk's
// disk. The claims' files are the group's through fsGroup (hostpath-csi's
// CSIDriver has fsGroupPolicy File); a Block claim's device is the
// runAsUser's (containerd's device_ownership_from_security_context).
const UID = 107

// Pod is a worker pod's security context.
func Pod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(UID)), RunAsGroup: ptr.To(int64(UID)), FSGroup: ptr.To(int64(UID)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// Container is a worker container's security context: no privilege
// escalation, no capabilities.
func Container() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}
