package main

import (
	"crypto/x509"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/operator/ssp"
)

// sspOperator is what deploys the SSP operator (its CRDs, RBAC and
// Deployment) in o.namespace, and virt-template-validator's serving
// certificate there (the SSP's namespace: sync.sh creates the SSP in it),
// which the operator reads the webhooks' CA from.
func sspOperator(ca *authority, o opts) ([]client.Object, error) {
	svc := ssp.ValidatorName + "." + o.namespace + ".svc"
	cert, err := ca.leaf(o.pki, ssp.ValidatorName, svc, []string{ssp.ValidatorName, svc, svc + ".cluster.local"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	objs, err := ssp.Operator(ssp.OperatorConfig{Namespace: o.namespace, ImageRegistry: o.imagePrefix, ImageTag: o.tag, PullPolicy: o.pull, ManagedBy: "kubevmm"})
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: ssp.ValidatorSecret, Namespace: o.namespace}, Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"tls.crt": cert.Cert, "tls.key": cert.Key, ssp.CABundleKey: ca.certPEM}}
	return append([]client.Object{secret}, objs...), nil
}
