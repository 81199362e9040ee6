package frontproxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// TestWatcherFollowsTheFrontProxyCA rotates the front-proxy CA as the
// API server publishes it (kube-system/extension-apiserver-authentication
// on a real API server): while old and new are both published a proxy
// certificate of either is believed, once only the new is, only its.
func TestWatcherFollowsTheFrontProxyCA(t *testing.T) {
	_, c := apiserver.Start(t)
	ctx := context.Background()
	now := time.Now()
	cfg := certs.Config{Duration: time.Hour}
	proxyCert := func(ca certs.KeyPair) *x509.Certificate {
		leaf, err := certs.NewLeaf(ca, certs.Leaf{CommonName: "front-proxy-client", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, cfg, now)
		require.NoError(t, err)
		cert, _, err := certs.Parse(leaf)
		require.NoError(t, err)
		return cert
	}
	oldCA, err := certs.NewCA("front-proxy-ca", cfg, now)
	require.NoError(t, err)
	newCA, err := certs.NewCA("front-proxy-ca", cfg, now)
	require.NoError(t, err)
	oldProxy, newProxy := proxyCert(oldCA), proxyCert(newCA)

	publish := func(bundle []byte) {
		cm := &corev1.ConfigMap{}
		require.NoError(t, c.Get(ctx, types.NamespacedName{Namespace: "kube-system", Name: "extension-apiserver-authentication"}, cm))
		cm.Data["requestheader-client-ca-file"] = string(bundle)
		cm.Data["requestheader-allowed-names"] = `["front-proxy-client"]`
		require.NoError(t, c.Update(ctx, cm))
	}
	believed := func(w *frontproxy.Watcher, cert *x509.Certificate) bool {
		r := &http.Request{Header: http.Header{"X-Remote-User": {"alice"}}, TLS: &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}}
		u, err := w.User(r)
		return err == nil && u.Name == "alice"
	}

	publish(oldCA.Cert)
	w, err := frontproxy.NewWatcher(ctx, c)
	require.NoError(t, err)
	assert.True(t, believed(w, oldProxy))
	assert.False(t, believed(w, newProxy), "a CA not published yet")

	publish(append(append([]byte{}, newCA.Cert...), oldCA.Cert...))
	require.NoError(t, w.Refresh(ctx))
	assert.True(t, believed(w, oldProxy), "both published: the old")
	assert.True(t, believed(w, newProxy), "both published: the new")

	publish(newCA.Cert)
	require.NoError(t, w.Refresh(ctx))
	assert.False(t, believed(w, oldProxy), "the old CA withdrawn")
	assert.True(t, believed(w, newProxy))

	// Settings that cannot be read keep the ones held.
	publish([]byte("not a certificate"))
	require.Error(t, w.Refresh(ctx))
	assert.True(t, believed(w, newProxy), "a bad publication changes nothing")
}
