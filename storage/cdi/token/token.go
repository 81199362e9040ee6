// Package token makes and checks CDI's upload tokens: a compact JWS
// (ES256) issued by cdi-apiserver to a user allowed to upload to a PVC,
// checked by cdi-uploadproxy with the public half of the key. A token
// names its namespace, PVC and operation, and is valid for Lifetime: it
// grants one thing briefly, as CDI's do.
package token

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer is CDI's upload token issuer.
const Issuer = "cdi-apiserver"

// Lifetime is how long a token is valid (CDI's 5 minutes).
const Lifetime = 5 * time.Minute

// Leeway absorbs clock skew between cdi-apiserver and cdi-uploadproxy
// (CDI's 10 seconds).
const Leeway = 10 * time.Second

// OperationUpload is the one operation upload tokens grant.
const OperationUpload = "Upload"

// Secret keys: the operator keeps the private key in one Secret (read by
// cdi-apiserver) and the public key in another (read by the proxy).
const (
	PrivateKeyKey = "id_ecdsa"
	PublicKeyKey  = "id_ecdsa.pub"
)

// Payload is what a token grants: operation on PVC Name in Namespace.
type Payload struct {
	Operation string `json:"operation"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Resource  string `json:"resource"`
}

// Upload is the payload granting an upload to PVC ns/name.
func Upload(ns, name string) Payload {
	return Payload{Operation: OperationUpload, Name: name, Namespace: ns, Resource: "persistentvolumeclaims"}
}

// NewKey makes a signing key, PEM-encoded (private, public).
func NewKey() (priv, pub []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("token key: %w", err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the token key: %w", err)
	}
	pder, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the token public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder}), nil
}

// Signer signs tokens.
type Signer struct{ s jose.Signer }

// NewSigner reads a PEM EC private key.
func NewSigner(privPEM []byte) (*Signer, error) {
	b, _ := pem.Decode(privPEM)
	if b == nil {
		return nil, errors.New("token key: no PEM block")
	}
	k, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return nil, fmt.Errorf("token signer: %w", err)
	}
	return &Signer{s: s}, nil
}

// Sign issues a token for p valid from now for Lifetime.
func (s *Signer) Sign(p Payload, now time.Time) (string, error) {
	std := jwt.Claims{Issuer: Issuer, IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now),
		Expiry: jwt.NewNumericDate(now.Add(Lifetime))}
	t, err := jwt.Signed(s.s).Claims(std).Claims(p).Serialize()
	if err != nil {
		return "", fmt.Errorf("signing the token: %w", err)
	}
	return t, nil
}

// Verifier checks tokens.
type Verifier struct{ pub *ecdsa.PublicKey }

// NewVerifier reads a PEM public key (PKIX).
func NewVerifier(pubPEM []byte) (*Verifier, error) {
	b, _ := pem.Decode(pubPEM)
	if b == nil {
		return nil, errors.New("token public key: no PEM block")
	}
	k, err := x509.ParsePKIXPublicKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("token public key: %w", err)
	}
	ek, ok := k.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("token public key: %T, not ECDSA", k)
	}
	return &Verifier{pub: ek}, nil
}

// Verify checks a token's signature, issuer and lifetime at now and
// returns what it grants.
func (v *Verifier) Verify(tok string, now time.Time) (Payload, error) {
	t, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return Payload{}, fmt.Errorf("token: %w", err)
	}
	var std jwt.Claims
	var p Payload
	if err := t.Claims(v.pub, &std, &p); err != nil {
		return Payload{}, fmt.Errorf("token: %w", err)
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: Issuer, Time: now}, Leeway); err != nil {
		return Payload{}, fmt.Errorf("token: %w", err)
	}
	if std.Expiry == nil {
		return Payload{}, errors.New("token: no expiry")
	}
	return p, nil
}

// Grants says whether p allows an upload to PVC ns/name; the error names
// what differs.
func (p Payload) Grants(ns, name string) error {
	want := Upload(ns, name)
	if p != want {
		return fmt.Errorf("token grants %s to %s %s/%s, not %s to %s/%s", p.Operation, p.Resource, p.Namespace, p.Name, want.Operation, ns, name)
	}
	return nil
}
