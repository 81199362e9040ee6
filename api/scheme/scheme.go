// Package scheme is the runtime scheme every kubevmm component and test
// talks to the API server with: Kubernetes' built-in kinds plus
// kubevirt.io/v1, instancetype.kubevirt.io/v1beta1 and CDI's
// cdi.kubevirt.io/v1beta1 (VMs on DataVolumes). It lives apart from api/core/v1 so that importing the
// types alone (virtctl) does not pull in all of client-go's kinds.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// New returns a scheme with the built-in kinds, kubevirt.io/v1,
// instancetype.kubevirt.io/v1beta1 and cdi.kubevirt.io/v1beta1.
func New() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering client-go types: %w", err)
	}
	if err := v1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering kubevirt.io/v1 types: %w", err)
	}
	if err := v1beta1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering instancetype.kubevirt.io/v1beta1 types: %w", err)
	}
	if err := cdiv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("registering cdi.kubevirt.io/v1beta1 types: %w", err)
	}
	return s, nil
}
