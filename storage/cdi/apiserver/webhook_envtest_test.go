package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// TestDataVolumeWebhooksEnvtest: cdi-apiserver's DataVolume webhooks
// against a real API server's RBAC. A clone from another namespace is
// refused to a user who may not create datavolumes/source there (both
// webhooks) and, once she may, admitted with a clone token naming the
// source and the DataVolume; a DataSource missing at admission is
// authorized for its own namespace and its token names it. Tokens the
// creator wrote are dropped. An update changing spec.source or
// spec.sourceRef is refused naming it; other updates are admitted.
func TestDataVolumeWebhooksEnvtest(t *testing.T) {
	_, c := apiserver.StartCDI(t)
	ctx := context.Background()
	for _, ns := range []string{"tenant", "golden"} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	require.NoError(t, c.Create(ctx, &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "fedora"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "fedora-abc"}}}}))
	signer, verifier, err := token.NewPair()
	require.NoError(t, err)
	h := (&Server{Client: c, Signer: signer, Callers: anyCaller{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler()
	alice := authnv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}

	post := func(path string, req admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		t.Helper()
		b, err := json.Marshal(admissionv1.AdmissionReview{Request: &req})
		require.NoError(t, err)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(b)))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		var out admissionv1.AdmissionReview
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out))
		require.NotNil(t, out.Response)
		return out.Response
	}
	create := func(path, name string, ann map[string]string, spec string) *admissionv1.AdmissionResponse {
		t.Helper()
		dv := map[string]any{"metadata": map[string]any{"name": name, "namespace": "tenant", "annotations": ann}, "spec": json.RawMessage(spec)}
		raw, err := json.Marshal(dv)
		require.NoError(t, err)
		return post(path, admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: "tenant", Name: name, UserInfo: alice,
			Object: runtime.RawExtension{Raw: raw}})
	}
	// patched is the annotations the mutating webhook's patch leaves.
	patched := func(resp *admissionv1.AdmissionResponse) map[string]string {
		t.Helper()
		require.True(t, resp.Allowed, "%+v", resp.Result)
		if resp.Patch == nil {
			return nil
		}
		var ops []struct {
			Op, Path string
			Value    map[string]string
		}
		require.NoError(t, json.Unmarshal(resp.Patch, &ops))
		require.Len(t, ops, 1)
		require.Equal(t, "/metadata/annotations", ops[0].Path)
		return ops[0].Value
	}
	grants := func(ann map[string]string, src types.NamespacedName, name string) error {
		t.Helper()
		p, err := verifier.Verify(ann[cdiv1.AnnCloneToken], time.Now())
		require.NoError(t, err)
		return p.GrantsClone(src, "tenant", name)
	}
	const fromGolden = `{"source":{"pvc":{"namespace":"golden","name":"fedora-abc"}},"storage":{}}`
	const fromMissing = `{"sourceRef":{"kind":"DataSource","namespace":"golden","name":"not-yet"},"storage":{}}`

	for _, path := range []string{ValidateDataVolumePath, MutateDataVolumePath} {
		resp := create(path, "copy", nil, fromGolden)
		require.False(t, resp.Allowed, path)
		assert.Contains(t, resp.Result.Message, `spec.source.pvc: Forbidden: user "alice" may not clone PVC golden/fedora-abc`)
		resp = create(path, "copy", nil, fromMissing)
		require.False(t, resp.Allowed, path)
		assert.Contains(t, resp.Result.Message, `spec.sourceRef: Forbidden: user "alice" may not clone DataSource golden/not-yet`)
	}
	// A clone within her namespace is hers: a token all the same (it may
	// have been matched for the tokens it carried), and those dropped.
	forged := map[string]string{cdiv1.AnnCloneToken: "forged", cdiv1.AnnExtendedCloneToken: "forged", "keep": "me"}
	ann := patched(create(MutateDataVolumePath, "own", forged, `{"source":{"pvc":{"name":"mine"}},"storage":{}}`))
	assert.Equal(t, "me", ann["keep"])
	assert.NotContains(t, ann, cdiv1.AnnExtendedCloneToken)
	require.NoError(t, grants(ann, types.NamespacedName{Namespace: "tenant", Name: "mine"}, "own"))
	// An import carrying forged tokens loses them.
	ann = patched(create(MutateDataVolumePath, "imp", forged, `{"source":{"http":{"url":"http://example.org/d.img"}},"storage":{}}`))
	assert.Equal(t, map[string]string{"keep": "me"}, ann)

	require.NoError(t, c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "cloner"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"datavolumes/source"}, Verbs: []string{"create"}}}}))
	require.NoError(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "cloner"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cloner"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}))
	apiserver.WaitAllowed(t, c, authzv1.SubjectAccessReviewSpec{User: alice.Username, Groups: alice.Groups,
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: "golden", Verb: "create", Group: cdiv1.GroupName, Resource: "datavolumes", Subresource: "source"}})
	assert.True(t, create(ValidateDataVolumePath, "copy", nil, fromGolden).Allowed)
	ann = patched(create(MutateDataVolumePath, "copy", nil, fromGolden))
	require.NoError(t, grants(ann, types.NamespacedName{Namespace: "golden", Name: "fedora-abc"}, "copy"))
	assert.ErrorContains(t, grants(ann, types.NamespacedName{Namespace: "golden", Name: "other"}, "copy"), "not of PVC golden/other")
	assert.ErrorContains(t, grants(ann, types.NamespacedName{Namespace: "golden", Name: "fedora-abc"}, "other"), "not into tenant/other")
	// Through the DataSource: its claim, as upstream's token names it.
	ann = patched(create(MutateDataVolumePath, "ref", nil, `{"sourceRef":{"kind":"DataSource","namespace":"golden","name":"fedora"},"storage":{}}`))
	p, err := verifier.Verify(ann[cdiv1.AnnCloneToken], time.Now())
	require.NoError(t, err)
	assert.Equal(t, token.Clone(cloneauthPVC("golden", "fedora-abc"), "tenant", "ref"), p)
	// Missing: the DataSource, standing for its namespace's claims.
	ann = patched(create(MutateDataVolumePath, "later", nil, fromMissing))
	require.NoError(t, grants(ann, types.NamespacedName{Namespace: "golden", Name: "anything"}, "later"))
	require.Error(t, grants(ann, types.NamespacedName{Namespace: "elsewhere", Name: "anything"}, "later"))

	update := func(oldSpec, spec string) *admissionv1.AdmissionResponse {
		t.Helper()
		raw := func(spec string) []byte {
			b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "copy", "namespace": "tenant"}, "spec": json.RawMessage(spec)})
			require.NoError(t, err)
			return b
		}
		return post(ValidateDataVolumePath, admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Update, Namespace: "tenant", Name: "copy", UserInfo: alice,
			OldObject: runtime.RawExtension{Raw: raw(oldSpec)}, Object: runtime.RawExtension{Raw: raw(spec)}})
	}
	resp := update(`{"source":{"pvc":{"name":"mine"}},"storage":{}}`, `{"source":{"pvc":{"namespace":"victim","name":"disk"}},"storage":{}}`)
	require.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "spec.source: Forbidden: cannot be changed once the DataVolume is created")
	resp = update(`{"sourceRef":{"kind":"DataSource","name":"fedora"},"storage":{}}`, `{"sourceRef":{"kind":"DataSource","name":"other"},"storage":{}}`)
	require.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "spec.sourceRef: Forbidden")
	assert.True(t, update(fromGolden, `{"source":{"pvc":{"namespace":"golden","name":"fedora-abc"}},"storage":{"storageClassName":"x"}}`).Allowed)
}

func cloneauthPVC(ns, name string) cloneauth.Source {
	return cloneauth.Source{Resource: cloneauth.ResourcePVC, Namespace: ns, Name: name}
}
