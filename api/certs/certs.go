// Package certs makes and rotates the self-signed certificates of
// kubevmm's components: a CA, leaf certificates it signs, and the CA
// bundle the components trust. It is pure (the clock is a parameter):
// the operators read Secrets, ask Check what to remake, and write.
//
// Rotation keeps an overlap so that nothing breaks at the switch: a new
// CA joins the bundle beside the previous ones, which stay until they
// expire; a leaf stays as long as a CA of the bundle verifies it and it
// is not within renewBefore of its expiry, so leaves move to the new CA
// one by one, each when due, while every peer still trusts both.
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// Config is one kind of certificate's lifetime.
type Config struct {
	// Duration is how long a new certificate is valid.
	Duration time.Duration
	// RenewBefore: a certificate is remade this long before it expires.
	RenewBefore time.Duration
}

// Strategy is the lifetimes of the CA and of the leaves it signs
// (KubeVirt's certificateRotateStrategy.selfSigned).
type Strategy struct{ CA, Server Config }

// KubeVirt's defaults: CA 7 days, leaves 1 day, each renewed when a
// fifth of its lifetime is left.
const (
	DefaultCADuration     = 168 * time.Hour
	DefaultServerDuration = 24 * time.Hour
)

// DefaultRenewBefore is a fifth of d, KubeVirt's default.
func DefaultRenewBefore(d time.Duration) time.Duration { return d / 5 }

// MinDuration is the shortest lifetime accepted: rotations come no faster
// than the kubelet refreshes mounted Secrets (its sync period, about a
// minute) plus time for the components to see them.
const MinDuration = 5 * time.Minute

// Validate refuses a strategy that cannot work, naming the field (ca.*,
// server.*).
func (s Strategy) Validate() error {
	for _, c := range []struct {
		name string
		c    Config
	}{{"ca", s.CA}, {"server", s.Server}} {
		if c.c.Duration < MinDuration {
			return fmt.Errorf("%s.duration %v: at least %v", c.name, c.c.Duration, MinDuration)
		}
		if c.c.RenewBefore <= 0 || c.c.RenewBefore >= c.c.Duration {
			return fmt.Errorf("%s.renewBefore %v: must be positive and less than %s.duration (%v)", c.name, c.c.RenewBefore, c.name, c.c.Duration)
		}
	}
	if s.CA.Duration < s.Server.Duration {
		return fmt.Errorf("ca.duration %v: must be at least server.duration (%v)", s.CA.Duration, s.Server.Duration)
	}
	return nil
}

// KeyPair is a PEM certificate and its PEM private key.
type KeyPair struct{ Cert, Key []byte }

// Leaf is what a leaf certificate says.
type Leaf struct {
	CommonName string
	DNSNames   []string
	Usages     []x509.ExtKeyUsage
}

// MaxBundle caps the CAs in a bundle: the current and the previous ones
// not yet expired. A CA outlives its successor's creation by renewBefore
// only, so more than two are unexpired only with a strategy shortened
// mid-way; the cap bounds what a long history could grow to.
const MaxBundle = 4

// ClockSkew backdates NotBefore: nodes' clocks differ a little. A
// certificate was made ClockSkew after its NotBefore.
const ClockSkew = time.Minute

// NewCA makes a self-signed CA valid for c.Duration from now.
func NewCA(commonName string, c Config, now time.Time) (KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return KeyPair{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-ClockSkew), NotAfter: now.Add(c.Duration),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	return sign(tmpl, tmpl, key, key)
}

// NewLeaf makes a leaf certificate signed by ca, valid for c.Duration from
// now but never past the CA's own expiry.
func NewLeaf(ca KeyPair, l Leaf, c Config, now time.Time) (KeyPair, error) {
	caCert, caKey, err := Parse(ca)
	if err != nil {
		return KeyPair{}, fmt.Errorf("CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("key of %s: %w", l.CommonName, err)
	}
	sn, err := serial()
	if err != nil {
		return KeyPair{}, err
	}
	notAfter := now.Add(c.Duration)
	if caCert.NotAfter.Before(notAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: l.CommonName}, DNSNames: l.DNSNames,
		NotBefore: now.Add(-ClockSkew), NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: l.Usages}
	return sign(tmpl, caCert, key, caKey)
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, signer crypto.Signer) (KeyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return KeyPair{}, fmt.Errorf("signing %s: %w", tmpl.Subject.CommonName, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("encoding the key of %s: %w", tmpl.Subject.CommonName, err)
	}
	return KeyPair{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}, nil
}

// Parse reads a pair: its certificate (the first PEM block) and its key,
// which must belong to the certificate.
func Parse(p KeyPair) (*x509.Certificate, crypto.Signer, error) {
	b, _ := pem.Decode(p.Cert)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate: %w", err)
	}
	kb, _ := pem.Decode(p.Key)
	if kb == nil {
		return nil, nil, errors.New("no PEM key")
	}
	var key crypto.Signer
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		var k any
		if k, err = x509.ParsePKCS8PrivateKey(kb.Bytes); err == nil {
			var ok bool
			if key, ok = k.(crypto.Signer); !ok {
				err = fmt.Errorf("key type %T", k)
			}
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(c.PublicKey) {
		return nil, nil, errors.New("the key is not the certificate's")
	}
	return c, key, nil
}

// ParseBundle reads every certificate of a PEM bundle; a block that is not
// a certificate, or does not parse, is an error.
func ParseBundle(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("CA bundle: a %q PEM block", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA bundle: %w", err)
		}
		out = append(out, c)
	}
	if len(bytes.TrimSpace(b)) > 0 {
		return nil, errors.New("CA bundle: trailing bytes that are not PEM")
	}
	return out, nil
}

// Verdict is what Check decided for one Secret's pair.
type Verdict struct {
	// Renew: make a new pair; Reason says why.
	Renew  bool
	Reason string
	// Scheduled: renewed for its lifetime only (within renewBefore, or
	// longer than the strategy allows); the pair is still valid now.
	Scheduled bool
	// Due is when the pair must be looked at again (zero when Renew).
	Due time.Time
}

func renew(format string, a ...any) Verdict {
	return Verdict{Renew: true, Reason: fmt.Sprintf(format, a...)}
}

// lifetime: what is wrong with a certificate's dates under c, or when it
// is next due.
func lifetime(cert *x509.Certificate, c Config, now time.Time) Verdict {
	due := cert.NotAfter.Add(-c.RenewBefore)
	switch {
	case now.Before(cert.NotBefore):
		return renew("not valid before %v", cert.NotBefore.UTC())
	case !now.Before(cert.NotAfter):
		return renew("expired at %v", cert.NotAfter.UTC())
	case !now.Before(due):
		v := renew("expires at %v, within renewBefore %v", cert.NotAfter.UTC(), c.RenewBefore)
		v.Scheduled = true
		return v
	case cert.NotAfter.Sub(now) > c.Duration:
		// The strategy was shortened: honour it now, not at the old expiry.
		v := renew("valid until %v, longer than duration %v", cert.NotAfter.UTC(), c.Duration)
		v.Scheduled = true
		return v
	}
	return Verdict{Due: due}
}

// CheckCA decides whether the CA pair (a Secret's content; empty when the
// Secret is missing) must be remade.
func CheckCA(p KeyPair, c Config, now time.Time) Verdict {
	if len(p.Cert) == 0 && len(p.Key) == 0 {
		return renew("missing")
	}
	cert, _, err := Parse(p)
	if err != nil {
		return renew("unusable: %v", err)
	}
	if !cert.IsCA {
		return renew("not a CA")
	}
	return lifetime(cert, c, now)
}

// CheckLeaf decides whether a leaf pair must be remade: missing,
// unparsable, saying other than l, not verified by a CA of bundle at now,
// or within renewBefore of its expiry. A leaf signed by a previous CA that
// is still in the bundle stays until it is due: peers trust both.
func CheckLeaf(p KeyPair, l Leaf, bundle []*x509.Certificate, c Config, now time.Time) Verdict {
	if len(p.Cert) == 0 && len(p.Key) == 0 {
		return renew("missing")
	}
	cert, _, err := Parse(p)
	if err != nil {
		return renew("unusable: %v", err)
	}
	if cert.Subject.CommonName != l.CommonName || !slices.Equal(cert.DNSNames, l.DNSNames) || !slices.Equal(cert.ExtKeyUsage, l.Usages) {
		return renew("names or usages differ from %s's", l.CommonName)
	}
	roots := x509.NewCertPool()
	for _, ca := range bundle {
		roots.AddCert(ca)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: l.Usages}); err != nil {
		return renew("not verified by the CA bundle: %v", err)
	}
	return lifetime(cert, c, now)
}

// Bundle is the CA bundle to publish: current first, then the CAs of
// previous (the bundle published so far) that are not expired at now and
// not current, at most MaxBundle in all, newest first. An unparsable
// previous bundle is dropped whole: only the current CA is then trusted.
func Bundle(current []byte, previous []byte, now time.Time) ([]byte, error) {
	cur, err := ParseBundle(current)
	if err != nil {
		return nil, fmt.Errorf("current CA: %w", err)
	}
	if len(cur) != 1 {
		return nil, fmt.Errorf("current CA: %d certificates, want one", len(cur))
	}
	prev, err := ParseBundle(previous)
	if err != nil {
		prev = nil
	}
	prev = slices.DeleteFunc(prev, func(c *x509.Certificate) bool {
		return !now.Before(c.NotAfter) || c.Equal(cur[0])
	})
	slices.SortStableFunc(prev, func(a, b *x509.Certificate) int { return b.NotBefore.Compare(a.NotBefore) })
	out := append([]*x509.Certificate{cur[0]}, prev...)
	if len(out) > MaxBundle {
		out = out[:MaxBundle]
	}
	var buf bytes.Buffer
	for _, c := range out {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}) // a bytes.Buffer does not fail
	}
	return buf.Bytes(), nil
}

// Earliest is the earliest non-zero time of ts (zero if none).
func Earliest(ts ...time.Time) time.Time {
	var e time.Time
	for _, t := range ts {
		if !t.IsZero() && (e.IsZero() || t.Before(e)) {
			e = t
		}
	}
	return e
}
