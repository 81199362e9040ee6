package ssp_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdicrds "github.com/kubevmm/kubevmm/api/cdi/crds"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/api/conditions"
	kvv1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	sspcrds "github.com/kubevmm/kubevmm/api/ssp/crds"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	tektonv1alpha1 "github.com/kubevmm/kubevmm/api/tektontasks/v1alpha1"
	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/operator/ssp"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

const ns = "kubevirt"

func condition(s *sspv1beta3.SSP, t sspv1beta3.ConditionType) string {
	if c := conditions.Find(s.Status.Conditions, t); c != nil {
		return string(c.Status) + "/" + c.Reason + ": " + c.Message
	}
	return "none"
}

// The operator against a real API server (no kubelet: the test reports
// the validator available itself), running as its service account with
// the RBAC it is deployed with: an SSP deploys the Template CRD, the
// common instance types, preferences and templates and the validator;
// edits and deletions are reverted; dataImportCronTemplates become
// DataImportCrons (reverted, pruned); unknown fields are refused by name; a second SSP is refused;
// pausing stops it; TektonTasks get their Deprecated condition; deleting
// the SSP removes what it deployed outside its namespace.
func TestSSPEnvtest(t *testing.T) {
	crds, err := sspcrds.All()
	require.NoError(t, err)
	cdi, err := cdicrds.All()
	require.NoError(t, err)
	crds = append(crds, cdi...)
	cfg, k8s := apiserver.Start(t, apiserver.WithCRDs(crds...))
	ctx := context.Background()
	s := k8s.Scheme()
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	require.NoError(t, sspv1beta3.AddToScheme(s))
	require.NoError(t, tektonv1alpha1.AddToScheme(s))
	require.NoError(t, templatev1.AddToScheme(s))
	require.NoError(t, cdiv1.AddToScheme(s))
	for _, n := range []string{ns, "other"} {
		require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}

	ops, err := ssp.Operator(ssp.OperatorConfig{Namespace: ns, ImageRegistry: "localhost/kubevmm", ImageTag: "envtest", PullPolicy: corev1.PullNever, ManagedBy: "test"})
	require.NoError(t, err)
	for _, o := range ops {
		if _, ok := o.(*apiextensionsv1.CustomResourceDefinition); !ok { // installed by Start
			require.NoError(t, k8s.Create(ctx, o))
		}
	}
	opCfg := apiserver.AsServiceAccount(cfg, ns, ssp.OperatorName)
	mgr := apiserver.NewManager(t, opCfg, ctrl.Options{Scheme: s, Cache: kit.OwnNamespaceCache(ns)})
	r := &ssp.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Options: ssp.Options{Namespace: ns, ImageRegistry: "localhost/kubevmm", ImageTag: "envtest", PullPolicy: corev1.PullNever}}
	require.NoError(t, r.SetupWithManager(mgr))
	require.NoError(t, (&ssp.TektonTasksReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	get := func(name, namespace string) *sspv1beta3.SSP {
		out := &sspv1beta3.SSP{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, out))
		return out
	}
	// patch writes raw JSON as a merge patch (the operator writes the status meanwhile).
	patch := func(name, namespace, p string) {
		require.NoError(t, k8s.Patch(ctx, &sspv1beta3.SSP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}},
			client.RawPatch("application/merge-patch+json", []byte(p))))
	}
	waitCond := func(name, namespace string, ct sspv1beta3.ConditionType, prefix string) *sspv1beta3.SSP {
		var cur *sspv1beta3.SSP
		apiserver.WaitFor(t, fmt.Sprintf("%s %s", ct, prefix), func() (bool, string) {
			cur = get(name, namespace)
			c := condition(cur, ct)
			return strings.HasPrefix(c, prefix), c
		})
		return cur
	}

	// The templates' namespace is missing at first: Degraded, naming it.
	cr := &sspv1beta3.SSP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ssp-kubevirt-hyperconverged"},
		Spec: sspv1beta3.SSPSpec{CommonTemplates: sspv1beta3.CommonTemplates{Namespace: "openshift"}}}
	require.NoError(t, k8s.Create(ctx, cr))
	waitCond(cr.Name, ns, sspv1beta3.ConditionDegraded, `True/Degraded: spec.commonTemplates.namespace: namespace "openshift" does not exist`)
	// Its creation alone brings the SSP back (as when one manifest makes
	// both and the SSP's event comes first).
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "openshift"}}))

	// Deploying: everything is there.
	cr = waitCond(cr.Name, ns, sspv1beta3.ConditionProgressing, "True/Progressing")
	assert.Equal(t, sspv1beta3.PhaseDeploying, cr.Status.Phase)
	assert.Contains(t, cr.Finalizers, sspv1beta3.Finalizer)
	assert.Equal(t, "envtest", cr.Status.TargetVersion)
	tmpl := &templatev1.Template{}
	apiserver.WaitFor(t, "the common templates", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: "openshift", Name: "fedora-server-small"}, tmpl)
		return err == nil, fmt.Sprint(err)
	})
	assert.Equal(t, ssp.ManagedBy, tmpl.Labels[ssp.ManagedByLabel])
	assert.Equal(t, ns+"/"+cr.Name, tmpl.Annotations[ssp.AnnotationPrimaryResource])
	dep := &appsv1.Deployment{}
	apiserver.WaitFor(t, "the validator's Deployment", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ssp.ValidatorName}, dep)
		return err == nil, fmt.Sprint(err)
	})
	assert.Equal(t, "localhost/kubevmm/virt-template-validator:envtest", dep.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, int32(2), *dep.Spec.Replicas, "the CRD's default")
	require.Len(t, dep.OwnerReferences, 1)
	assert.Equal(t, cr.UID, dep.OwnerReferences[0].UID)
	for _, obj := range []client.Object{&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ssp.ValidatorName}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ssp.ValidatorServiceAccount}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ssp.ValidatorClusterRole}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ssp.ValidatorClusterRoleBinding}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ssp.ValidatorName}},
		&v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: "u1.small"}},
		&v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: "cx1.medium"}},
		&v1beta1.VirtualMachineClusterPreference{ObjectMeta: metav1.ObjectMeta{Name: "fedora"}},
		&apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "templates.template.openshift.io"}},
	} {
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj), "%T %s", obj, obj.GetName())
		assert.Equal(t, ssp.ManagedBy, obj.GetLabels()[ssp.ManagedByLabel], "%T %s", obj, obj.GetName())
	}
	wh := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: ssp.ValidatorName}, wh))
	leaf := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ssp.ValidatorSecret}, leaf))
	require.NotEmpty(t, leaf.Data[ssp.CABundleKey], "the operator made the validator's certificate")
	assert.Equal(t, leaf.Data[ssp.CABundleKey], wh.Webhooks[0].ClientConfig.CABundle, "the webhooks trust its bundle")
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ssp.ValidatorCASecret}, &corev1.Secret{}))

	// The KubeVirt CR's strategy sets the lifetimes: shortened, the
	// validator's certificate is remade at once and the webhooks follow
	// the bundle, which keeps the previous CA.
	kv := &kvv1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubevirt"}, Spec: kvv1.KubeVirtSpec{
		CertificateRotateStrategy: kvv1.KubeVirtCertificateRotateStrategy{SelfSigned: &kvv1.KubeVirtSelfSignConfiguration{
			CA:     &kvv1.CertConfig{Duration: &metav1.Duration{Duration: 10 * time.Minute}},
			Server: &kvv1.CertConfig{Duration: &metav1.Duration{Duration: 5 * time.Minute}}}}}}
	require.NoError(t, k8s.Create(ctx, kv))
	apiserver.WaitFor(t, "the validator's certificate remade for 5 minutes, the webhooks trusting both CAs", func() (bool, string) {
		now := &corev1.Secret{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ssp.ValidatorSecret}, now))
		cert, _, err := certs.Parse(certs.KeyPair{Cert: now.Data["tls.crt"], Key: now.Data["tls.key"]})
		require.NoError(t, err)
		roots, err := certs.ParseBundle(now.Data[ssp.CABundleKey])
		require.NoError(t, err)
		cur := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: ssp.ValidatorName}, cur))
		left := time.Until(cert.NotAfter)
		return left <= 5*time.Minute && len(roots) == 2 && bytes.Equal(cur.Webhooks[0].ClientConfig.CABundle, now.Data[ssp.CABundleKey]),
			fmt.Sprintf("leaf valid %v more, %d CAs in the bundle", left.Round(time.Second), len(roots))
	})
	require.NoError(t, k8s.Delete(ctx, kv))

	// The validator becomes available (played by the test): Deployed.
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
	require.NoError(t, k8s.Status().Update(ctx, dep))
	cr = waitCond(cr.Name, ns, sspv1beta3.ConditionAvailable, "True/Available: all SSP resources are available")
	assert.Equal(t, sspv1beta3.PhaseDeployed, cr.Status.Phase)
	assert.Equal(t, "envtest", cr.Status.ObservedVersion)

	t.Run("drift is reverted", func(t *testing.T) {
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "u1.small"}, &v1beta1.VirtualMachineClusterInstancetype{}))
		require.NoError(t, k8s.Patch(ctx, &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: "u1.small"}},
			client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"memory":{"guest":"3Gi"}}}`)), client.FieldOwner("someone")))
		// (Deleting a common template would ask the validator, which
		// nothing serves here.)
		require.NoError(t, k8s.Patch(ctx, &templatev1.Template{ObjectMeta: metav1.ObjectMeta{Namespace: "openshift", Name: "fedora-server-tiny"}},
			client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"template.kubevirt.io/type":"mine"}}}`)), client.FieldOwner("someone")))
		require.NoError(t, k8s.Delete(ctx, &v1beta1.VirtualMachineClusterPreference{ObjectMeta: metav1.ObjectMeta{Name: "fedora"}}))
		require.NoError(t, k8s.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: ssp.ValidatorName}}))
		apiserver.WaitFor(t, "u1.small, the template, the preference and the webhooks back", func() (bool, string) {
			it := &v1beta1.VirtualMachineClusterInstancetype{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "u1.small"}, it))
			tm := &templatev1.Template{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "openshift", Name: "fedora-server-tiny"}, tm))
			perr := k8s.Get(ctx, client.ObjectKey{Name: "fedora"}, &v1beta1.VirtualMachineClusterPreference{})
			werr := k8s.Get(ctx, client.ObjectKey{Name: ssp.ValidatorName}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
			mem, typ := it.Spec.Memory.Guest, tm.Labels[ssp.TemplateTypeLabel]
			return mem.Equal(resource.MustParse("2Gi")) && typ == "base" && perr == nil && werr == nil,
				fmt.Sprintf("memory %s, template type %s, preference: %v, webhooks: %v", mem.String(), typ, perr, werr)
		})
	})

	t.Run("replicas", func(t *testing.T) {
		patch(cr.Name, ns, `{"spec":{"templateValidator":{"replicas":1}}}`)
		apiserver.WaitFor(t, "one replica", func() (bool, string) {
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ssp.ValidatorName}, dep))
			return *dep.Spec.Replicas == 1, fmt.Sprint(*dep.Spec.Replicas)
		})
	})

	t.Run("refused fields", func(t *testing.T) {
		patch(cr.Name, ns, `{"spec":{"tlsSecurityProfile":{"type":"Old"},"commonTemplates":{"somethingNew":true}}}`)
		waitCond(cr.Name, ns, sspv1beta3.ConditionDegraded,
			"True/Degraded: not supported by kubevmm: spec.commonTemplates.somethingNew, spec.tlsSecurityProfile")
		patch(cr.Name, ns, `{"spec":{"tlsSecurityProfile":null,"commonTemplates":{"somethingNew":null}}}`)
		waitCond(cr.Name, ns, sspv1beta3.ConditionDegraded, "False/Degraded")
	})

	t.Run("golden images", func(t *testing.T) {
		patch(cr.Name, ns, `{"spec":{"commonTemplates":{"dataImportCronTemplates":[{"metadata":{"name":"fedora-image-cron"},`+
			`"spec":{"schedule":"0 */12 * * *","managedDataSource":"fedora","template":{"spec":{"source":{"registry":{"url":"docker://10.200.0.1:5000/fedora:latest"}},`+
			`"storage":{"resources":{"requests":{"storage":"1Gi"}}}}}}}]}}}`)
		key := client.ObjectKey{Namespace: sspv1beta3.GoldenImagesNamespace, Name: "fedora-image-cron"}
		dic := &cdiv1.DataImportCron{}
		apiserver.WaitFor(t, "the DataImportCron in kubevirt-os-images", func() (bool, string) {
			err := k8s.Get(ctx, key, dic)
			return err == nil, fmt.Sprint(err)
		})
		assert.Equal(t, ssp.ManagedBy, dic.Labels[ssp.ManagedByLabel])
		assert.Equal(t, "fedora", dic.Spec.ManagedDataSource)
		require.NoError(t, k8s.Patch(ctx, dic, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"schedule":"* * * * *"}}`)),
			client.FieldOwner("someone")))
		apiserver.WaitFor(t, "the schedule reverted", func() (bool, string) {
			require.NoError(t, k8s.Get(ctx, key, dic))
			return dic.Spec.Schedule == "0 */12 * * *", dic.Spec.Schedule
		})
		patch(cr.Name, ns, `{"spec":{"commonTemplates":{"dataImportCronTemplates":null}}}`)
		apiserver.WaitFor(t, "the DataImportCron removed with its template", func() (bool, string) {
			err := k8s.Get(ctx, key, dic)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})

	t.Run("a second SSP is refused", func(t *testing.T) {
		second := &sspv1beta3.SSP{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "second"},
			Spec: sspv1beta3.SSPSpec{CommonTemplates: sspv1beta3.CommonTemplates{Namespace: "other"}}}
		require.NoError(t, k8s.Create(ctx, second))
		second = waitCond("second", ns, sspv1beta3.ConditionDegraded,
			"True/Degraded: there is one SSP per cluster and kubevirt/ssp-kubevirt-hyperconverged is the cluster's: this one is ignored")
		assert.Empty(t, second.Finalizers)
		l := &templatev1.TemplateList{}
		require.NoError(t, k8s.List(ctx, l, client.InNamespace("other")))
		assert.Empty(t, l.Items, "nothing deployed for it")
		require.NoError(t, k8s.Delete(ctx, second))
	})
	t.Run("an SSP outside the operator's namespace is refused", func(t *testing.T) {
		// The operator may write Secrets (the validator's certificates)
		// in its own namespace only.
		elsewhere := &sspv1beta3.SSP{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "elsewhere"},
			Spec: sspv1beta3.SSPSpec{CommonTemplates: sspv1beta3.CommonTemplates{Namespace: "other"}}}
		require.NoError(t, k8s.Create(ctx, elsewhere))
		elsewhere = waitCond("elsewhere", "other", sspv1beta3.ConditionDegraded,
			"True/Degraded: the SSP must be in the operator's namespace, kubevirt: this one is ignored")
		assert.Empty(t, elsewhere.Finalizers)
		l := &templatev1.TemplateList{}
		require.NoError(t, k8s.List(ctx, l, client.InNamespace("other")))
		assert.Empty(t, l.Items, "nothing deployed for it")
		secrets := &corev1.SecretList{}
		require.NoError(t, k8s.List(ctx, secrets, client.InNamespace("other")))
		assert.Empty(t, secrets.Items, "no certificate made for it")
		require.NoError(t, k8s.Delete(ctx, elsewhere))
	})

	t.Run("paused", func(t *testing.T) {
		patch(cr.Name, ns, `{"metadata":{"annotations":{"kubevirt.io/operator.paused":"true"}}}`)
		apiserver.WaitFor(t, "status.paused", func() (bool, string) {
			cr = get(cr.Name, ns)
			return cr.Status.Paused, fmt.Sprint(cr.Status)
		})
		require.NoError(t, k8s.Patch(ctx, &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: "u1.small"}},
			client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"memory":{"guest":"3Gi"}}}`)), client.FieldOwner("someone")))
		// The edit (watched) and a change of the SSP both reconcile; an
		// operator that did not pause would revert the edit then.
		patch(cr.Name, ns, `{"spec":{"templateValidator":{"replicas":2}}}`)
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ssp.ValidatorName}, dep))
		assert.Equal(t, int32(1), *dep.Spec.Replicas, "the spec is not applied while paused")
		it := &v1beta1.VirtualMachineClusterInstancetype{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "u1.small"}, it))
		assert.Equal(t, "3Gi", it.Spec.Memory.Guest.String(), "the edit stays while paused")
		patch(cr.Name, ns, `{"metadata":{"annotations":{"kubevirt.io/operator.paused":null}}}`)
		apiserver.WaitFor(t, "u1.small reverted once unpaused", func() (bool, string) {
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "u1.small"}, it))
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: ssp.ValidatorName}, dep))
			return it.Spec.Memory.Guest.String() == "2Gi" && *dep.Spec.Replicas == 2 && !get(cr.Name, ns).Status.Paused,
				fmt.Sprint(it.Spec.Memory.Guest.String(), " replicas ", *dep.Spec.Replicas)
		})
	})

	t.Run("TektonTasks is a deprecated no-op", func(t *testing.T) {
		tt := &tektonv1alpha1.TektonTasks{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tto"},
			Spec: runtime.RawExtension{Raw: []byte(`{"featureGates":{"deployTektonTaskResources":true},"pipelines":{"namespace":"p"}}`)}}
		require.NoError(t, k8s.Create(ctx, tt))
		apiserver.WaitFor(t, "Deprecated", func() (bool, string) {
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(tt), tt))
			c := conditions.Find(tt.Status.Conditions, tektonv1alpha1.ConditionDeprecated)
			return c != nil && c.Status == corev1.ConditionTrue && c.Message == ssp.DeprecatedMessage, fmt.Sprint(tt.Status)
		})
		assert.JSONEq(t, `{"featureGates":{"deployTektonTaskResources":true},"pipelines":{"namespace":"p"}}`, string(tt.Spec.Raw), "the spec is kept")
	})

	t.Run("deletion", func(t *testing.T) {
		require.NoError(t, k8s.Delete(ctx, get(cr.Name, ns)))
		apiserver.WaitFor(t, "the SSP gone", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: cr.Name}, &sspv1beta3.SSP{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		for _, l := range []client.ObjectList{&templatev1.TemplateList{}, &v1beta1.VirtualMachineClusterInstancetypeList{},
			&v1beta1.VirtualMachineClusterPreferenceList{}, &rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{},
			&admissionregistrationv1.ValidatingWebhookConfigurationList{}} {
			require.NoError(t, k8s.List(ctx, l, client.MatchingLabels{ssp.ManagedByLabel: ssp.ManagedBy}))
			assert.Zero(t, apimeta.LenList(l), "%T left behind", l)
		}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "templates.template.openshift.io"}, &apiextensionsv1.CustomResourceDefinition{}),
			"the Template CRD stays")
		// The validator's namespaced objects are the garbage collector's
		// (owner references); envtest runs none, so they are only checked
		// to be owned, above.
	})
}
