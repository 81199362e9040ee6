package virt

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/api/certs"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/operator/virt/install"
)

// stored is what a plan leaves in the cluster, read back.
func stored(p certPlan) CertsRead {
	return CertsRead{CA: p.ca, Bundle: p.bundle, Leaves: p.leaves}
}

func renewedNames(p certPlan) []string {
	var out []string
	for _, r := range p.renewed {
		name, _, _ := strings.Cut(r, ":")
		out = append(out, name)
	}
	return out
}

// A plan's life under a short strategy, on an injected clock: made from
// nothing, kept while valid, leaves renewed when due, the CA renewed
// when due with the previous one kept in the bundle, so the leaves it
// signed stay trusted until they are renewed in turn.
func TestPlanCertificates(t *testing.T) {
	st := certs.Strategy{CA: certs.Config{Duration: time.Hour, RenewBefore: 20 * time.Minute}, Server: certs.Config{Duration: 30 * time.Minute, RenewBefore: 5 * time.Minute}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	allLeaves := []string{install.SecretAPICerts, install.SecretHandlerCerts, install.SecretAPIClient}
	const settle = 2 * time.Minute

	p, err := planCertificates(CertsRead{}, st, "kubevirt", t0, settle)
	require.NoError(t, err)
	assert.Equal(t, append([]string{CASecret}, allLeaves...), renewedNames(p), "everything made")
	assert.Equal(t, t0.Add(25*time.Minute), p.due, "the leaves are due first")
	roots, err := certs.ParseBundle(p.bundle)
	require.NoError(t, err)
	require.Len(t, roots, 1)
	for _, l := range leaves("kubevirt") {
		c, _, err := certs.Parse(p.leaves[l.secret])
		require.NoError(t, err, l.secret)
		pool := x509.NewCertPool()
		pool.AddCert(roots[0])
		_, err = c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0, KeyUsages: l.spec.Usages})
		require.NoError(t, err, l.secret)
	}
	api, _, err := certs.Parse(p.leaves[install.SecretAPICerts])
	require.NoError(t, err)
	assert.Contains(t, api.DNSNames, "virt-api.kubevirt.svc", "what the API server calls")

	// Valid: kept as it is.
	p1, err := planCertificates(stored(p), st, "kubevirt", t0.Add(time.Minute), settle)
	require.NoError(t, err)
	assert.Empty(t, p1.renewed)
	assert.Equal(t, p.leaves, p1.leaves)
	assert.Equal(t, p.bundle, p1.bundle)

	// The leaves come due; the CA does not.
	p2, err := planCertificates(stored(p1), st, "kubevirt", t0.Add(25*time.Minute), settle)
	require.NoError(t, err)
	assert.Equal(t, allLeaves, renewedNames(p2))
	assert.Equal(t, p.ca, p2.ca)
	assert.Equal(t, t0.Add(40*time.Minute), p2.due, "the CA is due first now")

	// The CA comes due: a new one, the previous one kept in the bundle,
	// and the leaves it signed (not due) kept too.
	p3, err := planCertificates(stored(p2), st, "kubevirt", t0.Add(40*time.Minute), settle)
	require.NoError(t, err)
	assert.Equal(t, []string{CASecret}, renewedNames(p3))
	roots, err = certs.ParseBundle(p3.bundle)
	require.NoError(t, err)
	require.Len(t, roots, 2, "current and previous CA")
	old, _, err := certs.Parse(p2.ca)
	require.NoError(t, err)
	assert.True(t, roots[1].Equal(old))
	assert.Equal(t, p2.leaves, p3.leaves)

	// The next leaves are signed by the new CA; once the previous CA
	// expires it leaves the bundle.
	p4, err := planCertificates(stored(p3), st, "kubevirt", t0.Add(61*time.Minute), settle)
	require.NoError(t, err)
	assert.Equal(t, allLeaves, renewedNames(p4))
	roots, err = certs.ParseBundle(p4.bundle)
	require.NoError(t, err)
	require.Len(t, roots, 1)
	c, _, err := certs.Parse(p4.leaves[install.SecretHandlerCerts])
	require.NoError(t, err)
	assert.NoError(t, c.CheckSignatureFrom(roots[0]))

	// A leaf Secret edited into garbage is remade, alone.
	broken := stored(p4)
	broken.Leaves = map[string]certs.KeyPair{install.SecretAPICerts: p4.leaves[install.SecretAPICerts],
		install.SecretHandlerCerts: {Cert: []byte("x"), Key: []byte("y")}, install.SecretAPIClient: p4.leaves[install.SecretAPIClient]}
	p5, err := planCertificates(broken, st, "kubevirt", t0.Add(62*time.Minute), settle)
	require.NoError(t, err)
	assert.Equal(t, []string{install.SecretHandlerCerts}, renewedNames(p5))
}

// A strategy shortened mid-way remakes the CA at once, but the leaves,
// still valid, only once the new CA has been published for the settle
// time: a component whose mounted bundle lacks it would refuse them.
func TestPlanCertificatesLeavesWaitForANewCA(t *testing.T) {
	const settle = 2 * time.Minute
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	long := certs.Strategy{CA: certs.Config{Duration: time.Hour, RenewBefore: 20 * time.Minute}, Server: certs.Config{Duration: 30 * time.Minute, RenewBefore: 5 * time.Minute}}
	short := certs.Strategy{CA: certs.Config{Duration: 30 * time.Minute, RenewBefore: 10 * time.Minute}, Server: certs.Config{Duration: 10 * time.Minute, RenewBefore: 2 * time.Minute}}
	p, err := planCertificates(CertsRead{}, long, "kubevirt", t0, settle)
	require.NoError(t, err)

	p1, err := planCertificates(stored(p), short, "kubevirt", t0.Add(5*time.Minute), settle)
	require.NoError(t, err)
	assert.Equal(t, []string{CASecret}, renewedNames(p1), "only the CA, at once")
	assert.Equal(t, p.leaves, p1.leaves)
	assert.Equal(t, t0.Add(7*time.Minute), p1.due, "back when the new CA has settled")

	p2, err := planCertificates(stored(p1), short, "kubevirt", t0.Add(7*time.Minute), settle)
	require.NoError(t, err)
	assert.Equal(t, []string{install.SecretAPICerts, install.SecretHandlerCerts, install.SecretAPIClient}, renewedNames(p2))
	ca, _, err := certs.Parse(p2.ca)
	require.NoError(t, err)
	leaf, _, err := certs.Parse(p2.leaves[install.SecretAPICerts])
	require.NoError(t, err)
	assert.NoError(t, leaf.CheckSignatureFrom(ca), "signed by the new CA")

	// A leaf that is missing is made at once, whatever the CA's age.
	missing := stored(p1)
	missing.Leaves = map[string]certs.KeyPair{install.SecretAPICerts: p1.leaves[install.SecretAPICerts], install.SecretHandlerCerts: p1.leaves[install.SecretHandlerCerts]}
	p3, err := planCertificates(missing, short, "kubevirt", t0.Add(5*time.Minute), settle)
	require.NoError(t, err)
	assert.Equal(t, []string{install.SecretAPIClient}, renewedNames(p3))
}

func TestStrategyDefaults(t *testing.T) {
	var zero v1.KubeVirtCertificateRotateStrategy
	st, err := strategy(zero)
	require.NoError(t, err)
	assert.Equal(t, certs.Strategy{CA: certs.Config{Duration: 168 * time.Hour, RenewBefore: 168 * time.Hour / 5},
		Server: certs.Config{Duration: 24 * time.Hour, RenewBefore: 24 * time.Hour / 5}}, st)
}
