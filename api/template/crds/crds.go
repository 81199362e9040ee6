// Package crds embeds the CustomResourceDefinition of the
// template.openshift.io/v1 Template, generated from api/template/v1 by
// controller-gen. It is apart from api/crds because virt-operator installs
// everything there, while Templates belong to SSP (operator/ssp), which
// installs this CRD.
//
// Regenerate with `make generate` (or `go generate ./api/...`); never edit
// the YAML by hand.
package crds

//go:generate go tool controller-gen object paths=../v1/...
//go:generate go tool controller-gen crd paths=../v1/... output:crd:artifacts:config=.

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed template.openshift.io_templates.yaml
var templates []byte

// CRD returns the templates.template.openshift.io CRD.
func CRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(templates, crd); err != nil {
		return nil, fmt.Errorf("decoding the embedded Template CRD: %w", err)
	}
	return crd, nil
}
