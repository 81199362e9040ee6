// Package crd embeds the HostPathProvisioner CRD, generated from
// api/hostpathprovisioner/v1beta1 by controller-gen. It comes with the
// hostpath provisioner operator's deployment (operator/hostpath).
//
// Regenerate with `go generate ./api/hostpathprovisioner/...`; never edit
// the YAML by hand.
package crd

//go:generate go tool controller-gen object paths=../v1beta1/...
//go:generate go tool controller-gen crd paths=../v1beta1/... output:crd:artifacts:config=.

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

//go:embed hostpathprovisioner.kubevirt.io_hostpathprovisioners.yaml
var file []byte

// HostPathProvisioner returns the CRD with its TypeMeta set.
func HostPathProvisioner() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(file, crd); err != nil {
		return nil, fmt.Errorf("decoding the embedded HostPathProvisioner CRD: %w", err)
	}
	crd.TypeMeta = metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
	return crd, nil
}
