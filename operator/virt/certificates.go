package virt

import (
	"crypto/x509"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/certs"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/handler"
	"github.com/kubevmm/kubevmm/operator/virt/install"
)

// What virt-operator makes besides the components' leaf Secrets
// (install.SecretAPICerts, SecretAPIClient, SecretHandlerCerts, whose
// ca.crt is the CA bundle): KubeVirt's names.
const (
	// CASecret holds the current CA (tls.crt, tls.key).
	CASecret = "kubevirt-ca"
	// CABundleConfigMap's CABundleKey is the current CA and the previous
	// ones not yet expired: what the API server (webhooks, APIService)
	// and the components trust.
	CABundleConfigMap = "kubevirt-ca"
	CABundleKey       = "ca-bundle"
)

// CertsRead is what the certificates' Secrets and ConfigMap hold (empty
// where missing).
type CertsRead struct {
	CA     certs.KeyPair
	Bundle []byte
	// Leaves by Secret name.
	Leaves map[string]certs.KeyPair
}

// leaf is one component certificate and the Secret it is mounted from.
type leaf struct {
	secret string
	spec   certs.Leaf
}

// leaves are the components' certificates: virt-api's serving one
// (webhooks, APIService), virt-handler's (server for virt-api, both ends
// of migration streams between handlers) and virt-api's client one
// towards virt-handler.
func leaves(namespace string) []leaf {
	svc := install.VirtAPIName + "." + namespace + ".svc"
	return []leaf{
		{install.SecretAPICerts, certs.Leaf{CommonName: svc, DNSNames: []string{install.VirtAPIName, svc, svc + ".cluster.local"},
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}},
		{install.SecretHandlerCerts, certs.Leaf{CommonName: handler.HandlerName,
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}},
		{install.SecretAPIClient, certs.Leaf{CommonName: handler.VirtAPIClientName,
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}},
	}
}

// strategy is the CR's certificateRotateStrategy (certs.FromKubeVirt).
func strategy(s v1.KubeVirtCertificateRotateStrategy) (certs.Strategy, error) {
	return certs.FromKubeVirt(s)
}

// certPlan is what the certificates become.
type certPlan struct {
	ca     certs.KeyPair
	bundle []byte
	leaves map[string]certs.KeyPair
	// due: when to look again; renewed: "name: why", one per pair made.
	due     time.Time
	renewed []string
}

// planCertificates is certs.MakePlan for virt-operator's CA and the
// components' leaves.
func planCertificates(r CertsRead, st certs.Strategy, namespace string, now time.Time, settle time.Duration) (certPlan, error) {
	var named []certs.Named
	for _, l := range leaves(namespace) {
		named = append(named, certs.Named{Secret: l.secret, Leaf: l.spec})
	}
	p, err := certs.MakePlan(certs.Stored{CA: r.CA, Bundle: r.Bundle, Leaves: r.Leaves}, st, "kubevirt.io", CASecret, named, now, settle)
	return certPlan{ca: p.CA, bundle: p.Bundle, leaves: p.Leaves, due: p.Due, renewed: p.Renewed}, err
}

// objects are the CA Secret and the bundle ConfigMap, and the components'
// certificates for install.Config.
func (p certPlan) objects(namespace string) ([]client.Object, *install.Certificates) {
	kp := func(name string) install.KeyPair {
		return install.KeyPair{Cert: p.leaves[name].Cert, Key: p.leaves[name].Key}
	}
	c := &install.Certificates{CA: p.bundle, API: kp(install.SecretAPICerts), Handler: kp(install.SecretHandlerCerts), APIClient: kp(install.SecretAPIClient)}
	return []client.Object{
		// The bundle before the CA: a leaf is never trusted by less than
		// what signed it.
		&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: CABundleConfigMap, Namespace: namespace},
			Data: map[string]string{CABundleKey: string(p.bundle)}},
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: CASecret, Namespace: namespace},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: p.ca.Cert, corev1.TLSPrivateKeyKey: p.ca.Key}},
	}, c
}
