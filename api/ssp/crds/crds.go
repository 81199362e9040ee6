// Package crds embeds the CRDs of the SSP operator's API: ssp.kubevirt.io
// (SSP) and tektontasks.kubevirt.io (TektonTasks, the deprecated
// tekton-tasks-operator's, a no-op), generated from api/ssp/v1beta3 and
// api/tektontasks/v1alpha1 by controller-gen. They are apart from api/crds,
// which virt-operator installs wholesale: these come with the SSP
// operator's deployment.
//
// Regenerate with `go generate ./api/ssp/...`; never edit the YAML by hand.
package crds

//go:generate go tool controller-gen object paths=../v1beta3/... paths=../../tektontasks/v1alpha1/...
//go:generate go tool controller-gen crd:generateEmbeddedObjectMeta=true paths=../v1beta3/... paths=../../tektontasks/v1alpha1/... output:crd:artifacts:config=.

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var files embed.FS

// All returns the SSP and TektonTasks CRDs, sorted by name, with their
// TypeMeta set (they are applied as they are).
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
		crd.TypeMeta = v1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"}
		out = append(out, crd)
	}
	return out, nil
}
