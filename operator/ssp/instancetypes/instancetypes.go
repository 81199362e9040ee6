// Package instancetypes is the common set of cluster instance types and
// preferences the SSP operator deploys (common.yaml, KubeVirt
// common-instancetypes' values).
package instancetypes

import (
	_ "embed"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

//go:embed common.yaml
var common string

// Common is the common set, decoded strictly (a field the types do not
// declare fails), cluster instance types first.
func Common() ([]client.Object, error) {
	var types, prefs []client.Object
	for i, doc := range strings.Split(common, "\n---\n") {
		tm := metav1.TypeMeta{}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			return nil, fmt.Errorf("common.yaml document %d: %w", i, err)
		}
		var obj client.Object
		switch tm.Kind {
		case "":
			continue // the leading comment
		case v1beta1.KindClusterInstancetype:
			obj = &v1beta1.VirtualMachineClusterInstancetype{}
			types = append(types, obj)
		case v1beta1.KindClusterPreference:
			obj = &v1beta1.VirtualMachineClusterPreference{}
			prefs = append(prefs, obj)
		default:
			return nil, fmt.Errorf("common.yaml document %d: unexpected kind %q", i, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			return nil, fmt.Errorf("common.yaml document %d (%s): %w", i, tm.Kind, err)
		}
	}
	return append(types, prefs...), nil
}
