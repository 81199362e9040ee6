// Package crds embeds CDI's CRDs (cdi.kubevirt.io: CDI, CDIConfig,
// StorageProfile, DataVolume), generated from api/cdi/v1beta1 by
// controller-gen. They are apart from api/crds, which virt-operator
// installs wholesale: the CDI operator's deployment brings the CDI CRD
// and the operator installs the others.
//
// Regenerate with `go generate ./api/cdi/...`; never edit the YAML by hand.
package crds

//go:generate go tool controller-gen object paths=../v1beta1/...
//go:generate go tool controller-gen crd paths=../v1beta1/... output:crd:artifacts:config=.

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var files embed.FS

// All returns CDI's CRDs, sorted by name, with their TypeMeta set (they
// are applied as they are).
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing embedded CRDs: %w", err)
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("reading embedded CRD %s: %w", n, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("decoding embedded CRD %s: %w", n, err)
		}
		crd.TypeMeta = metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
		out = append(out, crd)
	}
	return out, nil
}
