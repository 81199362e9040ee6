package hco

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubevmm/kubevmm/api/certs"
	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
)

// WebhookCerts makes and rotates the hco-webhook's serving certificate
// and serves it (GetCertificate, at each TLS handshake). Upstream's HCO
// gets it from OLM; here the operator makes it at start, with a CA of its
// own (certs.MakePlan), by the CR's certConfig (upstream's defaults
// without a CR: the webhook admits the CR's creation), and puts the CA
// bundle in the caBundle of the ValidatingWebhookConfiguration and of the
// CRD's conversion webhook. It runs in every replica: the Secrets are
// the shared state, written with server-side apply.
//
// Each pass: read the CR and the two Secrets, plan, write the Secrets
// when something was renewed (one log line each), patch the caBundles
// that differ from the bundle, then serve the leaf. It looks again when
// the next certificate is due, or after Poll (the CR's certConfig is read
// then: a change applies within Poll), or after a failure.
type WebhookCerts struct {
	Client    client.Client
	Reader    client.Reader
	Namespace string
	// Service is the webhook's Service: the certificate's DNS names.
	Service string
	// Secret holds the serving certificate (tls.crt, tls.key, ca.crt:
	// the bundle), CASecret the CA (tls.crt, tls.key).
	Secret, CASecret string
	// WebhookConfig and CRD are what trusts the bundle.
	WebhookConfig, CRD string
	// Settle: how long a new CA is published before a valid leaf is
	// replaced by one it signs (certs.MakePlan).
	Settle time.Duration
	Poll   time.Duration

	serving atomic.Pointer[tls.Certificate]
}

// GetCertificate is the serving certificate of the last pass: for
// tls.Config.GetCertificate, so each handshake gets the current one.
func (w *WebhookCerts) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := w.serving.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("the hco-webhook's certificate is not made yet")
}

// NeedLeaderElection is false: every replica serves the webhook.
func (w *WebhookCerts) NeedLeaderElection() bool { return false }

// Start runs passes until ctx ends (a manager.Runnable).
func (w *WebhookCerts) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("hco-webhook-certs")
	for {
		next := 5 * time.Second
		due, err := w.Sync(ctx)
		if err != nil {
			log.Error(err, "the hco-webhook's certificate")
		} else {
			next = min(max(time.Until(due), time.Second), w.Poll)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(next):
		}
	}
}

// Sync is one pass; due is when a certificate is next due.
func (w *WebhookCerts) Sync(ctx context.Context) (due time.Time, err error) {
	log := logf.FromContext(ctx).WithName("hco-webhook-certs")
	var cc hcov1.CertConfig
	hc := &hcov1.HyperConverged{}
	switch err := w.Reader.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: hcov1.Name}, hc); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return due, fmt.Errorf("reading the HyperConverged: %w", err)
	default:
		cc = hc.Spec.Security.CertConfig
	}
	st := certStrategy(cc)
	if err := st.Validate(); err != nil {
		// The webhook refuses such a CR; one stored before is not
		// followed, and the webhook keeps working.
		log.Info("certConfig not usable, upstream's defaults used", "error", err.Error())
		st = certStrategy(hcov1.CertConfig{})
	}
	var data [2]map[string][]byte
	for i, name := range []string{w.CASecret, w.Secret} {
		sec := &corev1.Secret{}
		switch err := w.Reader.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: name}, sec); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return due, fmt.Errorf("reading Secret %s: %w", name, err)
		default:
			data[i] = sec.Data
		}
	}
	ca, leaf := data[0], data[1]
	stored := certs.Stored{CA: certs.KeyPair{Cert: ca[corev1.TLSCertKey], Key: ca[corev1.TLSPrivateKeyKey]}, Bundle: leaf["ca.crt"],
		Leaves: map[string]certs.KeyPair{w.Secret: {Cert: leaf[corev1.TLSCertKey], Key: leaf[corev1.TLSPrivateKeyKey]}}}
	p, err := certs.MakePlan(stored, st, "hco-webhook", w.CASecret, []certs.Named{{Secret: w.Secret, Leaf: certs.ServingLeaf(w.Service, w.Namespace)}},
		time.Now(), w.Settle)
	if err != nil {
		return due, err
	}
	if len(p.Renewed) > 0 || !bytes.Equal(p.Bundle, stored.Bundle) {
		// The CA first: a leaf is never stored without what signed it.
		pair := p.Leaves[w.Secret]
		for _, s := range []*corev1ac.SecretApplyConfiguration{
			corev1ac.Secret(w.CASecret, w.Namespace).WithType(corev1.SecretTypeTLS).
				WithData(map[string][]byte{corev1.TLSCertKey: p.CA.Cert, corev1.TLSPrivateKeyKey: p.CA.Key}),
			corev1ac.Secret(w.Secret, w.Namespace).WithType(corev1.SecretTypeTLS).
				WithData(map[string][]byte{corev1.TLSCertKey: pair.Cert, corev1.TLSPrivateKeyKey: pair.Key, "ca.crt": p.Bundle}),
		} {
			if err := w.Client.Apply(ctx, s, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
				return due, fmt.Errorf("writing Secret %s: %w", *s.Name, err)
			}
		}
		for _, why := range p.Renewed {
			log.Info("certificate renewed", "secret", why)
		}
	}
	if err := w.publish(ctx, p.Bundle); err != nil {
		return due, err
	}
	pair := p.Leaves[w.Secret]
	c, err := tls.X509KeyPair(pair.Cert, pair.Key)
	if err != nil {
		return due, fmt.Errorf("the hco-webhook's certificate: %w", err)
	}
	w.serving.Store(&c)
	return p.Due, nil
}

// publish puts bundle in the caBundle of each webhook of WebhookConfig
// and of the CRD's conversion webhook, where it differs (a JSON patch of
// that field only: the rest is the deployer's).
func (w *WebhookCerts) publish(ctx context.Context, bundle []byte) error {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value []byte `json:"value"`
	}
	patch := func(obj client.Object, ops []op) error {
		if len(ops) == 0 {
			return nil
		}
		b, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		if err := w.Client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, b), client.FieldOwner(FieldManager)); err != nil {
			return fmt.Errorf("putting the CA bundle in %s: %w", obj.GetName(), err)
		}
		return nil
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: w.WebhookConfig}, vwc); err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s: %w", w.WebhookConfig, err)
	}
	var ops []op
	for i, h := range vwc.Webhooks {
		if !bytes.Equal(h.ClientConfig.CABundle, bundle) {
			ops = append(ops, op{"add", fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), bundle})
		}
	}
	if err := patch(vwc, ops); err != nil {
		return err
	}
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := w.Reader.Get(ctx, client.ObjectKey{Name: w.CRD}, crd); err != nil {
		return fmt.Errorf("reading CustomResourceDefinition %s: %w", w.CRD, err)
	}
	if _, ok, _ := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig"); !ok {
		return nil // no conversion webhook: nothing trusts the bundle there
	}
	cur, _, _ := unstructured.NestedString(crd.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
	if cur == base64.StdEncoding.EncodeToString(bundle) {
		return nil
	}
	return patch(crd, []op{{"add", "/spec/conversion/webhook/clientConfig/caBundle", bundle}})
}
