package cdi

import (
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubevmm/kubevmm/operator/cdi/install"
)

func TestPlanUploadSecrets(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	all := []string{install.SecretTokenKey, install.SecretUploadCA, install.SecretAPIServerCert, install.SecretUploadProxyCert, install.SecretUploadProxyClient}

	write, ca, due, err := planUploadSecrets(nil, now)
	require.NoError(t, err)
	assert.ElementsMatch(t, all, keys(write), "everything is made")
	assert.Equal(t, write[install.SecretUploadCA][corev1.TLSCertKey], ca)
	assert.Equal(t, now.Add(uploadCerts.Server.Duration-uploadCerts.Server.RenewBefore), due, "the leaves are due first")

	stored := write
	again, ca2, _, err := planUploadSecrets(stored, now.Add(time.Hour))
	require.NoError(t, err)
	assert.Empty(t, again, "nothing due: nothing written")
	assert.Equal(t, ca, ca2)

	// The leaves are due: remade by the same CA.
	later, ca3, _, err := planUploadSecrets(stored, due.Add(time.Minute))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{install.SecretAPIServerCert, install.SecretUploadProxyCert, install.SecretUploadProxyClient}, keys(later))
	assert.Equal(t, ca, ca3)

	// A lost CA: a new one and every leaf with it; the token key stays.
	noCA := maps.Clone(stored)
	delete(noCA, install.SecretUploadCA)
	fresh, ca4, _, err := planUploadSecrets(noCA, now.Add(time.Hour))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{install.SecretUploadCA, install.SecretAPIServerCert, install.SecretUploadProxyCert, install.SecretUploadProxyClient}, keys(fresh))
	assert.NotEqual(t, ca, ca4)
	for _, n := range []string{install.SecretAPIServerCert, install.SecretUploadProxyCert, install.SecretUploadProxyClient} {
		assert.Equal(t, ca4, fresh[n]["ca.crt"], n)
	}

	// A damaged token key is made anew.
	bad := maps.Clone(stored)
	bad[install.SecretTokenKey] = map[string][]byte{"id_ecdsa": []byte("junk")}
	fixed, _, _, err := planUploadSecrets(bad, now.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, []string{install.SecretTokenKey}, keys(fixed))
}

func keys(m map[string]map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
