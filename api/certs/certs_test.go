package certs

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	t0      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	caCfg   = Config{Duration: time.Hour, RenewBefore: 12 * time.Minute}
	leafCfg = Config{Duration: 20 * time.Minute, RenewBefore: 4 * time.Minute}
	server  = Leaf{CommonName: "virt-api.kubevirt.svc", DNSNames: []string{"virt-api.kubevirt.svc"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
)

func mustCA(t *testing.T, at time.Time) KeyPair {
	t.Helper()
	ca, err := NewCA("test-ca", caCfg, at)
	require.NoError(t, err)
	return ca
}

func mustBundle(t *testing.T, pems ...[]byte) []*x509.Certificate {
	t.Helper()
	var all []byte
	for _, p := range pems {
		all = append(all, p...)
	}
	b, err := ParseBundle(all)
	require.NoError(t, err)
	return b
}

func TestValidate(t *testing.T) {
	ok := Strategy{CA: Config{Duration: time.Hour, RenewBefore: 10 * time.Minute}, Server: Config{Duration: 30 * time.Minute, RenewBefore: 5 * time.Minute}}
	for _, tc := range []struct {
		name  string
		edit  func(*Strategy)
		field string
	}{
		{"valid", func(*Strategy) {}, ""},
		{"renewBefore equal to duration", func(s *Strategy) { s.Server.RenewBefore = s.Server.Duration }, "server.renewBefore"},
		{"renewBefore zero", func(s *Strategy) { s.CA.RenewBefore = 0 }, "ca.renewBefore"},
		{"too short", func(s *Strategy) { s.Server.Duration = time.Minute; s.Server.RenewBefore = time.Second }, "server.duration"},
		{"CA shorter than server", func(s *Strategy) { s.Server.Duration = 2 * time.Hour }, "ca.duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			err := s.Validate()
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.field)
		})
	}
}

func TestCheckCA(t *testing.T) {
	ca := mustCA(t, t0)
	other := mustCA(t, t0)
	for _, tc := range []struct {
		name  string
		p     KeyPair
		cfg   Config
		now   time.Time
		renew bool
		due   time.Time
	}{
		{"missing", KeyPair{}, caCfg, t0, true, time.Time{}},
		{"garbage", KeyPair{Cert: []byte("not pem"), Key: ca.Key}, caCfg, t0, true, time.Time{}},
		{"key of another CA", KeyPair{Cert: ca.Cert, Key: other.Key}, caCfg, t0, true, time.Time{}},
		{"fresh", ca, caCfg, t0.Add(time.Minute), false, t0.Add(48 * time.Minute)},
		{"just before renewBefore", ca, caCfg, t0.Add(48*time.Minute - time.Second), false, t0.Add(48 * time.Minute)},
		{"within renewBefore", ca, caCfg, t0.Add(48 * time.Minute), true, time.Time{}},
		{"expired", ca, caCfg, t0.Add(2 * time.Hour), true, time.Time{}},
		{"strategy shortened", ca, Config{Duration: 30 * time.Minute, RenewBefore: 5 * time.Minute}, t0, true, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := CheckCA(tc.p, tc.cfg, tc.now)
			assert.Equal(t, tc.renew, v.Renew, v.Reason)
			assert.True(t, tc.due.Equal(v.Due), "due %v, want %v", v.Due, tc.due)
		})
	}
}

func TestCheckLeaf(t *testing.T) {
	ca := mustCA(t, t0)
	leaf, err := NewLeaf(ca, server, leafCfg, t0)
	require.NoError(t, err)
	newCA := mustCA(t, t0.Add(48*time.Minute))
	client := server
	client.Usages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	for _, tc := range []struct {
		name   string
		p      KeyPair
		l      Leaf
		bundle []*x509.Certificate
		now    time.Time
		renew  bool
		due    time.Time
	}{
		{"missing", KeyPair{}, server, mustBundle(t, ca.Cert), t0, true, time.Time{}},
		{"unparsable", KeyPair{Cert: leaf.Cert, Key: []byte("x")}, server, mustBundle(t, ca.Cert), t0, true, time.Time{}},
		{"fresh", leaf, server, mustBundle(t, ca.Cert), t0.Add(time.Minute), false, t0.Add(16 * time.Minute)},
		{"other usages wanted", leaf, client, mustBundle(t, ca.Cert), t0, true, time.Time{}},
		{"within renewBefore", leaf, server, mustBundle(t, ca.Cert), t0.Add(16 * time.Minute), true, time.Time{}},
		// Overlap: the CA rotated, the leaf signed by the previous one
		// stays until it is due, both CAs being trusted.
		{"signed by a previous CA still in the bundle", leaf, server, mustBundle(t, newCA.Cert, ca.Cert), t0.Add(time.Minute), false, t0.Add(16 * time.Minute)},
		{"signer no longer in the bundle", leaf, server, mustBundle(t, newCA.Cert), t0.Add(time.Minute), true, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := CheckLeaf(tc.p, tc.l, tc.bundle, leafCfg, tc.now)
			assert.Equal(t, tc.renew, v.Renew, v.Reason)
			assert.True(t, tc.due.Equal(v.Due), "due %v, want %v", v.Due, tc.due)
		})
	}
}

// Scheduled tells a renewal the operator may postpone (the pair still
// valid) from one it may not.
func TestScheduled(t *testing.T) {
	ca := mustCA(t, t0)
	assert.True(t, CheckCA(ca, caCfg, t0.Add(50*time.Minute)).Scheduled, "within renewBefore")
	assert.True(t, CheckCA(ca, Config{Duration: 30 * time.Minute, RenewBefore: time.Minute}, t0).Scheduled, "longer than the strategy allows")
	assert.False(t, CheckCA(ca, caCfg, t0.Add(time.Hour)).Scheduled, "expired")
	assert.False(t, CheckCA(KeyPair{}, caCfg, t0).Scheduled, "missing")
}

func TestLeafNeverOutlivesItsCA(t *testing.T) {
	ca := mustCA(t, t0)
	// 55 minutes in, the CA has 5 left: the leaf gets those, not 20.
	leaf, err := NewLeaf(ca, server, leafCfg, t0.Add(55*time.Minute))
	require.NoError(t, err)
	c, _, err := Parse(leaf)
	require.NoError(t, err)
	assert.Equal(t, t0.Add(time.Hour), c.NotAfter.UTC())
}

func TestLeafVerifiesForItsUse(t *testing.T) {
	ca := mustCA(t, t0)
	leaf, err := NewLeaf(ca, server, leafCfg, t0)
	require.NoError(t, err)
	c, _, err := Parse(leaf)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	_, err = c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "virt-api.kubevirt.svc", CurrentTime: t0.Add(time.Minute)})
	require.NoError(t, err)
	_, err = c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: t0.Add(time.Minute), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.Error(t, err, "a server-only certificate must not serve as a client's")
}

func TestBundle(t *testing.T) {
	// CAs made an hour apart, each valid an hour and a half.
	long := Config{Duration: 90 * time.Minute, RenewBefore: 30 * time.Minute}
	var cas [][]byte
	for i := range 6 {
		ca, err := NewCA("ca", long, t0.Add(time.Duration(i)*time.Hour))
		require.NoError(t, err)
		cas = append(cas, ca.Cert)
	}
	certs := func(b []byte) []*x509.Certificate { return mustBundle(t, b) }
	cat := func(pems ...[]byte) []byte {
		var out []byte
		for _, p := range pems {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name          string
		current, prev []byte
		now           time.Time
		want          [][]byte
	}{
		{"first", cas[0], nil, t0, [][]byte{cas[0]}},
		{"unchanged", cas[0], cas[0], t0, [][]byte{cas[0]}},
		{"rotated: the previous CA stays", cas[1], cas[0], t0.Add(time.Hour), [][]byte{cas[1], cas[0]}},
		{"the previous CA expired", cas[1], cat(cas[1], cas[0]), t0.Add(91 * time.Minute), [][]byte{cas[1]}},
		{"garbage previous bundle is dropped", cas[1], []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), t0, [][]byte{cas[1]}},
		// Unexpired CAs only arise like this with clocks set back; the cap
		// still holds.
		{"capped, newest kept", cas[5], cat(cas[0], cas[1], cas[2], cas[3], cas[4]), t0, [][]byte{cas[5], cas[4], cas[3], cas[2]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Bundle(tc.current, tc.prev, tc.now)
			require.NoError(t, err)
			got := certs(b)
			require.Len(t, got, len(tc.want))
			for i, w := range tc.want {
				assert.True(t, got[i].Equal(certs(w)[0]), "certificate %d", i)
			}
		})
	}
	_, err := Bundle(cat(cas[0], cas[1]), nil, t0)
	require.Error(t, err, "a current CA of two certificates")
}
