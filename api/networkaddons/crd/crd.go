// Package crd embeds the NetworkAddonsConfig CRD, generated from
// api/networkaddons/v1 by controller-gen. It is apart from api/crds, which
// virt-operator installs wholesale: this one comes with the network
// add-ons operator's deployment.
//
// Regenerate with `go generate ./api/networkaddons/...`; never edit the
// YAML by hand.
package crd

//go:generate go tool controller-gen object paths=../v1/...
//go:generate go tool controller-gen crd paths=../v1/... output:crd:artifacts:config=.

import (
	_ "embed"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
)

//go:embed networkaddonsoperator.network.kubevirt.io_networkaddonsconfigs.yaml
var file []byte

// NetworkAddonsConfig returns the CRD with its TypeMeta set. v1 is
// generated; v1alpha1 is served beside it with the same schema (upstream's
// two versions declare the same fields), so objects pass between them
// unchanged (conversion None) and v1 is stored.
func NetworkAddonsConfig() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(file, crd); err != nil {
		return nil, fmt.Errorf("decoding the embedded NetworkAddonsConfig CRD: %w", err)
	}
	crd.TypeMeta = metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != networkaddonsv1.GroupVersion.Version {
		return nil, fmt.Errorf("the embedded NetworkAddonsConfig CRD: want the one version v1, have %d", len(crd.Spec.Versions))
	}
	alpha := *crd.Spec.Versions[0].DeepCopy()
	alpha.Name, alpha.Storage = networkaddonsv1.GroupVersionAlpha.Version, false
	crd.Spec.Versions = append(crd.Spec.Versions, alpha)
	return crd, nil
}
