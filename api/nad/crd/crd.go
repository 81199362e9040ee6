// Package crd embeds the CustomResourceDefinition of
// NetworkAttachmentDefinition (k8s.cni.cncf.io/v1), generated from the Go
// type in api/nad/v1 by controller-gen. It is apart from api/crds, which
// virt-operator installs wholesale: this one belongs to the network
// add-ons, installed beside the meta-plugin (operator/network/install).
//
// Regenerate with `make generate` (or `go generate ./api/...`); never edit
// the YAML by hand.
package crd

//go:generate go tool controller-gen object paths=../v1/...
//go:generate go tool controller-gen crd paths=../v1/... output:crd:artifacts:config=.

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed k8s.cni.cncf.io_network-attachment-definitions.yaml
var nadYAML []byte

// NetworkAttachmentDefinition returns the CRD
// network-attachment-definitions.k8s.cni.cncf.io.
func NetworkAttachmentDefinition() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(nadYAML, crd); err != nil {
		return nil, fmt.Errorf("decoding the embedded NetworkAttachmentDefinition CRD: %w", err)
	}
	return crd, nil
}
