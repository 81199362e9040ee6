// Package podsecuritytest judges a rendered pod as the API server's
// PodSecurity admission does.
package podsecuritytest

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// RequireRestricted fails t unless pod passes the "restricted" level
// (latest version), naming what it breaks.
func RequireRestricted(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	res := policy.AggregateCheckResults(eval.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec))
	require.True(t, res.Allowed, "pod %s: %v %v", pod.Name, res.ForbiddenReasons, res.ForbiddenDetails)
}
