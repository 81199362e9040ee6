package token

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newPair(t *testing.T) (*Signer, *Verifier) {
	t.Helper()
	priv, pub, err := NewKey()
	require.NoError(t, err)
	s, err := NewSigner(priv)
	require.NoError(t, err)
	v, err := NewVerifier(pub)
	require.NoError(t, err)
	return s, v
}

func TestVerify(t *testing.T) {
	s, v := newPair(t)
	foreign, _ := newPair(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	good, err := s.Sign(Upload("ns1", "disk"), now)
	require.NoError(t, err)
	other, err := foreign.Sign(Upload("ns1", "disk"), now)
	require.NoError(t, err)

	// tamper swaps the payload for one naming another PVC, keeping the
	// signature.
	parts := strings.Split(good, ".")
	require.Len(t, parts, 3)
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(claims), `"disk"`, `"root"`, 1)))
	tampered := strings.Join(parts, ".")

	for _, tc := range []struct {
		name, tok string
		at        time.Time
		err       string
	}{
		{"fresh", good, now, ""},
		{"within lifetime", good, now.Add(Lifetime), ""},
		{"within leeway", good, now.Add(Lifetime + Leeway - time.Second), ""},
		{"expired", good, now.Add(Lifetime + Leeway + time.Second), "expired"},
		{"not yet valid", good, now.Add(-Leeway - time.Second), "not valid yet"},
		{"foreign key", other, now, "error in cryptographic primitive"},
		{"tampered", tampered, now, "error in cryptographic primitive"},
		{"garbage", "not.a.token", now, "token"},
		{"empty", "", now, "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := v.Verify(tc.tok, tc.at)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.NoError(t, p.Grants("ns1", "disk"))
		})
	}
}

func TestGrants(t *testing.T) {
	s, v := newPair(t)
	now := time.Now()
	tok, err := s.Sign(Upload("ns1", "disk"), now)
	require.NoError(t, err)
	p, err := v.Verify(tok, now)
	require.NoError(t, err)
	require.NoError(t, p.Grants("ns1", "disk"))
	require.ErrorContains(t, p.Grants("ns1", "other"), "not Upload to ns1/other")
	require.ErrorContains(t, p.Grants("ns2", "disk"), "not Upload to ns2/disk")
	p.Operation = "Clone"
	require.ErrorContains(t, p.Grants("ns1", "disk"), "grants Clone")
}

func TestBadKeys(t *testing.T) {
	_, err := NewSigner([]byte("nope"))
	require.ErrorContains(t, err, "no PEM block")
	_, pub, err := NewKey()
	require.NoError(t, err)
	_, err = NewSigner(pub)
	require.Error(t, err)
	_, err = NewVerifier([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
	require.ErrorContains(t, err, "token public key")
}
