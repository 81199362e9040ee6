// Package crds embeds the CustomResourceDefinitions of the kubevirt.io API,
// generated from the Go types in api/core/v1 by controller-gen, so that the
// operator, the deploy manifests and envtest all install the same bytes.
//
// Regenerate with `make generate` (or `go generate ./api/...`); never edit
// the YAML by hand.
package crds

//go:generate go tool controller-gen object paths=../core/... paths=../instancetype/v1beta1/...
//go:generate go tool controller-gen crd:generateEmbeddedObjectMeta=true paths=../core/... paths=../instancetype/v1beta1/... output:crd:artifacts:config=.

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var files embed.FS

// FS is the directory of CRD YAML files, one CRD per file.
func FS() fs.FS { return files }

// All returns every CRD, sorted by name.
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
		out = append(out, crd)
	}
	return out, nil
}
