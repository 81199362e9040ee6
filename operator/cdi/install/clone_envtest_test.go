package install

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubevmm/kubevmm/api/cdi/crds"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/storage/cdi/apiserver"
	"github.com/kubevmm/kubevmm/storage/cdi/serve"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	testapi "github.com/kubevmm/kubevmm/test/apiserver"
)

// CDI's clone authorization against a real API server with RBAC, which
// admits DataVolumes through the webhook CloneAuthObjects registers,
// served by cdi-apiserver's handler: a user bound to cdi.kubevirt.io:edit
// in the target namespace only may create DataVolumes there (blank, or a
// clone within it) but is refused a clone from another namespace, by
// source.pvc or by a sourceRef whose DataSource names a claim there, the
// refusal naming the field, and so is a sourceRef to a DataSource missing
// there. Once bound to cdi.kubevirt.io:edit in the source namespace too,
// the same clones are admitted, each with its clone token (the mutating
// webhook's), tokens the user wrote are dropped, and an update changing
// a DataVolume's source is refused naming the field.
func TestCloneAuthorizationEnvtest(t *testing.T) {
	var env *envtest.Environment
	objs := CloneAuthObjects(Config{})
	cdiCRDs, err := crds.All()
	require.NoError(t, err)
	cfg, admin := testapi.Start(t, func(e *envtest.Environment) {
		env = e
		e.CRDs = append(e.CRDs, cdiCRDs...)
		e.WebhookInstallOptions.ValidatingWebhooks = []*admissionregistrationv1.ValidatingWebhookConfiguration{
			objs[0].(*admissionregistrationv1.ValidatingWebhookConfiguration)}
		e.WebhookInstallOptions.MutatingWebhooks = []*admissionregistrationv1.MutatingWebhookConfiguration{
			objs[1].(*admissionregistrationv1.MutatingWebhookConfiguration)}
	})
	ctx := context.Background()
	require.NoError(t, cdiv1.AddToScheme(admin.Scheme()))
	wo := env.WebhookInstallOptions
	// cdi-apiserver's own client (its scheme must know DataSources).
	scheme, err := serve.Scheme()
	require.NoError(t, err)
	webhookClient, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	signer, verifier, err := token.NewPair()
	require.NoError(t, err)
	callers, err := frontproxy.Load(t.Context(), webhookClient)
	require.NoError(t, err)
	s := &apiserver.Server{Client: webhookClient, Callers: callers, Signer: signer, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cert, err := tls.LoadX509KeyPair(filepath.Join(wo.LocalServingCertDir, "tls.crt"), filepath.Join(wo.LocalServingCertDir, "tls.key"))
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort)),
		&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert})
	require.NoError(t, err)
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serving the webhook: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })

	for _, o := range objs[2:] {
		require.NoError(t, admin.Create(ctx, o))
	}
	for _, ns := range []string{"golden", "target"} {
		require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	bind := func(ns string) {
		require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: EditRole},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}))
		testapi.WaitAllowed(t, admin, authzv1.SubjectAccessReviewSpec{User: "alice",
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: cdiv1.GroupName, Resource: "datavolumes"}})
	}
	bind("target")
	require.NoError(t, admin.Create(ctx, &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "fedora"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "fedora"}}}}))
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"system:authenticated"}}
	alice, err := client.New(c, client.Options{Scheme: admin.Scheme()})
	require.NoError(t, err)

	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	dv := func(name string, src *cdiv1.DataVolumeSource, ref *cdiv1.DataVolumeSourceRef) *cdiv1.DataVolume {
		return &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "target", Name: name},
			Spec: cdiv1.DataVolumeSpec{Source: src, SourceRef: ref, Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: size}}}}
	}
	pvc := func(ns string) *cdiv1.DataVolumeSource {
		return &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: ns, Name: "fedora"}}
	}
	ref := func(name string) *cdiv1.DataVolumeSourceRef {
		return &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Namespace: ptr.To("golden"), Name: name}
	}
	refused := []struct {
		name, field, what string
		dv                *cdiv1.DataVolume
		src               types.NamespacedName // what the token grants, once admitted
	}{
		{"pvc in another namespace", "spec.source.pvc", "PVC golden/fedora", dv("cross", pvc("golden"), nil), types.NamespacedName{Namespace: "golden", Name: "fedora"}},
		{"sourceRef to a claim in another namespace", "spec.sourceRef", "PVC golden/fedora", dv("by-ref", nil, ref("fedora")), types.NamespacedName{Namespace: "golden", Name: "fedora"}},
		// Its namespace is the one it will be read from.
		{"sourceRef to a DataSource missing in another namespace", "spec.sourceRef", "DataSource golden/missing", dv("missing", nil, ref("missing")),
			types.NamespacedName{Namespace: "golden", Name: "any-claim-there"}},
	}
	for _, tc := range refused {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			err := alice.Create(ctx, tc.dv.DeepCopy())
			require.Error(t, err)
			assert.True(t, apierrors.IsForbidden(err), "%v", err)
			assert.Contains(t, err.Error(), tc.field+`: Forbidden: user "alice" may not clone `+tc.what)
		})
	}
	for _, tc := range []struct {
		name string
		dv   *cdiv1.DataVolume
	}{
		{"blank", dv("blank", &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}}, nil)},
		{"pvc in the same namespace", dv("same", pvc("target"), nil)},
		{"pvc with no namespace", dv("default-ns", pvc(""), nil)},
	} {
		t.Run(tc.name+" is admitted", func(t *testing.T) {
			require.NoError(t, alice.Create(ctx, tc.dv))
		})
	}

	bind("golden")
	for _, tc := range refused {
		t.Run(tc.name+" is admitted with datavolumes/source there", func(t *testing.T) {
			d := tc.dv.DeepCopy()
			// Tokens she wrote herself are dropped.
			d.Annotations = map[string]string{cdiv1.AnnExtendedCloneToken: "mine", "keep": "me"}
			require.NoError(t, alice.Create(ctx, d))
			assert.Equal(t, "me", d.Annotations["keep"])
			assert.NotContains(t, d.Annotations, cdiv1.AnnExtendedCloneToken)
			p, err := verifier.Verify(d.Annotations[cdiv1.AnnCloneToken], time.Now())
			require.NoError(t, err, "the clone token")
			require.NoError(t, p.GrantsClone(tc.src, "target", d.Name))
		})
	}

	t.Run("the source cannot change", func(t *testing.T) {
		d := &cdiv1.DataVolume{}
		require.NoError(t, alice.Get(ctx, client.ObjectKey{Namespace: "target", Name: "same"}, d))
		d.Spec.Source.PVC.Namespace = "golden"
		err := alice.Update(ctx, d)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "spec.source: Forbidden: cannot be changed once the DataVolume is created")
		require.NoError(t, alice.Get(ctx, client.ObjectKey{Namespace: "target", Name: "same"}, d))
		d.Spec.Source, d.Spec.SourceRef = nil, ref("fedora")
		require.Error(t, alice.Update(ctx, d))
		// Other changes do not even reach cdi-apiserver.
		require.NoError(t, alice.Get(ctx, client.ObjectKey{Namespace: "target", Name: "same"}, d))
		d.Labels = map[string]string{"a": "b"}
		require.NoError(t, alice.Update(ctx, d))
	})
}
