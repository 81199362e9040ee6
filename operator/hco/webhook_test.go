package hco

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
)

// sampleV1 is upstream's deploy/hco.cr.yaml, as JSON.
const sampleV1 = `{"apiVersion":"hco.kubevirt.io/v1","kind":"HyperConverged","metadata":{"name":"kubevirt-hyperconverged"},
"spec":{"deployment":{"deployNetworkResourcesInjector":true,"deployVmConsoleProxy":false,"uninstallStrategy":"BlockUninstallIfWorkloadsExist"},
"security":{"certConfig":{"ca":{"duration":"48h0m0s","renewBefore":"24h0m0s"},"server":{"duration":"24h0m0s","renewBefore":"12h0m0s"}}},
"virtualization":{"higherWorkloadDensity":{"memoryOvercommitPercentage":100},
"liveMigrationConfig":{"allowAutoConverge":false,"allowPostCopy":false,"allowWorkloadDisruption":false,"completionTimeoutPerGiB":20,
"parallelMigrationsPerCluster":5,"parallelOutboundMigrationsPerNode":1,"progressTimeout":150},
"virtualMachineOptions":{"disableFreePageReporting":false,"disableSerialConsoleLog":false},"vmiCPUAllocationRatio":10,
"workloadUpdateStrategy":{"batchEvictionInterval":"1m0s","batchEvictionSize":10,"workloadUpdateMethods":["LiveMigrate"]}},
"workloadSources":{"enableCommonBootImageImport":true}}}`

func TestValidateCertConfig(t *testing.T) {
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		require.NoError(t, err)
		return &metav1.Duration{Duration: v}
	}
	for name, tc := range map[string]struct {
		c    hcov1.CertConfig
		want string
	}{
		"defaults": {},
		"upstream": {c: hcov1.CertConfig{CA: hcov1.CertRotateConfig{Duration: d("48h"), RenewBefore: d("24h")}, Server: hcov1.CertRotateConfig{Duration: d("24h"), RenewBefore: d("12h")}}},
		// renewBefore equal to the duration would remake the certificate
		// at every pass.
		"equal":     {c: hcov1.CertConfig{CA: hcov1.CertRotateConfig{Duration: d("24h"), RenewBefore: d("24h")}, Server: hcov1.CertRotateConfig{Duration: d("24h"), RenewBefore: d("12h")}}, want: "P.ca.renewBefore 24h0m0s: must be positive and less than ca.duration (24h0m0s)"},
		"ca renew":  {c: hcov1.CertConfig{CA: hcov1.CertRotateConfig{RenewBefore: d("49h")}}, want: "P.ca.renewBefore 49h0m0s: must be positive and less than ca.duration (48h0m0s)"},
		"srv renew": {c: hcov1.CertConfig{Server: hcov1.CertRotateConfig{Duration: d("1h"), RenewBefore: d("2h")}}, want: "P.server.renewBefore 2h0m0s: must be positive and less than server.duration (1h0m0s)"},
		"srv > ca":  {c: hcov1.CertConfig{CA: hcov1.CertRotateConfig{Duration: d("30h")}, Server: hcov1.CertRotateConfig{Duration: d("31h")}}, want: "P.ca.duration 30h0m0s: must be at least server.duration (31h0m0s)"},
		"zero":      {c: hcov1.CertConfig{CA: hcov1.CertRotateConfig{Duration: d("0s")}}, want: "P.ca.duration 0s: at least 5m0s"},
	} {
		t.Run(name, func(t *testing.T) {
			err := ValidateCertConfig(tc.c, "P")
			if tc.want == "" {
				assert.NoError(t, err)
			} else {
				assert.EqualError(t, err, tc.want)
			}
		})
	}
}

func TestDecodeHCO(t *testing.T) {
	hc, unknown, path, err := DecodeHCO([]byte(`{"apiVersion":"hco.kubevirt.io/v1beta1","kind":"HyperConverged","metadata":{"name":"n"},
		"spec":{"uninstallStrategy":"RemoveWorkloads","certConfig":{"ca":{"duration":"1h"}},"infra":{"x":1},"featureGates":{"alignCPUs":false}}}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"infra"}, unknown, "named as written, in v1beta1")
	assert.Equal(t, "spec.certConfig", path)
	assert.Equal(t, hcov1.RemoveWorkloads, hc.Spec.Deployment.UninstallStrategy)
	assert.Equal(t, time.Hour, hc.Spec.Security.CertConfig.CA.Duration.Duration)
	assert.Equal(t, []hcov1.FeatureGate{{Name: "alignCPUs", State: hcov1.FeatureGateDisabled}}, hc.Spec.FeatureGates)

	_, unknown, path, err = DecodeHCO([]byte(`{"apiVersion":"hco.kubevirt.io/v1","spec":{"virtualization":{"evictionStrategy":"LiveMigrate"}}}`))
	require.NoError(t, err)
	assert.Equal(t, []string{"virtualization.evictionStrategy"}, unknown)
	assert.Equal(t, "spec.security.certConfig", path)

	_, _, _, err = DecodeHCO([]byte(`{"apiVersion":"hco.kubevirt.io/v1","spec":{"featureGates":"x"}}`))
	assert.ErrorContains(t, err, "decoding the HyperConverged")
}

func TestConversionHandler(t *testing.T) {
	srv := httptest.NewServer(ConversionHandler())
	defer srv.Close()
	review := func(to string, objs ...string) *apiextensionsv1.ConversionResponse {
		req := apiextensionsv1.ConversionReview{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"},
			Request: &apiextensionsv1.ConversionRequest{UID: "r1", DesiredAPIVersion: to}}
		for _, o := range objs {
			req.Request.Objects = append(req.Request.Objects, runtime.RawExtension{Raw: []byte(o)})
		}
		b, err := json.Marshal(req)
		require.NoError(t, err)
		resp, err := http.Post(srv.URL, "application/json", bytes.NewReader(b))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		out := &apiextensionsv1.ConversionReview{}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
		require.NotNil(t, out.Response)
		assert.Equal(t, "r1", string(out.Response.UID))
		return out.Response
	}
	r := review("hco.kubevirt.io/v1beta1", sampleV1)
	require.Equal(t, metav1.StatusSuccess, r.Result.Status, r.Result.Message)
	require.Len(t, r.ConvertedObjects, 1)
	var got map[string]any
	require.NoError(t, json.Unmarshal(r.ConvertedObjects[0].Raw, &got))
	assert.Equal(t, "hco.kubevirt.io/v1beta1", got["apiVersion"])
	assert.Equal(t, map[string]any{"vmiCPUAllocationRatio": float64(10)}, got["spec"].(map[string]any)["resourceRequirements"])

	r = review("hco.kubevirt.io/v1", sampleV1, `{"apiVersion":"example.com/v1"}`)
	assert.Equal(t, metav1.StatusFailure, r.Result.Status)
	assert.Contains(t, r.Result.Message, `object 1: apiVersion "example.com/v1"`)
	assert.Empty(t, r.ConvertedObjects)

	resp, err := http.Post(srv.URL, "application/json", bytes.NewReader([]byte(`{"kind":"ConversionReview"}`)))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
