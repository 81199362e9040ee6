package datavolume

import (
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// registryAnnotations tell the import controller to fill the claim from a
// registry image (the CRD's rules have checked the source).
func registryAnnotations(ann map[string]string, r *cdiv1.DataVolumeSourceRegistry) {
	ann[cdiv1.AnnSource], ann[cdiv1.AnnEndpoint] = cdiv1.SourceRegistry, ptr.Deref(r.URL, "")
	ann[cdiv1.AnnRegistryImportMethod] = string(ptr.Deref(r.PullMethod, cdiv1.RegistryPullPod))
	for k, v := range map[string]string{cdiv1.AnnSecret: ptr.Deref(r.SecretRef, ""), cdiv1.AnnCertConfigMap: ptr.Deref(r.CertConfigMap, "")} {
		if v != "" {
			ann[k] = v
		}
	}
	if r.Platform != nil && r.Platform.Architecture != "" {
		ann[cdiv1.AnnRegistryArchitecture] = r.Platform.Architecture
	}
}
