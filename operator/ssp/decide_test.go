package ssp

import (
	"crypto/x509"
	"encoding/base64"
	"errors"
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
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/api/conditions"
	kvv1 "github.com/kubevmm/kubevmm/api/core/v1"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	tektonv1alpha1 "github.com/kubevmm/kubevmm/api/tektontasks/v1alpha1"
)

var opts = Options{Namespace: "kubevirt", ImageRegistry: "reg.example/kubevmm", ImageTag: "v1", PullPolicy: corev1.PullIfNotPresent}

// defaultStrategy is KubeVirt's, what a cluster without a KubeVirt CR
// gets.
var defaultStrategy, _ = certs.FromKubeVirt(kvv1.KubeVirtCertificateRotateStrategy{})

func cond(st sspv1beta3.SSPStatus, t sspv1beta3.ConditionType) string {
	if c := conditions.Find(st.Conditions, t); c != nil {
		return string(c.Status) + "/" + c.Reason + ": " + c.Message
	}
	return "none"
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func TestDecide(t *testing.T) {
	now := metav1.Now()
	ready := Observed{Active: true, NamespaceExists: true, CertStrategy: defaultStrategy}
	with := func(o Observed, f func(*Observed)) Observed { f(&o); return o }
	tests := []struct {
		name    string
		ns      string // the SSP's; "" is the operator's, kubevirt
		spec    sspv1beta3.SSPSpec
		ann     map[string]string
		deleted bool
		obs     Observed
		action  Action
		phase   sspv1beta3.Phase
		paused  bool
		// condition type -> prefix of "Status/Reason: message"
		conds map[sspv1beta3.ConditionType]string
	}{
		{name: "deploying", obs: ready, action: Deploy, phase: sspv1beta3.PhaseDeploying,
			conds: map[sspv1beta3.ConditionType]string{
				sspv1beta3.ConditionAvailable:   "False/Available: Deployment kubevirt/virt-template-validator: not every replica is available",
				sspv1beta3.ConditionProgressing: "True/Progressing", sspv1beta3.ConditionDegraded: "False/Degraded"}},
		{name: "deployed", obs: with(ready, func(o *Observed) { o.ValidatorReady = true }), action: Deploy, phase: sspv1beta3.PhaseDeployed,
			conds: map[sspv1beta3.ConditionType]string{
				sspv1beta3.ConditionAvailable:   "True/Available: all SSP resources are available",
				sspv1beta3.ConditionProgressing: "False/Progressing", sspv1beta3.ConditionDegraded: "False/Degraded"}},
		{name: "a second SSP", obs: Observed{Other: "kubevirt/first"}, action: Nothing, phase: "",
			conds: map[sspv1beta3.ConditionType]string{
				sspv1beta3.ConditionDegraded:  "True/Degraded: there is one SSP per cluster and kubevirt/first is the cluster's: this one is ignored",
				sspv1beta3.ConditionAvailable: "False/Available"}},
		{name: "outside the operator's namespace", ns: "other", obs: ready, action: Nothing, phase: "",
			conds: map[sspv1beta3.ConditionType]string{
				sspv1beta3.ConditionDegraded:  "True/Degraded: the SSP must be in the operator's namespace, kubevirt: this one is ignored",
				sspv1beta3.ConditionAvailable: "False/Available"}},
		{name: "paused", ann: map[string]string{sspv1beta3.OperatorPausedAnnotation: "true"}, obs: ready, action: Nothing, paused: true},
		{name: "not paused by another value", ann: map[string]string{sspv1beta3.OperatorPausedAnnotation: "no"}, obs: ready, action: Deploy,
			phase: sspv1beta3.PhaseDeploying},
		{name: "a field kubevmm does not declare", obs: with(ready, func(o *Observed) { o.UnknownFields = []string{"cluster", "tlsSecurityProfile"} }),
			action: Nothing, phase: sspv1beta3.PhaseDeploying,
			conds: map[sspv1beta3.ConditionType]string{
				sspv1beta3.ConditionDegraded:  "True/Degraded: not supported by kubevmm: spec.cluster, spec.tlsSecurityProfile",
				sspv1beta3.ConditionAvailable: "False/Available", sspv1beta3.ConditionProgressing: "False/Progressing"}},
		{name: "no templates namespace", obs: with(ready, func(o *Observed) { o.NamespaceExists = false }), action: Nothing, phase: sspv1beta3.PhaseDeploying,
			conds: map[sspv1beta3.ConditionType]string{
				sspv1beta3.ConditionDegraded: `True/Degraded: spec.commonTemplates.namespace: namespace "openshift" does not exist`}},
		{name: "a KubeVirt strategy that cannot be used", obs: with(ready, func(o *Observed) {
			o.CertStrategyErr = errors.New("KubeVirt kubevirt/kv: spec.certificateRotateStrategy.selfSigned.server.duration 1m0s: at least 5m0s")
		}), action: Nothing, phase: sspv1beta3.PhaseDeploying,
			conds: map[sspv1beta3.ConditionType]string{
				sspv1beta3.ConditionDegraded: "True/Degraded: KubeVirt kubevirt/kv: spec.certificateRotateStrategy.selfSigned.server.duration"}},
		{name: "deleting", deleted: true, obs: Observed{Remaining: 3}, action: Cleanup, phase: sspv1beta3.PhaseDeleting,
			conds: map[sspv1beta3.ConditionType]string{sspv1beta3.ConditionProgressing: "True/Progressing: deleting 3 deployed objects"}},
		{name: "deleting while paused", deleted: true, ann: map[string]string{sspv1beta3.OperatorPausedAnnotation: "true"}, obs: Observed{Remaining: 3},
			action: Cleanup, phase: sspv1beta3.PhaseDeleting},
		{name: "deleted", deleted: true, action: Finalize, phase: sspv1beta3.PhaseDeleted,
			conds: map[sspv1beta3.ConditionType]string{sspv1beta3.ConditionAvailable: "False/Available: everything deployed was removed"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := tc.ns
			if ns == "" {
				ns = "kubevirt"
			}
			s := &sspv1beta3.SSP{ObjectMeta: metav1.ObjectMeta{Name: "ssp", Namespace: ns, Generation: 3, Annotations: tc.ann}, Spec: tc.spec}
			if s.Spec.CommonTemplates.Namespace == "" {
				s.Spec.CommonTemplates.Namespace = "openshift"
			}
			if tc.deleted {
				s.DeletionTimestamp = &now
			}
			o := tc.obs
			o.SSP = s
			d := Decide(o, opts, now)
			assert.Equal(t, tc.action, d.Action)
			assert.Equal(t, tc.phase, d.Status.Phase)
			assert.Equal(t, tc.paused, d.Status.Paused)
			for ct, want := range tc.conds {
				got := cond(d.Status, ct)
				assert.True(t, strings.HasPrefix(got, want), "%s: got %q, want %q...", ct, got, want)
			}
			if tc.paused {
				assert.Empty(t, d.Status.Conditions, "paused: the conditions are left as they were")
			}
			assert.Equal(t, d.Action == Deploy, len(d.Objects) > 0, "objects only to deploy")
			assert.Empty(t, s.Status.Conditions, "the SSP read is not modified")
		})
	}
}

// What a deploy applies: the Template CRD first, the common set and
// templates, the validator as the spec says; everything labelled and
// annotated with the SSP, what is in its namespace owned by it.
func TestDecideObjects(t *testing.T) {
	s := &sspv1beta3.SSP{ObjectMeta: metav1.ObjectMeta{Name: "ssp", Namespace: "kubevirt", UID: "uid-1"}, Spec: sspv1beta3.SSPSpec{
		CommonTemplates: sspv1beta3.CommonTemplates{Namespace: "templates"},
		TemplateValidator: &sspv1beta3.TemplateValidator{Replicas: ptr.To(int32(3)), Placement: &sspv1beta3.NodePlacement{
			NodeSelector: map[string]string{"node-role": "infra"}, Tolerations: []corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists}}}},
	}}
	d := Decide(Observed{SSP: s, Active: true, NamespaceExists: true, CertStrategy: defaultStrategy}, opts, metav1.Now())
	require.Equal(t, Deploy, d.Action)
	assert.Equal(t, "CustomResourceDefinition", d.Objects[0].GetKind())
	assert.Equal(t, "templates.template.openshift.io", d.Objects[0].GetName())
	for _, o := range d.Objects {
		assert.Equal(t, ManagedBy, o.GetLabels()[ManagedByLabel], "%s %s", o.GetKind(), o.GetName())
		assert.Equal(t, "kubevirt/ssp", o.GetAnnotations()[AnnotationPrimaryResource], "%s %s", o.GetKind(), o.GetName())
		owners := o.GetOwnerReferences()
		if o.GetNamespace() == "kubevirt" {
			require.Len(t, owners, 1, "%s %s", o.GetKind(), o.GetName())
			assert.Equal(t, "uid-1", string(owners[0].UID))
		} else {
			assert.Empty(t, owners, "%s %s", o.GetKind(), o.GetName())
		}
	}
	assert.NotNil(t, find(d.Objects, "VirtualMachineClusterInstancetype", "u1.small"))
	assert.NotNil(t, find(d.Objects, "VirtualMachineClusterPreference", "fedora"))
	tmpl := find(d.Objects, "Template", "fedora-server-small")
	require.NotNil(t, tmpl)
	assert.Equal(t, "templates", tmpl.GetNamespace())

	dep := find(d.Objects, "Deployment", ValidatorName)
	require.NotNil(t, dep)
	var back struct {
		Spec struct {
			Replicas int32 `json:"replicas"`
			Template struct {
				Spec corev1.PodSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(dep.Object, &back))
	assert.Equal(t, int32(3), back.Spec.Replicas)
	pod := back.Spec.Template.Spec
	assert.Equal(t, map[string]string{"node-role": "infra"}, pod.NodeSelector)
	assert.Len(t, pod.Tolerations, 1)
	require.Len(t, pod.Containers, 1)
	assert.Equal(t, "reg.example/kubevmm/virt-template-validator:v1", pod.Containers[0].Image)
	assert.Equal(t, []string{"--port=8443", "--cert-dir=/etc/webhook/certs"}, pod.Containers[0].Args)

	wh := find(d.Objects, "ValidatingWebhookConfiguration", ValidatorName)
	require.NotNil(t, wh)
	hooks, _, _ := unstructured.NestedSlice(wh.Object, "webhooks")
	require.Len(t, hooks, 2)
	leaf := find(d.Objects, "Secret", ValidatorSecret)
	require.NotNil(t, leaf)
	bundle, _, _ := unstructured.NestedString(leaf.Object, "data", CABundleKey)
	require.NotEmpty(t, bundle)
	for _, h := range hooks {
		h := h.(map[string]any)
		assert.Equal(t, "Fail", h["failurePolicy"])
		ca, _, _ := unstructured.NestedString(h, "clientConfig", "caBundle")
		assert.Equal(t, bundle, ca, "the bundle of the validator's Secret")
		svc, _, _ := unstructured.NestedString(h, "clientConfig", "service", "namespace")
		assert.Equal(t, "kubevirt", svc)
	}

	// The default: two replicas.
	s.Spec.TemplateValidator = nil
	d = Decide(Observed{SSP: s, Active: true, NamespaceExists: true, CertStrategy: defaultStrategy}, opts, metav1.Now())
	r, _, _ := unstructured.NestedInt64(find(d.Objects, "Deployment", ValidatorName).Object, "spec", "replicas")
	assert.Equal(t, int64(2), r)
}

// secretData is a Secret object's data, decoded.
func secretData(t *testing.T, u *unstructured.Unstructured) map[string][]byte {
	t.Helper()
	require.NotNil(t, u)
	m, _, _ := unstructured.NestedStringMap(u.Object, "data")
	out := map[string][]byte{}
	for k, v := range m {
		b, err := base64.StdEncoding.DecodeString(v)
		require.NoError(t, err)
		out[k] = b
	}
	return out
}

// The validator's certificate is the operator's: made on the first
// deploy (a CA, and a serving certificate for the Service it verifies),
// kept while valid, remade at once when the KubeVirt strategy is
// shortened below what it has left, the CA staying in the bundle.
func TestDecideValidatorCertificates(t *testing.T) {
	s := &sspv1beta3.SSP{ObjectMeta: metav1.ObjectMeta{Name: "ssp", Namespace: "kubevirt", UID: "uid-1"},
		Spec: sspv1beta3.SSPSpec{CommonTemplates: sspv1beta3.CommonTemplates{Namespace: "templates"}}}
	now := metav1.Now()
	o := Observed{SSP: s, Active: true, NamespaceExists: true, CertStrategy: defaultStrategy}
	d := Decide(o, opts, now)
	require.Equal(t, Deploy, d.Action)
	assert.Len(t, d.Renewed, 2, "the CA and the leaf made")
	assert.WithinDuration(t, now.Add(24*time.Hour-24*time.Hour/5), d.CertsDue, time.Minute, "the leaf is due a fifth before it expires")
	ca, leaf := secretData(t, find(d.Objects, "Secret", ValidatorCASecret)), secretData(t, find(d.Objects, "Secret", ValidatorSecret))
	roots, err := certs.ParseBundle(leaf[CABundleKey])
	require.NoError(t, err)
	require.Len(t, roots, 1)
	pool := x509.NewCertPool()
	pool.AddCert(roots[0])
	cert, _, err := certs.Parse(certs.KeyPair{Cert: leaf["tls.crt"], Key: leaf["tls.key"]})
	require.NoError(t, err)
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "virt-template-validator.kubevirt.svc"})
	require.NoError(t, err, "the validator's certificate verifies for its Service")

	// Stored: nothing renewed.
	o.Certs = storedCerts(ca, leaf)
	d = Decide(o, opts, now)
	assert.Empty(t, d.Renewed)
	assert.Equal(t, leaf["tls.crt"], secretData(t, find(d.Objects, "Secret", ValidatorSecret))["tls.crt"])

	// Shorter lifetimes: the CA and the leaf, valid longer than they now
	// may be, are remade at once; the previous CA stays in the bundle.
	o.CertStrategy = certs.Strategy{CA: certs.Config{Duration: 10 * time.Minute, RenewBefore: 5 * time.Minute},
		Server: certs.Config{Duration: 5 * time.Minute, RenewBefore: 2 * time.Minute}}
	d = Decide(o, opts, now)
	require.Len(t, d.Renewed, 2, "the CA and the leaf, both longer than the strategy allows: %v", d.Renewed)
	leaf2 := secretData(t, find(d.Objects, "Secret", ValidatorSecret))
	assert.NotEqual(t, leaf["tls.crt"], leaf2["tls.crt"])
	roots, err = certs.ParseBundle(leaf2[CABundleKey])
	require.NoError(t, err)
	assert.Len(t, roots, 2, "the previous CA stays in the bundle")
}

func TestDecideTektonTasks(t *testing.T) {
	now := metav1.Now()
	tt := &tektonv1alpha1.TektonTasks{ObjectMeta: metav1.ObjectMeta{Name: "tto", Generation: 2}}
	st := DecideTektonTasks(tt, now)
	assert.Equal(t, int64(2), st.ObservedGeneration)
	require.Len(t, st.Conditions, 1)
	c := st.Conditions[0]
	assert.Equal(t, tektonv1alpha1.ConditionDeprecated, c.Type)
	assert.Equal(t, corev1.ConditionTrue, c.Status)
	assert.Equal(t, "Deprecated", c.Reason)
	// Deciding again changes nothing: no write.
	tt.Status = st
	assert.Equal(t, st, DecideTektonTasks(tt, metav1.NewTime(now.Add(1e9))))
}

// Each dataImportCronTemplate is a DataImportCron, labelled and annotated
// as what the SSP deployed, in kubevirt-os-images (which is created) unless
// the template names its namespace; crons dropped from the list are pruned.
func TestDecideGoldenImages(t *testing.T) {
	now := metav1.Now()
	spec := cdiv1.DataImportCronSpec{Schedule: "0 */12 * * *", ManagedDataSource: "fedora",
		Template: cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{
			URL: ptr.To("docker://registry:5000/fedora:latest")}}}}}
	s := &sspv1beta3.SSP{ObjectMeta: metav1.ObjectMeta{Name: "ssp", Namespace: "kubevirt", UID: "u"}, Spec: sspv1beta3.SSPSpec{
		CommonTemplates: sspv1beta3.CommonTemplates{Namespace: "openshift", DataImportCronTemplates: []sspv1beta3.DataImportCronTemplate{
			{ObjectMeta: metav1.ObjectMeta{Name: "fedora-image-cron", Labels: map[string]string{"a": "b"}}, Spec: spec},
			{ObjectMeta: metav1.ObjectMeta{Name: "centos-image-cron", Namespace: "my-images"}, Spec: spec},
		}}}}
	o := Observed{SSP: s, Active: true, NamespaceExists: true, CertStrategy: defaultStrategy, DataImportCrons: []client.ObjectKey{
		{Namespace: sspv1beta3.GoldenImagesNamespace, Name: "fedora-image-cron"},
		{Namespace: sspv1beta3.GoldenImagesNamespace, Name: "dropped"},
		{Namespace: "my-images", Name: "old"},
	}}
	d := Decide(o, opts, now)
	require.Equal(t, Deploy, d.Action)
	assert.True(t, strings.HasPrefix(cond(d.Status, sspv1beta3.ConditionDegraded), "False/"), "templates are no longer refused")
	ns := find(d.Objects, "Namespace", sspv1beta3.GoldenImagesNamespace)
	require.NotNil(t, ns, "the golden images' namespace is made")
	assert.Equal(t, ManagedBy, ns.GetLabels()[ManagedByLabel])
	fedora := find(d.Objects, "DataImportCron", "fedora-image-cron")
	require.NotNil(t, fedora)
	assert.Equal(t, sspv1beta3.GoldenImagesNamespace, fedora.GetNamespace())
	assert.Equal(t, map[string]string{"a": "b", ManagedByLabel: ManagedBy}, fedora.GetLabels())
	assert.Equal(t, "kubevirt/ssp", fedora.GetAnnotations()[AnnotationPrimaryResource])
	assert.Empty(t, fedora.GetOwnerReferences(), "in another namespace than the SSP's: found by label, not owned")
	ds, _, _ := unstructured.NestedString(fedora.Object, "spec", "managedDataSource")
	assert.Equal(t, "fedora", ds)
	url, _, _ := unstructured.NestedString(fedora.Object, "spec", "template", "spec", "source", "registry", "url")
	assert.Equal(t, "docker://registry:5000/fedora:latest", url)
	centos := find(d.Objects, "DataImportCron", "centos-image-cron")
	require.NotNil(t, centos)
	assert.Equal(t, "my-images", centos.GetNamespace())
	assert.Equal(t, "DataImportCron", d.Objects[len(d.Objects)-1].GetKind(), "the crons last: their CRD is CDI's")
	assert.Equal(t, []client.ObjectKey{{Namespace: sspv1beta3.GoldenImagesNamespace, Name: "dropped"}, {Namespace: "my-images", Name: "old"}}, d.Prune)

	// Every template names its namespace (as HCO's do, which makes it):
	// the namespace is not made.
	s.Spec.CommonTemplates.DataImportCronTemplates[0].Namespace = sspv1beta3.GoldenImagesNamespace
	d = Decide(o, opts, now)
	assert.Nil(t, find(d.Objects, "Namespace", sspv1beta3.GoldenImagesNamespace))
	assert.NotNil(t, find(d.Objects, "DataImportCron", "fedora-image-cron"))
}
