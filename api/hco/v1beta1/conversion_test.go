package v1beta1

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
)

func full() *hcov1.HyperConverged {
	d := func(s string) *metav1.Duration {
		v, _ := time.ParseDuration(s)
		return &metav1.Duration{Duration: v}
	}
	return &hcov1.HyperConverged{
		TypeMeta:   metav1.TypeMeta{APIVersion: "hco.kubevirt.io/v1", Kind: "HyperConverged"},
		ObjectMeta: metav1.ObjectMeta{Name: hcov1.Name, Namespace: "kubevirt", Annotations: map[string]string{"a": "b"}, Generation: 3},
		Spec: hcov1.HyperConvergedSpec{
			FeatureGates: []hcov1.FeatureGate{{Name: "alignCPUs", State: hcov1.FeatureGateDisabled}, {Name: "downwardMetrics", State: hcov1.FeatureGateEnabled}},
			Virtualization: hcov1.VirtualizationConfig{
				LiveMigrationConfig: hcov1.LiveMigrationConfigurations{ParallelMigrationsPerCluster: ptr.To[uint32](5),
					ParallelOutboundMigrationsPerNode: ptr.To[uint32](1), BandwidthPerMigration: ptr.To("64Mi"),
					CompletionTimeoutPerGiB: ptr.To[int64](20), ProgressTimeout: ptr.To[int64](150), AllowAutoConverge: ptr.To(true),
					AllowPostCopy: ptr.To(false), AllowWorkloadDisruption: ptr.To(false)},
				WorkloadUpdateStrategy: &hcov1.WorkloadUpdateStrategy{WorkloadUpdateMethods: []string{"LiveMigrate"},
					BatchEvictionSize: ptr.To(10), BatchEvictionInterval: d("1m")},
				VirtualMachineOptions: &hcov1.VirtualMachineOptions{DisableFreePageReporting: ptr.To(false), DisableSerialConsoleLog: ptr.To(false)},
				HigherWorkloadDensity: &hcov1.HigherWorkloadDensityConfiguration{MemoryOvercommitPercentage: 100},
				VmiCPUAllocationRatio: ptr.To(10),
			},
			Networking: &hcov1.NetworkingConfig{KubeMacPoolConfiguration: &hcov1.KubeMacPoolConfig{
				RangeStart: ptr.To("02:00:00:00:00:00"), RangeEnd: ptr.To("02:00:00:00:FF:FF")}},
			WorkloadSources: hcov1.WorkloadSourcesConfig{CommonTemplatesNamespace: ptr.To("templates"), EnableCommonBootImageImport: ptr.To(true)},
			Security: hcov1.SecurityConfig{CertConfig: hcov1.CertConfig{
				CA:     hcov1.CertRotateConfig{Duration: d("48h"), RenewBefore: d("24h")},
				Server: hcov1.CertRotateConfig{Duration: d("24h"), RenewBefore: d("12h")}}},
			Deployment: hcov1.DeploymentConfig{UninstallStrategy: hcov1.BlockUninstallIfWorkloadsExist, DeployVMConsoleProxy: ptr.To(false)},
		},
		Status: hcov1.HyperConvergedStatus{ObservedGeneration: 3, SystemHealthStatus: "healthy",
			Conditions: []metav1.Condition{{Type: hcov1.ConditionAvailable, Status: metav1.ConditionTrue, Reason: "ReconcileCompleted"}},
			Versions:   []hcov1.Version{{Name: "operator", Version: "devel"}}},
	}
}

// Every field survives v1 -> v1beta1 -> v1 (the API server stores v1 and
// serves v1beta1 from it, and back on a write).
func TestRoundTripFromV1(t *testing.T) {
	in := full()
	assert.Equal(t, in, ToV1(FromV1(in)))
	// An empty spec stays empty.
	empty := &hcov1.HyperConverged{TypeMeta: in.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: hcov1.Name}}
	assert.Equal(t, empty, ToV1(FromV1(empty)))
}

func TestRoundTripFromV1beta1(t *testing.T) {
	b := FromV1(full())
	assert.Equal(t, map[string]bool{"alignCPUs": false, "downwardMetrics": true}, b.Spec.FeatureGates)
	assert.Equal(t, ptr.To(10), b.Spec.ResourceRequirements.VmiCPUAllocationRatio)
	assert.Equal(t, hcov1.BlockUninstallIfWorkloadsExist, b.Spec.UninstallStrategy)
	assert.Equal(t, b, FromV1(ToV1(b)))
}

// What v1 normalizes: a gate without a state is enabled; the field
// v1beta1 lacks is dropped.
func TestFromV1Normalizes(t *testing.T) {
	in := full()
	in.Spec.FeatureGates = []hcov1.FeatureGate{{Name: "downwardMetrics"}}
	in.Spec.Deployment.DeployNetworkResourcesInjector = ptr.To(true)
	out := ToV1(FromV1(in))
	assert.Equal(t, []hcov1.FeatureGate{{Name: "downwardMetrics", State: hcov1.FeatureGateEnabled}}, out.Spec.FeatureGates)
	assert.Nil(t, out.Spec.Deployment.DeployNetworkResourcesInjector)
}

func TestConvert(t *testing.T) {
	v1doc, err := json.Marshal(full())
	require.NoError(t, err)
	b, err := Convert(v1doc, "hco.kubevirt.io/v1beta1")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, "hco.kubevirt.io/v1beta1", m["apiVersion"])
	assert.Equal(t, "BlockUninstallIfWorkloadsExist", m["spec"].(map[string]any)["uninstallStrategy"])
	back, err := Convert(b, "hco.kubevirt.io/v1")
	require.NoError(t, err)
	assert.JSONEq(t, string(v1doc), string(back))

	for name, tc := range map[string]struct{ doc, to, want string }{
		"not JSON":         {`{`, "hco.kubevirt.io/v1", "decoding the object"},
		"foreign version":  {`{"apiVersion":"hco.kubevirt.io/v2"}`, "hco.kubevirt.io/v1", `apiVersion "hco.kubevirt.io/v2"`},
		"foreign target":   {`{"apiVersion":"hco.kubevirt.io/v1"}`, "v9", `desired apiVersion "v9"`},
		"wrong field type": {`{"apiVersion":"hco.kubevirt.io/v1beta1","spec":{"featureGates":[1]}}`, "hco.kubevirt.io/v1", "decoding hco.kubevirt.io/v1beta1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Convert([]byte(tc.doc), tc.to)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
