package ssp

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// ValidatorCASecret holds the CA (tls.crt, tls.key) that signs the
// validator's serving certificate, in the SSP's namespace. Upstream SSP
// gets the certificate from OpenShift's service-ca; here the operator
// makes it with api/certs.
const ValidatorCASecret = "virt-template-validator-ca"

// validatorCerts is certs.MakePlan for the validator's CA and serving
// certificate, by the cluster's KubeVirt certificateRotateStrategy (the
// HCO writes it from its certConfig, so one setting rotates every
// component's certificates).
func validatorCerts(o Observed, namespace string, now metav1.Time, settle time.Duration) (certs.Plan, error) {
	return certs.MakePlan(o.Certs, o.CertStrategy, ValidatorName, ValidatorCASecret,
		[]certs.Named{{Secret: ValidatorSecret, Leaf: certs.ServingLeaf(ValidatorName, namespace)}}, now.Time, settle)
}

// certSecrets are the plan's Secrets: the CA, and the validator's
// serving certificate with the bundle (CABundleKey), which the webhooks'
// caBundle follows. Opaque, as the validator's Secret always was: a
// Secret's type cannot change.
func certSecrets(p certs.Plan, namespace string) []client.Object {
	leaf := p.Leaves[ValidatorSecret]
	return []client.Object{
		&corev1.Secret{TypeMeta: kit.TypeMeta("v1", "Secret"), ObjectMeta: metav1.ObjectMeta{Name: ValidatorCASecret, Namespace: namespace},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{corev1.TLSCertKey: p.CA.Cert, corev1.TLSPrivateKeyKey: p.CA.Key}},
		&corev1.Secret{TypeMeta: kit.TypeMeta("v1", "Secret"), ObjectMeta: metav1.ObjectMeta{Name: ValidatorSecret, Namespace: namespace},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{corev1.TLSCertKey: leaf.Cert, corev1.TLSPrivateKeyKey: leaf.Key, CABundleKey: p.Bundle}},
	}
}

// storedCerts reads the plan's inputs from the two Secrets' data (nil
// where missing).
func storedCerts(ca, leaf map[string][]byte) certs.Stored {
	return certs.Stored{CA: certs.KeyPair{Cert: ca[corev1.TLSCertKey], Key: ca[corev1.TLSPrivateKeyKey]}, Bundle: leaf[CABundleKey],
		Leaves: map[string]certs.KeyPair{ValidatorSecret: {Cert: leaf[corev1.TLSCertKey], Key: leaf[corev1.TLSPrivateKeyKey]}}}
}
