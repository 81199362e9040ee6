// Package token makes and checks CDI's tokens: a compact JWS (ES256)
// granting one operation on one object.
//
//   - Upload tokens: issued by cdi-apiserver to a user allowed to upload
//     to a PVC, checked by cdi-uploadproxy with the public half of the key.
//   - Clone tokens (CDI's cdi.kubevirt.io/storage.clone.token): issued by
//     cdi-apiserver's DataVolume webhook to a user allowed to clone a
//     source (a PVC, or a DataSource's) into a target DataVolume, bound to
//     both. The DataVolume controller checks one while it is fresh and
//     swaps it for an extended token (cdi.kubevirt.io/storage.extended.clone.token),
//     the same grant signed by cdi-controller for ExtendedLifetime: a clone
//     may wait far longer than Lifetime for its source (a golden image
//     still importing, a VM using the disk). The clone controller runs a
//     clone source only for a target carrying a token that grants it.
//
// A token is valid for Lifetime (CDI's 5 minutes) unless extended: it
// grants one thing briefly, as CDI's do. The issuer tells the two apart;
// the upload proxy accepts only cdi-apiserver's.
package token

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
)

// Issuer is the issuer of the tokens users are given (cdi-apiserver).
// ExtendedIssuer is cdi-controller's, of extended clone tokens.
const (
	Issuer         = "cdi-apiserver"
	ExtendedIssuer = "cdi-controller"
)

// ExtendedLifetime is how long an extended clone token is valid.
const ExtendedLifetime = 10 * 365 * 24 * time.Hour

// Lifetime is how long a token is valid (CDI's 5 minutes).
const Lifetime = 5 * time.Minute

// Leeway absorbs clock skew between cdi-apiserver and cdi-uploadproxy
// (CDI's 10 seconds).
const Leeway = 10 * time.Second

// The operations tokens grant.
const (
	OperationUpload = "Upload"
	OperationClone  = "Clone"
)

// The Params of a clone token: its target DataVolume (and PVC); an
// extended token also has the DataVolume's UID.
const (
	ParamTargetNamespace = "targetNamespace"
	ParamTargetName      = "targetName"
	ParamTargetUID       = "targetUID"
)

// Secret keys: the operator keeps the private key in one Secret (read by
// cdi-apiserver) and the public key in another (read by the proxy).
const (
	PrivateKeyKey = "id_ecdsa"
	PublicKeyKey  = "id_ecdsa.pub"
)

// Payload is what a token grants: operation on Resource Name in
// Namespace, with Params (a clone's target).
type Payload struct {
	Operation string            `json:"operation"`
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Resource  string            `json:"resource"`
	Params    map[string]string `json:"params,omitempty"`
}

// Upload is the payload granting an upload to PVC ns/name.
func Upload(ns, name string) Payload {
	return Payload{Operation: OperationUpload, Name: name, Namespace: ns, Resource: cloneauth.ResourcePVC}
}

// Clone is the payload granting a clone of src (what cloneauth.Check
// authorized) into the DataVolume targetNS/targetName.
func Clone(src cloneauth.Source, targetNS, targetName string) Payload {
	return Payload{Operation: OperationClone, Name: src.Name, Namespace: src.Namespace, Resource: src.Resource,
		Params: map[string]string{ParamTargetNamespace: targetNS, ParamTargetName: targetName}}
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

// NewPair makes a new key pair and its Signer and Verifier (tests; the
// operator keeps the PEM halves NewKey makes).
func NewPair() (*Signer, *Verifier, error) {
	priv, pub, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	s, err := NewSigner(priv)
	if err != nil {
		return nil, nil, err
	}
	v, err := NewVerifier(pub)
	return s, v, err
}

// LoadPair is the key pair a Secret of PrivateKeyKey and PublicKeyKey
// mounted at dir holds, each read again when its file changes
// (SignerFile, VerifierFile).
func LoadPair(dir string) (*Signer, *Verifier, error) {
	s, err := SignerFile(filepath.Join(dir, PrivateKeyKey))
	if err != nil {
		return nil, nil, err
	}
	v, err := VerifierFile(filepath.Join(dir, PublicKeyKey))
	if err != nil {
		return nil, nil, err
	}
	return s, v, nil
}

// fileKey is a key kept in a mounted Secret's file and read again when
// the file changes: the operator replaces a key pair that is missing or
// unusable and the kubelet updates the mounted files, and a process that
// read them once would sign or check with the old key until restarted.
// The file is small and read per use (tokens are few). A file that cannot
// be read or parsed leaves the key held in use (the kubelet swaps a
// Secret's files at once, so that is a broken Secret, which the operator
// replaces).
type fileKey[T any] struct {
	path  string
	parse func([]byte) (T, error)
	mu    sync.Mutex
	raw   []byte
	cur   T
}

func newFileKey[T any](path string, parse func([]byte) (T, error)) (*fileKey[T], error) {
	f := &fileKey[T]{path: path, parse: parse}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	if f.cur, err = parse(b); err != nil {
		return nil, err
	}
	f.raw = b
	return f, nil
}

func (f *fileKey[T]) get() T {
	b, err := os.ReadFile(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil || bytes.Equal(b, f.raw) {
		return f.cur
	}
	if k, err := f.parse(b); err == nil {
		f.cur, f.raw = k, b
	}
	return f.cur
}

// Signer signs tokens.
type Signer struct {
	s    jose.Signer
	file *fileKey[jose.Signer] // if set, s is read from it per token
}

// NewSigner reads a PEM EC private key.
func NewSigner(privPEM []byte) (*Signer, error) {
	s, err := parseSigner(privPEM)
	if err != nil {
		return nil, err
	}
	return &Signer{s: s}, nil
}

// SignerFile is a Signer of the PEM EC private key in file path, read
// again when the file changes.
func SignerFile(path string) (*Signer, error) {
	f, err := newFileKey(path, parseSigner)
	if err != nil {
		return nil, err
	}
	return &Signer{file: f}, nil
}

func parseSigner(privPEM []byte) (jose.Signer, error) {
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
	return s, nil
}

// Sign issues a token for p valid from now for Lifetime.
func (s *Signer) Sign(p Payload, now time.Time) (string, error) {
	return s.sign(p, Issuer, Lifetime, now)
}

// Extend issues an extended clone token for p (cdi-controller's, valid
// for ExtendedLifetime); p must be a clone's.
func (s *Signer) Extend(p Payload, now time.Time) (string, error) {
	if p.Operation != OperationClone {
		return "", fmt.Errorf("token: only clone tokens are extended, not %s", p.Operation)
	}
	return s.sign(p, ExtendedIssuer, ExtendedLifetime, now)
}

func (s *Signer) sign(p Payload, issuer string, lifetime time.Duration, now time.Time) (string, error) {
	std := jwt.Claims{Issuer: issuer, IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now),
		Expiry: jwt.NewNumericDate(now.Add(lifetime))}
	js := s.s
	if s.file != nil {
		js = s.file.get()
	}
	t, err := jwt.Signed(js).Claims(std).Claims(p).Serialize()
	if err != nil {
		return "", fmt.Errorf("signing the token: %w", err)
	}
	return t, nil
}

// Verifier checks tokens.
type Verifier struct {
	pub  *ecdsa.PublicKey
	file *fileKey[*ecdsa.PublicKey] // if set, pub is read from it per token
}

// NewVerifier reads a PEM public key (PKIX).
func NewVerifier(pubPEM []byte) (*Verifier, error) {
	k, err := parsePublic(pubPEM)
	if err != nil {
		return nil, err
	}
	return &Verifier{pub: k}, nil
}

// VerifierFile is a Verifier of the PEM public key in file path, read
// again when the file changes.
func VerifierFile(path string) (*Verifier, error) {
	f, err := newFileKey(path, parsePublic)
	if err != nil {
		return nil, err
	}
	return &Verifier{file: f}, nil
}

func parsePublic(pubPEM []byte) (*ecdsa.PublicKey, error) {
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
	return ek, nil
}

// Verify checks a token's signature, issuer (cdi-apiserver) and
// lifetime at now and returns what it grants.
func (v *Verifier) Verify(tok string, now time.Time) (Payload, error) {
	return v.verify(tok, Issuer, now)
}

// VerifyExtended is Verify for an extended clone token (cdi-controller's).
func (v *Verifier) VerifyExtended(tok string, now time.Time) (Payload, error) {
	p, err := v.verify(tok, ExtendedIssuer, now)
	if err == nil && p.Operation != OperationClone {
		return Payload{}, fmt.Errorf("token: an extended token grants %s, not %s", p.Operation, OperationClone)
	}
	return p, err
}

func (v *Verifier) verify(tok, issuer string, now time.Time) (Payload, error) {
	t, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return Payload{}, fmt.Errorf("token: %w", err)
	}
	var std jwt.Claims
	var p Payload
	pub := v.pub
	if v.file != nil {
		pub = v.file.get()
	}
	if err := t.Claims(pub, &std, &p); err != nil {
		return Payload{}, fmt.Errorf("token: %w", err)
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: issuer, Time: now}, Leeway); err != nil {
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
	if p.Operation != want.Operation || p.Resource != want.Resource || p.Namespace != ns || p.Name != name || len(p.Params) > 0 {
		return fmt.Errorf("token grants %s to %s %s/%s, not %s to %s/%s", p.Operation, p.Resource, p.Namespace, p.Name, want.Operation, ns, name)
	}
	return nil
}

// GrantsClone says whether p allows the DataVolume (and PVC)
// targetNS/targetName to clone the PVC src: p names that claim, or a
// DataSource of src's namespace (granting that namespace's claims: the
// user was authorized for the namespace, datavolumes/source there). The
// error names what differs.
func (p Payload) GrantsClone(src types.NamespacedName, targetNS, targetName string) error {
	if p.Operation != OperationClone {
		return fmt.Errorf("token grants %s, not %s", p.Operation, OperationClone)
	}
	if got := (types.NamespacedName{Namespace: p.Params[ParamTargetNamespace], Name: p.Params[ParamTargetName]}); got.Namespace != targetNS || got.Name != targetName {
		return fmt.Errorf("token grants a clone into %s, not into %s/%s", got, targetNS, targetName)
	}
	switch {
	case p.Resource == cloneauth.ResourcePVC && p.Namespace == src.Namespace && p.Name == src.Name:
		return nil
	case p.Resource == cloneauth.ResourceDataSource && p.Namespace == src.Namespace && p.Name != "":
		return nil
	}
	return fmt.Errorf("token grants a clone of %s %s/%s, not of PVC %s", p.Resource, p.Namespace, p.Name, src)
}
