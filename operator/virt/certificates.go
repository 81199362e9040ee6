package virt

import (
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/handler"
	"github.com/kubevmm/kubevmm/operator/certs"
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

// strategy is the CR's certificateRotateStrategy with KubeVirt's
// defaults, validated; an error names the field.
func strategy(s v1.KubeVirtCertificateRotateStrategy) (certs.Strategy, error) {
	var sc v1.KubeVirtSelfSignConfiguration
	if s.SelfSigned != nil {
		sc = *s.SelfSigned
	}
	config := func(c *v1.CertConfig, duration time.Duration) certs.Config {
		out := certs.Config{Duration: duration}
		if c != nil && c.Duration != nil {
			out.Duration = c.Duration.Duration
		}
		out.RenewBefore = certs.DefaultRenewBefore(out.Duration)
		if c != nil && c.RenewBefore != nil {
			out.RenewBefore = c.RenewBefore.Duration
		}
		return out
	}
	st := certs.Strategy{CA: config(sc.CA, certs.DefaultCADuration), Server: config(sc.Server, certs.DefaultServerDuration)}
	if err := st.Validate(); err != nil {
		return st, fmt.Errorf("spec.certificateRotateStrategy.selfSigned.%w", err)
	}
	return st, nil
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

// planCertificates decides, from what is stored, which pairs to remake
// and makes them: the CA first (a new one joins the bundle beside the
// previous, which stays until it expires), then each leaf that is
// missing, unusable, no longer verified by the bundle or due. A leaf that
// is only due (still valid) waits until the CA that would sign it has
// been published for settle: until every component's mounted bundle
// holds it (the kubelet updates mounted Secrets within its sync period),
// a peer would refuse a leaf it signed.
func planCertificates(r CertsRead, st certs.Strategy, namespace string, now time.Time, settle time.Duration) (certPlan, error) {
	p := certPlan{ca: r.CA, leaves: map[string]certs.KeyPair{}}
	v := certs.CheckCA(r.CA, st.CA, now)
	if v.Renew {
		ca, err := certs.NewCA("kubevirt.io@"+now.UTC().Format(time.RFC3339), st.CA, now)
		if err != nil {
			return p, err
		}
		p.ca = ca
		p.renewed = append(p.renewed, CASecret+": "+v.Reason)
		// The next check of a new CA is when it is due.
		v = certs.CheckCA(ca, st.CA, now)
	}
	p.due = v.Due
	caCert, _, err := certs.Parse(p.ca)
	if err != nil {
		return p, err
	}
	settled := caCert.NotBefore.Add(certs.ClockSkew + settle)
	bundle, err := certs.Bundle(p.ca.Cert, r.Bundle, now)
	if err != nil {
		return p, err
	}
	p.bundle = bundle
	roots, err := certs.ParseBundle(bundle)
	if err != nil {
		return p, err
	}
	for _, l := range leaves(namespace) {
		pair := r.Leaves[l.secret]
		v := certs.CheckLeaf(pair, l.spec, roots, st.Server, now)
		if v.Renew && v.Scheduled && now.Before(settled) {
			v = certs.Verdict{Due: settled}
		}
		if v.Renew {
			if pair, err = certs.NewLeaf(p.ca, l.spec, st.Server, now); err != nil {
				return p, err
			}
			p.renewed = append(p.renewed, l.secret+": "+v.Reason)
			v = certs.CheckLeaf(pair, l.spec, roots, st.Server, now)
		}
		p.leaves[l.secret] = pair
		p.due = certs.Earliest(p.due, v.Due)
	}
	return p, nil
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
