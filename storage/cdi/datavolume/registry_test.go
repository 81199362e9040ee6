package datavolume_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/datavolume"
)

// A registry source goes onto the claim as upstream's annotations; the
// pull method defaults to pod.
func TestClaimRegistry(t *testing.T) {
	dv := storageDV("1Gi", nil)
	dv.Spec.Source = &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://r:5000/a/b:1"),
		SecretRef: ptr.To("creds"), CertConfigMap: ptr.To("ca"), Platform: &cdiv1.PlatformOptions{Architecture: "arm64"}}}
	pvc, err := datavolume.Claim(dv, hostpath)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{cdiv1.AnnContentType: "kubevirt", cdiv1.AnnSource: "registry", cdiv1.AnnEndpoint: "docker://r:5000/a/b:1",
		cdiv1.AnnRegistryImportMethod: "pod", cdiv1.AnnSecret: "creds", cdiv1.AnnCertConfigMap: "ca", cdiv1.AnnRegistryArchitecture: "arm64"}, pvc.Annotations)

	dv.Spec.Source.Registry = &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://r:5000/a/b:1"), PullMethod: ptr.To(cdiv1.RegistryPullNode)}
	pvc, err = datavolume.Claim(dv, hostpath)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{cdiv1.AnnContentType: "kubevirt", cdiv1.AnnSource: "registry", cdiv1.AnnEndpoint: "docker://r:5000/a/b:1",
		cdiv1.AnnRegistryImportMethod: "node"}, pvc.Annotations)
}
