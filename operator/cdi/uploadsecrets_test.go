package cdi

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/operator/cdi/install"
)

func TestPlanUploadSecrets(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	all := []string{install.SecretTokenKey, install.SecretUploadCA, install.SecretAPIServerCert, install.SecretUploadProxyCert, install.SecretUploadProxyClient}

	leaves := []string{install.SecretAPIServerCert, install.SecretUploadProxyCert, install.SecretUploadProxyClient}
	write, bundle, due, err := planUploadSecrets(nil, now)
	require.NoError(t, err)
	assert.ElementsMatch(t, all, keys(write), "everything is made")
	assert.Equal(t, write[install.SecretUploadCA][corev1.TLSCertKey], bundle, "one CA, the bundle")
	assert.Equal(t, now.Add(uploadCerts.Server.Duration-uploadCerts.Server.RenewBefore), due, "the leaves are due first")
	for _, n := range append(leaves, install.SecretUploadCA) {
		assert.Equal(t, bundle, write[n]["ca.crt"], n)
	}

	stored := write
	again, bundle2, _, err := planUploadSecrets(stored, now.Add(time.Hour))
	require.NoError(t, err)
	assert.Empty(t, again, "nothing due: nothing written")
	assert.Equal(t, bundle, bundle2)

	// The leaves are due: remade by the same CA.
	later, bundle3, _, err := planUploadSecrets(stored, due.Add(time.Minute))
	require.NoError(t, err)
	assert.ElementsMatch(t, leaves, keys(later))
	assert.Equal(t, bundle, bundle3)

	// The CA is due: a new one joins the bundle beside the old, and the
	// leaves, still valid, keep their certificates and trust both: an
	// upload under way goes on through the rotation.
	caDue := now.Add(uploadCerts.CA.Duration - uploadCerts.CA.RenewBefore).Add(time.Minute)
	pre, _, _, err := planUploadSecrets(merge(stored, later), caDue.Add(-time.Hour)) // leaves an hour old then
	require.NoError(t, err)
	assert.ElementsMatch(t, leaves, keys(pre), "only the leaves, by the same CA")
	stored = merge(merge(stored, later), pre)
	rotated, overlap, _, err := planUploadSecrets(stored, caDue)
	require.NoError(t, err)
	require.Contains(t, rotated, install.SecretUploadCA)
	assert.NotEqual(t, stored[install.SecretUploadCA][corev1.TLSCertKey], rotated[install.SecretUploadCA][corev1.TLSCertKey], "a new CA")
	cas, err := certs.ParseBundle(overlap)
	require.NoError(t, err)
	assert.Len(t, cas, 2, "the new CA and the previous")
	assert.Contains(t, string(overlap), string(stored[install.SecretUploadCA][corev1.TLSCertKey]), "the previous CA stays trusted")
	for _, n := range leaves {
		assert.Equal(t, overlap, rotated[n]["ca.crt"], n)
		assert.Equal(t, stored[n][corev1.TLSCertKey], rotated[n][corev1.TLSCertKey], "%s: its certificate kept until due", n)
	}

	// A lost CA: a new one and every leaf with it; the token key stays.
	noCA := maps.Clone(write)
	delete(noCA, install.SecretUploadCA)
	fresh, bundle4, _, err := planUploadSecrets(noCA, now.Add(time.Hour))
	require.NoError(t, err)
	assert.ElementsMatch(t, append(leaves, install.SecretUploadCA), keys(fresh))
	assert.NotEqual(t, bundle, bundle4)
	for _, n := range leaves {
		assert.Equal(t, bundle4, fresh[n]["ca.crt"], n)
		assert.NotEqual(t, write[n][corev1.TLSCertKey], fresh[n][corev1.TLSCertKey], "%s: remade by the new CA", n)
	}

	// A damaged token key is made anew.
	bad := maps.Clone(write)
	bad[install.SecretTokenKey] = map[string][]byte{"id_ecdsa": []byte("junk")}
	fixed, _, _, err := planUploadSecrets(bad, now.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, []string{install.SecretTokenKey}, keys(fixed))
}

func merge(a, b map[string]map[string][]byte) map[string]map[string][]byte {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func keys(m map[string]map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
