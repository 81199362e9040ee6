package hco_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	"github.com/kubevmm/kubevmm/operator/hco"
	"github.com/kubevmm/kubevmm/operator/hco/install"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// servedLeaf runs a TLS server on a real socket presenting w's certificate at
// each handshake: a client trusting bundle dials it as the webhook's
// Service and returns the certificate it was shown.
func servedLeaf(t *testing.T, w *hco.WebhookCerts, bundle []byte) *x509.Certificate {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: w.GetCertificate, MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.(*tls.Conn).Handshake()
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}()
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(bundle))
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(),
		&tls.Config{RootCAs: roots, ServerName: install.WebhookService + "." + ns + ".svc", MinVersion: tls.VersionTLS12})
	require.NoError(t, err, "the served certificate verifies with the bundle for the Service's name")
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// The HCO makes its webhook's certificate itself: a pass against a real
// API server makes the CA and the serving certificate, publishes the
// bundle in the webhook configuration's and the CRD's caBundle, and
// serves the leaf; a second pass keeps them; the CR's certConfig
// shortened, the leaf is remade at once and served at the next
// handshake.
func TestWebhookCertsEnvtest(t *testing.T) {
	_, k8s := apiserver.Start(t)
	ctx := context.Background()
	require.NoError(t, apiextensionsv1.AddToScheme(k8s.Scheme()))
	require.NoError(t, hcov1.AddToScheme(k8s.Scheme()))
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	objs, err := install.Objects(install.Config{Namespace: ns, ImageRegistry: "r", ImageTag: "t", ManagedBy: "test"})
	require.NoError(t, err)
	var vwc *admissionregistrationv1.ValidatingWebhookConfiguration
	for _, o := range objs {
		switch o := o.(type) {
		case *apiextensionsv1.CustomResourceDefinition:
			require.Empty(t, o.Spec.Conversion.Webhook.ClientConfig.CABundle, "the operator's to fill")
			require.NoError(t, k8s.Create(ctx, o))
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			vwc = o
		}
	}
	// The CR before the webhook configuration: nothing serves it here.
	hc := &hcov1.HyperConverged{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: hcov1.Name}}
	require.Eventually(t, func() bool { return k8s.Create(ctx, hc) == nil }, 30*time.Second, 200*time.Millisecond, "the CRD served")
	require.NoError(t, k8s.Create(ctx, vwc))

	w := &hco.WebhookCerts{Client: k8s, Reader: k8s, Namespace: ns, Service: install.WebhookService, Secret: install.WebhookSecret,
		CASecret: install.WebhookCASecret, WebhookConfig: install.WebhookConfig, CRD: install.CRDName, Poll: time.Minute}
	_, err = w.GetCertificate(nil)
	require.Error(t, err, "nothing to serve before the first pass")
	due, err := w.Sync(ctx)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(12*time.Hour), due, 2*time.Minute, "upstream's default: 24h leaves renewed 12h before")

	leaf := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.WebhookSecret}, leaf))
	bundle := leaf.Data["ca.crt"]
	require.NotEmpty(t, bundle)
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.WebhookCASecret}, &corev1.Secret{}))
	published := func() {
		t.Helper()
		cur := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.WebhookConfig}, cur))
		assert.Equal(t, bundle, cur.Webhooks[0].ClientConfig.CABundle, "the webhook configuration trusts the bundle")
		c := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.CRDName}, c))
		assert.Equal(t, bundle, c.Spec.Conversion.Webhook.ClientConfig.CABundle, "the conversion webhook trusts the bundle")
	}
	published()
	first := servedLeaf(t, w, bundle)
	assert.Equal(t, leaf.Data["tls.crt"], pemOf(first), "the Secret's certificate is served")

	_, err = w.Sync(ctx)
	require.NoError(t, err)
	again := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.WebhookSecret}, again))
	assert.Equal(t, leaf.Data["tls.crt"], again.Data["tls.crt"], "a valid certificate is kept")

	// Shorter lifetimes on the CR: remade at once (Settle 0), served at
	// the next handshake, trusted by the same bundle. (The webhook
	// configuration is made again around the CR's edit: nothing serves
	// the webhook here; the pass fills the new one's caBundle.)
	require.NoError(t, k8s.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: install.WebhookConfig}}))
	// The API server's admission hears of the deletion from its own watch,
	// a moment later: until then it still calls the webhook, which nothing
	// serves here ("service ... not found").
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, k8s.Patch(ctx, hc, client.RawPatch("application/merge-patch+json",
			[]byte(`{"spec":{"security":{"certConfig":{"server":{"duration":"5m","renewBefore":"2m"}}}}}`))))
	}, 30*time.Second, 200*time.Millisecond, "the CR patched once the webhook configuration is gone")
	vwc.ResourceVersion = ""
	require.NoError(t, k8s.Create(ctx, vwc))
	due, err = w.Sync(ctx)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(3*time.Minute), due, time.Minute)
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.WebhookSecret}, leaf))
	assert.Equal(t, bundle, leaf.Data["ca.crt"], "the same CA")
	published()
	second := servedLeaf(t, w, bundle)
	assert.NotEqual(t, first.SerialNumber, second.SerialNumber, "the new certificate is served")
	assert.LessOrEqual(t, time.Until(second.NotAfter), 5*time.Minute)

	// Someone else's caBundle is put back.
	require.NoError(t, k8s.Patch(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: install.WebhookConfig}},
		client.RawPatch("application/json-patch+json", []byte(`[{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":"Zm9v"}]`))))
	_, err = w.Sync(ctx)
	require.NoError(t, err)
	published()
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
