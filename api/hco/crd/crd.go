// Package crd embeds the HyperConverged CRD (hyperconvergeds.hco.kubevirt.io),
// generated from api/hco/v1 and api/hco/v1beta1 by controller-gen. It is
// apart from api/crds, which virt-operator installs wholesale: this CRD is
// deployed with the HCO operator.
//
// Regenerate with `make generate` (or `go generate ./api/...`); never edit
// the YAML by hand.
package crd

//go:generate go tool controller-gen object paths=../v1/... paths=../v1beta1/...
//go:generate go tool controller-gen crd:generateEmbeddedObjectMeta=true paths=../v1/... paths=../v1beta1/... output:crd:artifacts:config=.

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed hco.kubevirt.io_hyperconvergeds.yaml
var doc []byte

// WebhookConversion is where the API server sends ConversionReviews.
type WebhookConversion struct {
	// Namespace, Name and Port of the hco-webhook Service; Path "/convert".
	Namespace, Name string
	Port            int32
	CABundle        []byte
}

// CRD is the HyperConverged CRD; with conv, converting through the
// hco-webhook (as deployed: v1beta1 is served only so), without it (nil)
// as generated, v1beta1 then read and written without conversion.
func CRD(conv *WebhookConversion) (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(doc, crd); err != nil {
		return nil, fmt.Errorf("decoding the HyperConverged CRD: %w", err)
	}
	crd.APIVersion, crd.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
	if conv != nil {
		path := "/convert"
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
				ClientConfig: &apiextensionsv1.WebhookClientConfig{CABundle: conv.CABundle,
					Service: &apiextensionsv1.ServiceReference{Namespace: conv.Namespace, Name: conv.Name, Path: &path, Port: &conv.Port}}}}
	}
	return crd, nil
}
