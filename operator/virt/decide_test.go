package virt

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/operator/virt/install"
)

var defaults = Options{Namespace: "kubevirt", ImageRegistry: "reg.example/kubevmm", ImageTag: "v1", PullPolicy: corev1.PullIfNotPresent,
	PluginDir: "/var/lib/kubelet/device-plugins", KubeletRoot: "/var/lib/kubelet"}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func cond(st v1.KubeVirtStatus, t v1.KubeVirtConditionType) string {
	for _, c := range st.Conditions {
		if c.Type == t {
			return string(c.Status) + "/" + c.Reason + ": " + c.Message
		}
	}
	return "none"
}

func TestDecide(t *testing.T) {
	now := metav1.Now()
	deleted := &now
	tests := []struct {
		name    string
		spec    v1.KubeVirtSpec
		deleted bool
		obs     Observed
		action  Action
		phase   v1.KubeVirtPhase
		// condition type -> prefix of "Status/Reason: message"
		conds map[v1.KubeVirtConditionType]string
	}{
		{name: "a second CR", obs: Observed{Active: false}, action: Nothing, phase: "",
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionSynchronized: "False/ExistingDeployment"}},
		{name: "deploying", obs: Observed{Active: true}, action: Deploy, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{
				v1.KubeVirtConditionAvailable: "False/DeploymentInProgress", v1.KubeVirtConditionProgressing: "True/DeploymentInProgress",
				v1.KubeVirtConditionCreated: "True/AllResourcesCreated", v1.KubeVirtConditionDegraded: "False/"}},
		{name: "deployed", obs: Observed{Active: true, Ready: true}, action: Deploy, phase: v1.KubeVirtPhaseDeployed,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionAvailable: "True/AllComponentsReady", v1.KubeVirtConditionProgressing: "False/"}},
		{name: "renewBefore not less than duration", spec: v1.KubeVirtSpec{CertificateRotateStrategy: v1.KubeVirtCertificateRotateStrategy{SelfSigned: &v1.KubeVirtSelfSignConfiguration{
			Server: &v1.CertConfig{Duration: &metav1.Duration{Duration: time.Hour}, RenewBefore: &metav1.Duration{Duration: time.Hour}}}}},
			obs: Observed{Active: true}, action: Nothing, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/DeploymentFailed: spec.certificateRotateStrategy.selfSigned.server.renewBefore 1h0m0s"}},
		{name: "a CA shorter than the leaves", spec: v1.KubeVirtSpec{CertificateRotateStrategy: v1.KubeVirtCertificateRotateStrategy{SelfSigned: &v1.KubeVirtSelfSignConfiguration{
			CA: &v1.CertConfig{Duration: &metav1.Duration{Duration: 12 * time.Hour}}}}},
			obs: Observed{Active: true}, action: Nothing, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/DeploymentFailed: spec.certificateRotateStrategy.selfSigned.ca.duration 12h0m0s: must be at least server.duration (24h0m0s)"}},
		{name: "an unmodeled field", spec: v1.KubeVirtSpec{WorkloadUpdateStrategy: &v1.Unmodeled{Raw: []byte(`{"workloadUpdateMethods":["LiveMigrate"]}`)}},
			obs: Observed{Active: true}, action: Nothing, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/DeploymentFailed: not supported by kubevmm: spec.workloadUpdateStrategy"}},
		{name: "a field kubevmm does not declare", obs: Observed{Active: true, UnknownFields: []string{"configuration.evictionStrategy"}},
			action: Nothing, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/DeploymentFailed: not supported by kubevmm: spec.configuration.evictionStrategy"}},
		{name: "a bad configuration", spec: v1.KubeVirtSpec{Configuration: v1.KubeVirtConfiguration{Migrations: &v1.MigrationConfiguration{ParallelMigrationsPerCluster: ptr.To(uint32(0))}}},
			obs: Observed{Active: true}, action: Nothing, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/DeploymentFailed: spec.configuration.migrations.parallelMigrationsPerCluster"}},
		{name: "a patch that does not decode", spec: v1.KubeVirtSpec{CustomizeComponents: v1.CustomizeComponents{Patches: []v1.CustomizeComponentsPatch{
			{ResourceName: "virt-api", ResourceType: "Deployment", Type: v1.JSONPatchType, Patch: `{"not":"a json patch"}`}}}},
			obs: Observed{Active: true}, action: Nothing, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/DeploymentFailed: spec.customizeComponents.patches[0] (Deployment virt-api): json patch"}},
		{name: "a patch that renames", spec: v1.KubeVirtSpec{CustomizeComponents: v1.CustomizeComponents{Patches: []v1.CustomizeComponentsPatch{
			{ResourceName: "virt-api", ResourceType: "Service", Type: v1.MergePatchType, Patch: `{"metadata":{"name":"other"}}`}}}},
			obs: Observed{Active: true}, action: Nothing, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/DeploymentFailed: spec.customizeComponents.patches: a patch of Service virt-api changes"}},
		{name: "a strategic patch of an unstructured kind", spec: v1.KubeVirtSpec{CustomizeComponents: v1.CustomizeComponents{Patches: []v1.CustomizeComponentsPatch{
			{ResourceName: install.APIServiceName, ResourceType: "APIService", Type: v1.StrategicMergePatchType, Patch: `{}`}}}},
			obs: Observed{Active: true}, action: Nothing, phase: v1.KubeVirtPhaseDeploying,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/DeploymentFailed: spec.customizeComponents.patches[0] (APIService v1.subresources.kubevirt.io): a strategic merge patch needs a built-in kind"}},
		{name: "uninstall blocked", spec: v1.KubeVirtSpec{UninstallStrategy: v1.KubeVirtUninstallBlockUninstallIfWorkloadsExist}, deleted: true,
			obs: Observed{Active: true, Workloads: 2, Remaining: 40}, action: Nothing, phase: v1.KubeVirtPhaseDeleting,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "True/WorkloadsExist: uninstallStrategy BlockUninstallIfWorkloadsExist: 2 "}},
		{name: "uninstall removes workloads (the default)", deleted: true,
			obs: Observed{Active: true, Workloads: 2}, action: DeleteWorkloads, phase: v1.KubeVirtPhaseDeleting,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionAvailable: "False/DeletionInProgress"}},
		{name: "uninstall removes components", spec: v1.KubeVirtSpec{UninstallStrategy: v1.KubeVirtUninstallBlockUninstallIfWorkloadsExist}, deleted: true,
			obs: Observed{Active: true, Remaining: 3}, action: DeleteComponents, phase: v1.KubeVirtPhaseDeleting,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionProgressing: "True/DeletionInProgress: deleting 3 deployed objects"}},
		{name: "uninstalled", deleted: true, obs: Observed{Active: true}, action: Finalize, phase: v1.KubeVirtPhaseDeleted,
			conds: map[v1.KubeVirtConditionType]string{v1.KubeVirtConditionDegraded: "False/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: "kubevirt", Generation: 3}, Spec: tc.spec}
			if tc.deleted {
				kv.DeletionTimestamp = deleted
			}
			o := tc.obs
			o.KubeVirt = kv
			d := Decide(o, defaults, now)
			assert.Equal(t, tc.action, d.Action)
			assert.Equal(t, tc.phase, d.Status.Phase)
			for ct, want := range tc.conds {
				got := cond(d.Status, ct)
				assert.True(t, strings.HasPrefix(got, want), "%s: got %q, want %q...", ct, got, want)
			}
			assert.Equal(t, d.Action == Deploy, len(d.Objects) > 0, "objects only to deploy")
			assert.Empty(t, kv.Status.Conditions, "the CR read is not modified")
		})
	}
}

// What a deploy applies: the CRDs (not the KubeVirt CRD) first, every
// object labelled and annotated with the version, the CR's image
// settings over the operator's defaults, its configuration in the
// ConfigMap, its patches applied.
func TestDecideObjects(t *testing.T) {
	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "kv", Namespace: "kubevirt"}, Spec: v1.KubeVirtSpec{
		ImageTag: "v2", ImagePullPolicy: corev1.PullNever,
		Configuration: v1.KubeVirtConfiguration{DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: []string{"SameNodeLiveMigration"}}},
		CustomizeComponents: v1.CustomizeComponents{Patches: []v1.CustomizeComponentsPatch{
			{ResourceName: "virt-handler", ResourceType: "DaemonSet", Type: v1.StrategicMergePatchType,
				Patch: `{"spec":{"template":{"spec":{"containers":[{"name":"virt-handler","args":["--v=4"]}]}}}}`},
		}},
	}}
	d := Decide(Observed{KubeVirt: kv, Active: true}, defaults, metav1.Now())
	require.Equal(t, Deploy, d.Action)
	assert.Equal(t, "CustomResourceDefinition", d.Objects[0].GetKind(), "CRDs first")
	assert.Nil(t, find(d.Objects, "CustomResourceDefinition", v1.KubeVirtCRDName), "the KubeVirt CRD is the operator's deployment's")
	assert.NotNil(t, find(d.Objects, "CustomResourceDefinition", "virtualmachineinstances.kubevirt.io"))
	for _, o := range d.Objects {
		assert.Equal(t, ManagedBy, o.GetLabels()[install.ManagedByLabel], "%s %s", o.GetKind(), o.GetName())
		assert.Equal(t, "v2", o.GetAnnotations()[AnnotationVersion], "%s %s", o.GetKind(), o.GetName())
		assert.Equal(t, "reg.example/kubevmm", o.GetAnnotations()[AnnotationRegistry], "%s %s", o.GetKind(), o.GetName())
	}
	assert.Equal(t, "v2", d.Status.TargetKubeVirtVersion)
	assert.Empty(t, d.Status.ObservedKubeVirtVersion, "not yet available")

	ds := find(d.Objects, "DaemonSet", "virt-handler")
	require.NotNil(t, ds)
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	require.Len(t, containers, 1)
	c := containers[0].(map[string]any)
	assert.Equal(t, "reg.example/kubevmm/virt-handler:v2", c["image"])
	assert.Equal(t, "Never", c["imagePullPolicy"])
	assert.Equal(t, []any{"--v=4"}, c["args"], "the strategic patch replaces the list it names")
	assert.NotEmpty(t, c["volumeMounts"], "and keeps the rest")

	cm := find(d.Objects, "ConfigMap", install.ConfigMapName)
	require.NotNil(t, cm)
	data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
	assert.Contains(t, data, "SameNodeLiveMigration")
	var back corev1.ConfigMap
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(cm.Object, &back))
	assert.Equal(t, "kubevirt", back.Namespace)
}

// A CR that was second becomes the installation once the first is gone.
func TestDecideSecondTakesOver(t *testing.T) {
	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: "other"}}
	d := Decide(Observed{KubeVirt: kv}, defaults, metav1.Now())
	require.Equal(t, "False/ExistingDeployment: another KubeVirt CR is the cluster's installation; this one is ignored",
		cond(d.Status, v1.KubeVirtConditionSynchronized))
	kv.Status = d.Status
	d = Decide(Observed{KubeVirt: kv, Active: true}, defaults, metav1.Now())
	assert.Equal(t, Deploy, d.Action)
	assert.Equal(t, v1.KubeVirtPhaseDeploying, d.Status.Phase)
	assert.Equal(t, "none", cond(d.Status, v1.KubeVirtConditionSynchronized))
}
