package token

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
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

// TestClone: a clone token grants its source claim (or its DataSource's
// namespace's claims) into its target only; an extended token is
// cdi-controller's, lives ExtendedLifetime, and is no user token.
func TestClone(t *testing.T) {
	s, v := newPair(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pvc := Clone(cloneauth.Source{Resource: cloneauth.ResourcePVC, Namespace: "golden", Name: "disk"}, "tenant", "copy")
	ds := Clone(cloneauth.Source{Resource: cloneauth.ResourceDataSource, Namespace: "os-images", Name: "fedora"}, "tenant", "copy")
	src := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	for _, tc := range []struct {
		name       string
		p          Payload
		src        types.NamespacedName
		ns, target string
		err        string
	}{
		{"its claim", pvc, src("golden", "disk"), "tenant", "copy", ""},
		{"another claim", pvc, src("golden", "other"), "tenant", "copy", "not of PVC golden/other"},
		{"another namespace", pvc, src("victim", "disk"), "tenant", "copy", "not of PVC victim/disk"},
		{"another target", pvc, src("golden", "disk"), "tenant", "other", "not into tenant/other"},
		{"another target namespace", pvc, src("golden", "disk"), "attacker", "copy", "not into attacker/copy"},
		{"a DataSource's namespace", ds, src("os-images", "fedora-abc123"), "tenant", "copy", ""},
		{"a DataSource naming another namespace", ds, src("victim", "disk"), "tenant", "copy", "not of PVC victim/disk"},
		{"an upload token", Upload("golden", "disk"), src("golden", "disk"), "tenant", "copy", "grants Upload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := s.Sign(tc.p, now)
			require.NoError(t, err)
			got, err := v.Verify(tok, now)
			require.NoError(t, err)
			if tc.err == "" {
				require.NoError(t, got.GrantsClone(tc.src, tc.ns, tc.target))
			} else {
				require.ErrorContains(t, got.GrantsClone(tc.src, tc.ns, tc.target), tc.err)
			}
		})
	}

	short, err := s.Sign(pvc, now)
	require.NoError(t, err)
	ext, err := s.Extend(pvc, now)
	require.NoError(t, err)
	_, err = v.VerifyExtended(short, now)
	require.ErrorContains(t, err, "issuer", "a user's token is no extended one")
	_, err = v.Verify(ext, now)
	require.ErrorContains(t, err, "issuer", "an extended token is no user token (the upload proxy refuses it)")
	got, err := v.VerifyExtended(ext, now.Add(Lifetime+time.Hour))
	require.NoError(t, err, "an extended token outlives a user's")
	require.NoError(t, got.GrantsClone(src("golden", "disk"), "tenant", "copy"))
	_, err = v.VerifyExtended(ext, now.Add(ExtendedLifetime+time.Minute))
	require.ErrorContains(t, err, "expired")
	_, err = s.Extend(Upload("ns", "disk"), now)
	require.ErrorContains(t, err, "only clone tokens")
	// A clone token is no upload token, even for its source claim.
	require.Error(t, got.Grants("golden", "disk"))
}

// TestKeyFilesReread: a key pair read from a mounted Secret follows the
// files when the kubelet updates them (the operator replaced the pair):
// tokens are signed and checked with the new key without a restart, and a
// broken file leaves the key held in use.
func TestKeyFilesReread(t *testing.T) {
	dir := t.TempDir()
	write := func(priv, pub []byte) {
		t.Helper()
		// As the kubelet swaps a Secret's files: each at once.
		for name, b := range map[string][]byte{PrivateKeyKey: priv, PublicKeyKey: pub} {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name+".new"), b, 0o600))
			require.NoError(t, os.Rename(filepath.Join(dir, name+".new"), filepath.Join(dir, name)))
		}
	}
	priv, pub, err := NewKey()
	require.NoError(t, err)
	write(priv, pub)
	s, v, err := LoadPair(dir)
	require.NoError(t, err)
	now := time.Now()
	p := Upload("ns", "disk")
	old, err := s.Sign(p, now)
	require.NoError(t, err)
	got, err := v.Verify(old, now)
	require.NoError(t, err)
	assert.Equal(t, p, got)

	priv2, pub2, err := NewKey()
	require.NoError(t, err)
	write(priv2, pub2)
	_, err = v.Verify(old, now)
	assert.Error(t, err, "a token of the replaced key")
	fresh, err := s.Sign(p, now)
	require.NoError(t, err)
	_, err = v.Verify(fresh, now)
	require.NoError(t, err, "signed and checked with the new pair")
	other, err := NewVerifier(pub2)
	require.NoError(t, err)
	_, err = other.Verify(fresh, now)
	assert.NoError(t, err, "signed with the new private key")

	write([]byte("not a key"), []byte("not a key"))
	again, err := s.Sign(p, now)
	require.NoError(t, err, "a broken file leaves the key in use")
	_, err = v.Verify(again, now)
	assert.NoError(t, err)

	_, _, err = LoadPair(t.TempDir())
	assert.ErrorContains(t, err, "token key", "no files: an error at start, naming them")
}
