package network

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/certs"
	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
	"github.com/kubevmm/kubevmm/operator/network/install"
)

// KubeMacPoolCASecret holds the CA (tls.crt, tls.key) that signs
// kubemacpool's serving certificate (install.KubeMacPoolSecret, whose
// CAKey is the bundle the webhook's caBundle follows).
const KubeMacPoolCASecret = "kubemacpool-ca"

// Upstream CNAO's selfSignConfiguration defaults.
const (
	defaultCARotateInterval    = 168 * time.Hour
	defaultCAOverlapInterval   = 24 * time.Hour
	defaultCertRotateInterval  = 24 * time.Hour
	defaultCertOverlapInterval = 8 * time.Hour
)

// selfSignStrategy is c (nil: the defaults) as certs.Strategy: a rotate
// interval is a duration, an overlap interval its renewBefore. An error
// names the field.
func selfSignStrategy(c *networkaddonsv1.SelfSignConfiguration) (certs.Strategy, error) {
	var cc networkaddonsv1.SelfSignConfiguration
	if c != nil {
		cc = *c
	}
	var err error
	parse := func(name, v string, def time.Duration) time.Duration {
		if v == "" || err != nil {
			return def
		}
		d, perr := time.ParseDuration(v)
		if perr != nil {
			err = fmt.Errorf("spec.selfSignConfiguration.%s %q: %w", name, v, perr)
		}
		return d
	}
	st := certs.Strategy{
		CA: certs.Config{Duration: parse("caRotateInterval", cc.CARotateInterval, defaultCARotateInterval),
			RenewBefore: parse("caOverlapInterval", cc.CAOverlapInterval, defaultCAOverlapInterval)},
		Server: certs.Config{Duration: parse("certRotateInterval", cc.CertRotateInterval, defaultCertRotateInterval),
			RenewBefore: parse("certOverlapInterval", cc.CertOverlapInterval, defaultCertOverlapInterval)},
	}
	if err != nil {
		return st, err
	}
	if verr := st.Validate(); verr != nil {
		// Validate names certs' fields: name upstream's instead.
		msg := strings.NewReplacer("ca.duration", "caRotateInterval", "ca.renewBefore", "caOverlapInterval",
			"server.duration", "certRotateInterval", "server.renewBefore", "certOverlapInterval").Replace(verr.Error())
		return st, fmt.Errorf("spec.selfSignConfiguration.%s", msg)
	}
	return st, nil
}

// kubeMacPoolCerts is certs.MakePlan for kubemacpool's CA and serving
// certificate.
func kubeMacPoolCerts(o Observed, st certs.Strategy, now metav1.Time, settle time.Duration) (certs.Plan, error) {
	return certs.MakePlan(o.KubeMacPoolCerts, st, install.KubeMacPool, KubeMacPoolCASecret,
		[]certs.Named{{Secret: install.KubeMacPoolSecret, Leaf: certs.ServingLeaf(install.KubeMacPoolService, install.Namespace)}}, now.Time, settle)
}

// kubeMacPoolSecrets are the plan's Secrets: the CA, and kubemacpool's
// serving certificate with the bundle (CAKey).
func kubeMacPoolSecrets(p certs.Plan) []client.Object {
	leaf := p.Leaves[install.KubeMacPoolSecret]
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: install.Namespace}, Type: corev1.SecretTypeTLS, Data: data}
	}
	return []client.Object{
		secret(KubeMacPoolCASecret, map[string][]byte{corev1.TLSCertKey: p.CA.Cert, corev1.TLSPrivateKeyKey: p.CA.Key}),
		secret(install.KubeMacPoolSecret, map[string][]byte{corev1.TLSCertKey: leaf.Cert, corev1.TLSPrivateKeyKey: leaf.Key, CAKey: p.Bundle}),
	}
}

// storedKubeMacPoolCerts reads the plan's inputs from the two Secrets'
// data (nil where missing).
func storedKubeMacPoolCerts(ca, leaf map[string][]byte) certs.Stored {
	return certs.Stored{CA: certs.KeyPair{Cert: ca[corev1.TLSCertKey], Key: ca[corev1.TLSPrivateKeyKey]}, Bundle: leaf[CAKey],
		Leaves: map[string]certs.KeyPair{install.KubeMacPoolSecret: {Cert: leaf[corev1.TLSCertKey], Key: leaf[corev1.TLSPrivateKeyKey]}}}
}
