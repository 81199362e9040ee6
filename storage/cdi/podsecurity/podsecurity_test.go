package podsecurity_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevmm/kubevmm/storage/cdi/podsecurity"
)

// The workers run as 107 (user and group), own what they write on a
// claim through fsGroup 107, and each call is a fresh copy: a controller
// editing its pod's context changes no other pod's.
func TestContexts(t *testing.T) {
	p := podsecurity.Pod()
	assert.Equal(t, &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(107)), RunAsGroup: ptr.To(int64(107)),
		FSGroup: ptr.To(int64(107)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}, p)
	c := podsecurity.Container()
	assert.Equal(t, &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}, c)
	*p.RunAsUser, c.Capabilities.Drop[0] = 0, "NONE"
	assert.Equal(t, int64(107), *podsecurity.Pod().RunAsUser)
	assert.Equal(t, corev1.Capability("ALL"), podsecurity.Container().Capabilities.Drop[0])
}
