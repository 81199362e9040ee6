package hco

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	kvv1 "github.com/kubevmm/kubevmm/api/core/v1"
	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
)

var now = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func newHCO() *hcov1.HyperConverged {
	return &hcov1.HyperConverged{ObjectMeta: metav1.ObjectMeta{Name: hcov1.Name, Namespace: "kubevirt", Generation: 2, UID: "u1"}}
}

func allCRDs() map[string]bool {
	m := map[string]bool{}
	for _, op := range Operands {
		m[op.CRD] = true
	}
	return m
}

func cond(st hcov1.HyperConvergedStatus, t string) string {
	if c := apimeta.FindStatusCondition(st.Conditions, t); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return "none"
}

func byKind(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	for _, u := range objs {
		m[u.GetKind()] = u
	}
	return m
}

// withConditions is u as its operator reports it.
func withConditions(u *unstructured.Unstructured, avail, progressing, degraded string) *unstructured.Unstructured {
	u = u.DeepCopy()
	c := func(t, s string) any {
		return map[string]any{"type": t, "status": s, "message": u.GetKind() + " says " + t + "=" + s}
	}
	u.Object["status"] = map[string]any{"conditions": []any{c("Available", avail), c("Progressing", progressing), c("Degraded", degraded)}}
	return u
}

func TestDecideOperandsFromSpec(t *testing.T) {
	hc := newHCO()
	hc.Spec.Virtualization.LiveMigrationConfig.ParallelMigrationsPerCluster = ptr.To[uint32](3)
	hc.Spec.Virtualization.LiveMigrationConfig.BandwidthPerMigration = ptr.To("64Mi")
	hc.Spec.Deployment.UninstallStrategy = hcov1.RemoveWorkloads
	hc.Spec.Security.CertConfig.Server = hcov1.CertRotateConfig{Duration: &metav1.Duration{Duration: 10 * time.Hour}, RenewBefore: &metav1.Duration{Duration: time.Hour}}
	hc.Spec.Networking = &hcov1.NetworkingConfig{KubeMacPoolConfiguration: &hcov1.KubeMacPoolConfig{RangeStart: ptr.To("02:00:00:00:00:00"), RangeEnd: ptr.To("02:00:00:00:ff:ff")}}
	d := Decide(Observed{HCO: hc, Namespace: "kubevirt", Version: "v9", CRDs: allCRDs()}, now)
	require.Equal(t, Apply, d.Action)
	objs := byKind(d.Objects)
	require.Len(t, objs, 4)

	kv := objs["KubeVirt"]
	assert.Equal(t, "kubevirt-kubevirt-hyperconverged", kv.GetName())
	assert.Equal(t, "kubevirt", kv.GetNamespace())
	assert.Equal(t, "u1", string(kv.GetOwnerReferences()[0].UID))
	assert.Equal(t, ManagedBy, kv.GetLabels()[ManagedByLabel])
	m, _, _ := unstructured.NestedMap(kv.Object, "spec", "configuration", "migrations")
	assert.Equal(t, map[string]any{"parallelMigrationsPerCluster": int64(3), "parallelOutboundMigrationsPerNode": int64(1),
		"bandwidthPerMigration": "64Mi", "completionTimeoutPerGiB": int64(20), "progressTimeout": int64(150),
		"allowAutoConverge": false, "allowPostCopy": false}, m)
	s, _, _ := unstructured.NestedString(kv.Object, "spec", "uninstallStrategy")
	assert.Equal(t, "RemoveWorkloads", s)
	// certConfig, upstream's defaults for the CA, which it leaves out.
	c, _, _ := unstructured.NestedMap(kv.Object, "spec", "certificateRotateStrategy", "selfSigned")
	assert.Equal(t, map[string]any{"ca": map[string]any{"duration": "48h0m0s", "renewBefore": "24h0m0s"},
		"server": map[string]any{"duration": "10h0m0s", "renewBefore": "1h0m0s"}}, c)

	nac := objs["NetworkAddonsConfig"]
	assert.Equal(t, "cluster", nac.GetName())
	assert.Empty(t, nac.GetNamespace(), "cluster-scoped")
	assert.Empty(t, nac.GetOwnerReferences(), "a cluster-scoped object cannot be owned by a namespaced one")
	pool, _, _ := unstructured.NestedStringMap(nac.Object, "spec", "kubeMacPool")
	assert.Equal(t, map[string]string{"rangeStart": "02:00:00:00:00:00", "rangeEnd": "02:00:00:00:ff:ff"}, pool)
	_, ok, _ := unstructured.NestedMap(nac.Object, "spec", "multus")
	assert.True(t, ok)

	ssp := objs["SSP"]
	ns, _, _ := unstructured.NestedString(ssp.Object, "spec", "commonTemplates", "namespace")
	assert.Equal(t, "openshift", ns, "upstream's default")
	assert.Equal(t, "cdi-kubevirt-hyperconverged", objs["CDI"].GetName())

	// Nothing reports yet.
	assert.Equal(t, "False/KubeVirtNotAvailable", cond(d.Status, hcov1.ConditionAvailable))
	assert.Equal(t, "True/KubeVirtProgressing", cond(d.Status, hcov1.ConditionProgressing))
	assert.Equal(t, "True/ReconcileCompleted", cond(d.Status, hcov1.ConditionReconcileComplete))
	assert.Equal(t, "warning", d.Status.SystemHealthStatus)
	assert.Equal(t, []hcov1.Version{{Name: "operator", Version: "v9"}}, d.Status.Versions)
	assert.Equal(t, int64(2), d.Status.ObservedGeneration)
	require.Len(t, d.Status.RelatedObjects, 4)
	assert.Equal(t, "KubeVirt", d.Status.RelatedObjects[0].Kind)
	assert.Equal(t, "kubevirt.io/v1", d.Status.RelatedObjects[0].APIVersion)
}

// An operand is made once its operator's CRD exists; until then it is
// neither related nor waited for.
func TestDecideOnlyInstalledOperands(t *testing.T) {
	hc := newHCO()
	d := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: map[string]bool{kvv1.KubeVirtCRDName: true}}, now)
	require.Len(t, d.Objects, 1)
	kv := withConditions(d.Objects[0], "True", "False", "False")
	d = Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: map[string]bool{kvv1.KubeVirtCRDName: true},
		Current: map[string]*unstructured.Unstructured{"KubeVirt": kv}}, now)
	assert.Equal(t, "True/ReconcileCompleted", cond(d.Status, hcov1.ConditionAvailable))
	assert.Equal(t, "False/ReconcileCompleted", cond(d.Status, hcov1.ConditionProgressing))
	assert.Equal(t, "False/ReconcileCompleted", cond(d.Status, hcov1.ConditionDegraded))
	assert.Equal(t, "True/ReconcileCompleted", cond(d.Status, hcov1.ConditionUpgradeable))
	assert.Equal(t, "healthy", d.Status.SystemHealthStatus)
	assert.Empty(t, d.Reverted)
	assert.Empty(t, d.Replace)
}

func TestDecideAggregatesWorstOperand(t *testing.T) {
	hc := newHCO()
	first := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs()}, now)
	cur := map[string]*unstructured.Unstructured{}
	for _, u := range first.Objects {
		cur[u.GetKind()] = withConditions(u, "True", "False", "False")
	}
	cur["CDI"] = withConditions(cur["CDI"], "False", "True", "False")
	cur["SSP"] = withConditions(cur["SSP"], "True", "False", "True")
	d := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs(), Current: cur}, now)
	assert.Equal(t, "False/CDINotAvailable", cond(d.Status, hcov1.ConditionAvailable))
	assert.Equal(t, "True/CDIProgressing", cond(d.Status, hcov1.ConditionProgressing))
	assert.Equal(t, "True/SSPDegraded", cond(d.Status, hcov1.ConditionDegraded))
	assert.Equal(t, "False/SSPDegraded", cond(d.Status, hcov1.ConditionUpgradeable))
	assert.Equal(t, "error", d.Status.SystemHealthStatus)
	c := apimeta.FindStatusCondition(d.Status.Conditions, hcov1.ConditionDegraded)
	assert.Equal(t, "SSP says Degraded=True", c.Message)
	assert.Equal(t, now, c.LastTransitionTime)
}

// Drift: an edit of a field the HCO sets, and a field someone added, are
// both reverted and counted; a change that follows the HCO CR is not.
func TestDecideDrift(t *testing.T) {
	hc := newHCO()
	o := Observed{HCO: hc, Namespace: "kubevirt", CRDs: map[string]bool{kvv1.KubeVirtCRDName: true}}
	applied := Decide(o, now).Objects[0]

	edited := applied.DeepCopy()
	edited.SetResourceVersion("7")
	require.NoError(t, unstructured.SetNestedField(edited.Object, int64(9), "spec", "configuration", "migrations", "parallelMigrationsPerCluster"))
	o.Current = map[string]*unstructured.Unstructured{"KubeVirt": edited}
	d := Decide(o, now)
	assert.Equal(t, "7", d.Objects[0].GetResourceVersion(), "applied onto what was read only")
	assert.Equal(t, []string{"kubevirt/kubevirt-kubevirt-hyperconverged"}, d.Reverted)
	assert.Empty(t, d.Replace, "the HCO owns the field: the apply puts it back")

	added := applied.DeepCopy()
	require.NoError(t, unstructured.SetNestedStringSlice(added.Object, []string{"X"}, "spec", "configuration", "developerConfiguration", "featureGates"))
	o.Current = map[string]*unstructured.Unstructured{"KubeVirt": added}
	d = Decide(o, now)
	assert.Equal(t, []string{"kubevirt/kubevirt-kubevirt-hyperconverged"}, d.Reverted)
	require.Len(t, d.Replace, 1)
	_, found, _ := unstructured.NestedFieldNoCopy(d.Replace[0].Object, "spec", "configuration", "developerConfiguration")
	assert.False(t, found, "the spec replaced")
	p, _, _ := unstructured.NestedInt64(d.Replace[0].Object, "spec", "configuration", "migrations", "parallelMigrationsPerCluster")
	assert.Equal(t, int64(5), p)

	// The HCO CR changed: the operand follows, nothing was out of band.
	o.Current = map[string]*unstructured.Unstructured{"KubeVirt": applied}
	hc.Spec.Virtualization.LiveMigrationConfig.ParallelMigrationsPerCluster = ptr.To[uint32](7)
	d = Decide(o, now)
	assert.Empty(t, d.Reverted)
}

func TestDecideJSONPatchAnnotation(t *testing.T) {
	hc := newHCO()
	hc.Annotations = map[string]string{"kubevirt.kubevirt.io/jsonpatch": `[{"op":"add","path":"/spec/configuration/developerConfiguration","value":{"featureGates":["SameNodeLiveMigration"]}}]`}
	d := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs()}, now)
	require.Equal(t, Apply, d.Action)
	gates, _, _ := unstructured.NestedStringSlice(byKind(d.Objects)["KubeVirt"].Object, "spec", "configuration", "developerConfiguration", "featureGates")
	assert.Equal(t, []string{"SameNodeLiveMigration"}, gates)
	assert.Equal(t, "True/UnsupportedFeatureAnnotation", cond(d.Status, hcov1.ConditionTaintedConfiguration))

	// Gone again: the condition too.
	hc.Annotations = nil
	hc.Status = d.Status
	d = Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs()}, now)
	assert.Equal(t, "none", cond(d.Status, hcov1.ConditionTaintedConfiguration))
}

func TestDecideRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		edit        func(*hcov1.HyperConverged)
		unknown     []string
		reason, msg string
	}{
		"bad patch": {edit: func(h *hcov1.HyperConverged) {
			h.Annotations = map[string]string{"ssp.kubevirt.io/jsonpatch": `[{"op":"add"`}
		},
			reason: ReasonInvalidAnnotation, msg: "annotation ssp.kubevirt.io/jsonpatch: not a JSON patch"},
		"patch that does not apply": {edit: func(h *hcov1.HyperConverged) {
			h.Annotations = map[string]string{"kubevirt.kubevirt.io/jsonpatch": `[{"op":"replace","path":"/spec/nothing/here","value":1}]`}
		}, reason: ReasonInvalidAnnotation, msg: "annotation kubevirt.kubevirt.io/jsonpatch: applying onto KubeVirt kubevirt-kubevirt-hyperconverged"},
		"patch outside the spec": {edit: func(h *hcov1.HyperConverged) {
			h.Annotations = map[string]string{"kubevirt.kubevirt.io/jsonpatch": `[{"op":"replace","path":"/metadata/name","value":"x"}]`}
		}, reason: ReasonInvalidAnnotation, msg: `path "/metadata/name" is outside /spec/`},
		"unknown field": {unknown: []string{"virtualization.evictionStrategy"}, reason: ReasonUnsupportedFields,
			msg: "not supported by kubevmm: spec.virtualization.evictionStrategy"},
		"enabled feature gate": {edit: func(h *hcov1.HyperConverged) { h.Spec.FeatureGates = []hcov1.FeatureGate{{Name: "downwardMetrics"}} },
			reason: ReasonUnsupportedFields, msg: "spec.featureGates[downwardMetrics]"},
		"cpu ratio": {edit: func(h *hcov1.HyperConverged) { h.Spec.Virtualization.VmiCPUAllocationRatio = ptr.To(4) },
			reason: ReasonUnsupportedFields, msg: "spec.virtualization.vmiCPUAllocationRatio (only 10)"},
		"half a MAC range": {edit: func(h *hcov1.HyperConverged) {
			h.Spec.Networking = &hcov1.NetworkingConfig{KubeMacPoolConfiguration: &hcov1.KubeMacPoolConfig{RangeStart: ptr.To("02:00:00:00:00:00")}}
		}, reason: ReasonUnsupportedFields, msg: "networking.kubeMacPoolConfiguration: rangeStart and rangeEnd go together"},
		"multicast MAC range": {edit: func(h *hcov1.HyperConverged) {
			h.Spec.Networking = &hcov1.NetworkingConfig{KubeMacPoolConfiguration: &hcov1.KubeMacPoolConfig{RangeStart: ptr.To("03:00:00:00:00:00"), RangeEnd: ptr.To("03:00:00:00:00:ff")}}
		}, reason: ReasonUnsupportedFields, msg: "is not a unicast range"},
		"bad bandwidth": {edit: func(h *hcov1.HyperConverged) {
			h.Spec.Virtualization.LiveMigrationConfig.BandwidthPerMigration = ptr.To("fast")
		},
			reason: ReasonUnsupportedFields, msg: `bandwidthPerMigration "fast"`},
	} {
		t.Run(name, func(t *testing.T) {
			hc := newHCO()
			if tc.edit != nil {
				tc.edit(hc)
			}
			d := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs(), UnknownFields: tc.unknown}, now)
			assert.Equal(t, Nothing, d.Action)
			assert.Empty(t, d.Objects)
			c := apimeta.FindStatusCondition(d.Status.Conditions, hcov1.ConditionDegraded)
			require.NotNil(t, c)
			assert.Equal(t, tc.reason, c.Reason)
			assert.Contains(t, c.Message, tc.msg)
			assert.Equal(t, "False/"+tc.reason, cond(d.Status, hcov1.ConditionReconcileComplete))
			assert.Equal(t, "error", d.Status.SystemHealthStatus)
		})
	}
}

func TestDecideInvalidRequest(t *testing.T) {
	for _, hc := range []*hcov1.HyperConverged{
		{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "kubevirt"}},
		{ObjectMeta: metav1.ObjectMeta{Name: hcov1.Name, Namespace: "default"}},
	} {
		d := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs()}, now)
		assert.Equal(t, Nothing, d.Action)
		assert.Empty(t, d.Objects)
		assert.Equal(t, "False/InvalidRequest", cond(d.Status, hcov1.ConditionReconcileComplete))
		hc.DeletionTimestamp = &now
		assert.Equal(t, Finalize, Decide(Observed{HCO: hc, Namespace: "kubevirt"}, now).Action)
	}
}

func TestDecideDelete(t *testing.T) {
	hc := newHCO()
	hc.DeletionTimestamp = &now
	kv := &unstructured.Unstructured{}
	kv.SetKind("KubeVirt")
	kv.SetName("kubevirt-kubevirt-hyperconverged")
	d := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs(), Current: map[string]*unstructured.Unstructured{"KubeVirt": kv}}, now)
	assert.Equal(t, DeleteOperands, d.Action)
	assert.Equal(t, []*unstructured.Unstructured{kv}, d.Objects)
	assert.Equal(t, "True/Deleting", cond(d.Status, hcov1.ConditionProgressing))
	d = Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs()}, now)
	assert.Equal(t, Finalize, d.Action)
}

// The upstream sample (deploy/hco.cr.yaml) is accepted as it is.
func TestUpstreamSampleAccepted(t *testing.T) {
	hc, unknown, _, err := DecodeHCO([]byte(sampleV1))
	require.NoError(t, err)
	assert.Empty(t, unknown)
	require.NoError(t, Validate(hc))
	require.NoError(t, ValidateCertConfig(hc.Spec.Security.CertConfig, "spec.security.certConfig"))
	hc.Namespace = "kubevirt"
	d := Decide(Observed{HCO: hc, Namespace: "kubevirt", CRDs: allCRDs()}, now)
	assert.Equal(t, Apply, d.Action)
}
