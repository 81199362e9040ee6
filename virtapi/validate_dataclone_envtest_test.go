package virtapi

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubevmm/kubevmm/api/cdi/crds"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// A VM's dataVolumeTemplate cloning from another namespace, asked of a
// real API server's RBAC: refused naming the template's source.pvc or
// sourceRef until the VM's creator may create datavolumes/source in the
// source namespace (a DataSource's, when it is missing); a clone within
// the VM's namespace needs no right.
func TestValidateVMClonesEnvtest(t *testing.T) {
	cdiCRDs, err := crds.All()
	require.NoError(t, err)
	_, c := apiserver.Start(t, func(e *envtest.Environment) { e.CRDs = append(e.CRDs, cdiCRDs...) })
	ctx := context.Background()
	require.NoError(t, cdiv1.AddToScheme(c.Scheme()))
	for _, ns := range []string{"ns", "golden"} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	require.NoError(t, c.Create(ctx, &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "fedora"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "fedora"}}}}))
	s := &Server{Client: c}
	review := func(spec string) *admissionv1.AdmissionResponse {
		raw, err := json.Marshal(dvVM(t, spec))
		require.NoError(t, err)
		return s.validateVMClones(ctx, &admissionv1.AdmissionRequest{Operation: admissionv1.Create, Namespace: "ns",
			UserInfo: authnv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}, Object: runtime.RawExtension{Raw: raw}})
	}
	cases := []struct {
		name, spec, refused, what string // refused: the field named while alice may not clone from golden, what: the source named
	}{
		{"pvc in another namespace", `{"source":{"pvc":{"namespace":"golden","name":"fedora"}},"storage":{}}`, "spec.dataVolumeTemplates[0].spec.source.pvc: Forbidden", "PVC golden/fedora"},
		{"sourceRef to a claim in another namespace", `{"sourceRef":{"kind":"DataSource","namespace":"golden","name":"fedora"},"storage":{}}`, "spec.dataVolumeTemplates[0].spec.sourceRef: Forbidden", "PVC golden/fedora"},
		// Not there yet (a golden image importing): the namespace it will
		// be read from is the DataSource's.
		{"sourceRef to a missing DataSource", `{"sourceRef":{"kind":"DataSource","namespace":"golden","name":"missing"},"storage":{}}`, "spec.dataVolumeTemplates[0].spec.sourceRef: Forbidden", "DataSource golden/missing"},
		{"pvc in the VM's namespace", `{"source":{"pvc":{"name":"golden"}},"storage":{}}`, "", ""},
		{"import", dvSpecHTTP, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := review(tc.spec)
			if tc.refused == "" {
				assert.True(t, resp.Allowed, "%+v", resp.Result)
				return
			}
			require.False(t, resp.Allowed)
			assert.Contains(t, resp.Result.Message, tc.refused)
			assert.Contains(t, resp.Result.Message, `user "alice" may not clone `+tc.what)
		})
	}

	require.NoError(t, c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "cloner"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"datavolumes/source"}, Verbs: []string{"create"}}}}))
	require.NoError(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "cloner"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cloner"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}))
	apiserver.WaitAllowed(t, c, authzv1.SubjectAccessReviewSpec{User: "alice",
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: "golden", Verb: "create", Group: cdiv1.GroupName, Resource: "datavolumes", Subresource: "source"}})
	for _, tc := range cases {
		t.Run(tc.name+" once alice may clone from golden", func(t *testing.T) {
			resp := review(tc.spec)
			assert.True(t, resp.Allowed, "%+v", resp.Result)
		})
	}
}
