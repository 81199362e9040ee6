package cdi

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/operator/cdi/install"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/storage/cdi/upload"
)

// uploadCerts are the upload certificates' lifetimes: KubeVirt's defaults.
var uploadCerts = certs.Strategy{
	CA:     certs.Config{Duration: certs.DefaultCADuration, RenewBefore: certs.DefaultRenewBefore(certs.DefaultCADuration)},
	Server: certs.Config{Duration: certs.DefaultServerDuration, RenewBefore: certs.DefaultRenewBefore(certs.DefaultServerDuration)},
}

// uploadLeaves are the certificates the upload CA signs here (the upload
// servers' are the upload controller's).
func uploadLeaves() map[string]certs.Leaf {
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	svc := func(name string) string { return name + "." + install.Namespace + ".svc" }
	return map[string]certs.Leaf{
		install.SecretAPIServerCert:     {CommonName: svc(install.APIServerService), DNSNames: []string{svc(install.APIServerService)}, Usages: server},
		install.SecretUploadProxyCert:   {CommonName: svc(install.UploadProxy), DNSNames: []string{svc(install.UploadProxy)}, Usages: server},
		install.SecretUploadProxyClient: {CommonName: upload.ProxyClientName, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	}
}

// planUploadSecrets decides the upload path's Secrets' data from what is
// stored (name -> data; missing names absent): a missing or unusable
// token key pair is made; the CA and leaves as certs.MakePlan says. A new
// CA joins the bundle beside the previous one, which stays until it
// expires: the bundle is what everything trusts (the CA Secret's and each
// leaf's ca.crt, the APIService's and webhooks' caBundle, the upload
// servers' and clone sources' ca.crt), so a leaf of either CA is believed
// through the rotation and an upload under way goes on. Leaves move to a
// new CA once it has been published for certs.DefaultSettle. It returns
// the Secrets to write (those whose data changes), the bundle, and when
// to look again.
func planUploadSecrets(stored map[string]map[string][]byte, now time.Time) (write map[string]map[string][]byte, bundle []byte, due time.Time, err error) {
	write = map[string]map[string][]byte{}
	if tk := stored[install.SecretTokenKey]; tokenKeyUsable(tk) != nil {
		priv, pub, err := token.NewKey()
		if err != nil {
			return nil, nil, time.Time{}, err
		}
		write[install.SecretTokenKey] = map[string][]byte{token.PrivateKeyKey: priv, token.PublicKeyKey: pub}
	}
	pair := func(name string) certs.KeyPair {
		return certs.KeyPair{Cert: stored[name][corev1.TLSCertKey], Key: stored[name][corev1.TLSPrivateKeyKey]}
	}
	r := certs.Stored{CA: pair(install.SecretUploadCA), Bundle: stored[install.SecretUploadCA][upload.CABundleKey], Leaves: map[string]certs.KeyPair{}}
	var named []certs.Named
	for name, leaf := range uploadLeaves() {
		r.Leaves[name] = pair(name)
		named = append(named, certs.Named{Secret: name, Leaf: leaf})
	}
	p, err := certs.MakePlan(r, uploadCerts, "cdi-uploadserver-ca", install.SecretUploadCA, named, now, certs.DefaultSettle)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	want := map[string]map[string][]byte{install.SecretUploadCA: {corev1.TLSCertKey: p.CA.Cert, corev1.TLSPrivateKeyKey: p.CA.Key, upload.CABundleKey: p.Bundle}}
	for name, kp := range p.Leaves {
		want[name] = map[string][]byte{corev1.TLSCertKey: kp.Cert, corev1.TLSPrivateKeyKey: kp.Key, upload.CABundleKey: p.Bundle}
	}
	for name, data := range want {
		if !maps.EqualFunc(stored[name], data, bytes.Equal) {
			write[name] = data
		}
	}
	return write, p.Bundle, p.Due, nil
}

func tokenKeyUsable(data map[string][]byte) error {
	if _, err := token.NewSigner(data[token.PrivateKeyKey]); err != nil {
		return err
	}
	_, err := token.NewVerifier(data[token.PublicKeyKey])
	return err
}

// ensureUploadSecrets reads, plans and writes the upload Secrets (owned
// by the CDI) and returns the CA bundle and when to look again.
func (r *Reconciler) ensureUploadSecrets(ctx context.Context, c *cdiv1.CDI, now time.Time) ([]byte, time.Time, error) {
	names := []string{install.SecretTokenKey, install.SecretUploadCA}
	for n := range uploadLeaves() {
		names = append(names, n)
	}
	stored := map[string]map[string][]byte{}
	existing := map[string]*corev1.Secret{}
	for _, n := range names {
		s := &corev1.Secret{}
		switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: n}, s); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, time.Time{}, fmt.Errorf("reading Secret %s: %w", n, err)
		default:
			stored[n], existing[n] = s.Data, s
		}
	}
	write, ca, due, err := planUploadSecrets(stored, now)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("upload certificates: %w", err)
	}
	owner := metav1.OwnerReference{APIVersion: cdiv1.GroupVersion.String(), Kind: "CDI", Name: c.Name, UID: c.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	for _, n := range names { // in order: the CA before what it signs
		data, ok := write[n]
		if !ok {
			continue
		}
		if s := existing[n]; s != nil {
			s.Data = maps.Clone(data)
			if err := r.Client.Update(ctx, s); err != nil {
				return nil, time.Time{}, fmt.Errorf("writing Secret %s: %w", n, err)
			}
			continue
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: install.Namespace, OwnerReferences: []metav1.OwnerReference{owner}}, Data: data}
		if err := r.Client.Create(ctx, s); err != nil {
			return nil, time.Time{}, fmt.Errorf("creating Secret %s: %w", n, err)
		}
	}
	return ca, due, nil
}
