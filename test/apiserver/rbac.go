package apiserver

import (
	"context"
	"fmt"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WaitAllowed waits until the API server's authorizer allows what spec
// asks (its user, groups, and resource or non-resource attributes). A
// Role or binding just created is not in force at once:
// the authorizer sees it through an informer, a moment later (longer on
// a loaded machine), so a test that grants and then relies on the grant
// waits for it first, asking as a webhook would (a SubjectAccessReview).
func WaitAllowed(t testing.TB, c client.Client, spec authzv1.SubjectAccessReviewSpec) {
	t.Helper()
	what := fmt.Sprintf("%s allowed %+v", spec.User, spec.ResourceAttributes)
	if spec.NonResourceAttributes != nil {
		what = fmt.Sprintf("%s allowed %+v", spec.User, *spec.NonResourceAttributes)
	}
	WaitFor(t, what, func() (bool, string) {
		sar := &authzv1.SubjectAccessReview{Spec: spec}
		if err := c.Create(context.Background(), sar); err != nil {
			return false, err.Error()
		}
		return sar.Status.Allowed, fmt.Sprintf("allowed %v, reason %q", sar.Status.Allowed, sar.Status.Reason)
	})
}
