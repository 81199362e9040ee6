package hco_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	kvv1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/api/hco/crd"
	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	"github.com/kubevmm/kubevmm/operator/hco"
	"github.com/kubevmm/kubevmm/operator/hco/install"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

const ns = "kubevirt"

func cond(hc *hcov1.HyperConverged, t string) string {
	if c := apimeta.FindStatusCondition(hc.Status.Conditions, t); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return "none"
}

// The operator and its webhook against a real API server, which converts
// v1beta1 through the webhook and admits through it. The test plays
// virt-operator (it reports the KubeVirt CR's conditions) and installs an
// operand CRD itself.
func TestHyperConvergedEnvtest(t *testing.T) {
	objs, err := install.Objects(install.Config{Namespace: ns, ImageRegistry: "localhost/kubevmm", ImageTag: "envtest", ManagedBy: "test"})
	require.NoError(t, err)
	var env *envtest.Environment
	cfg, k8s := apiserver.Start(t, func(e *envtest.Environment) {
		env = e
		for _, o := range objs {
			if vwc, ok := o.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
				e.WebhookInstallOptions.ValidatingWebhooks = append(e.WebhookInstallOptions.ValidatingWebhooks, vwc)
			}
		}
	})
	ctx := context.Background()
	require.NoError(t, apiextensionsv1.AddToScheme(k8s.Scheme()))
	require.NoError(t, hcov1.AddToScheme(k8s.Scheme()))
	wo := env.WebhookInstallOptions
	// The CRD converts through the webhook served below.
	hcoCRD, err := crd.CRD(&crd.WebhookConversion{Namespace: ns, Name: install.WebhookService, Port: install.WebhookPort, CABundle: wo.LocalServingCAData})
	require.NoError(t, err)
	url := "https://" + net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort)) + hco.ConvertPath
	hcoCRD.Spec.Conversion.Webhook.ClientConfig.Service, hcoCRD.Spec.Conversion.Webhook.ClientConfig.URL = nil, &url
	require.NoError(t, k8s.Create(ctx, hcoCRD))
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	// A workload (virt-api's webhooks are not served here).
	g := resource.MustParse("64Mi")
	vm := &kvv1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm"}, Spec: kvv1.VirtualMachineSpec{
		RunStrategy: ptr.To(kvv1.RunStrategyHalted),
		Template:    &kvv1.VirtualMachineInstanceTemplateSpec{Spec: kvv1.VirtualMachineInstanceSpec{Domain: kvv1.DomainSpec{Memory: &kvv1.Memory{Guest: &g}}}},
	}}
	require.NoError(t, k8s.Create(ctx, vm))

	// The operator runs as its service account, with its RBAC.
	for _, o := range objs {
		switch o.GetObjectKind().GroupVersionKind().Kind {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			require.NoError(t, k8s.Create(ctx, o))
		}
	}
	opCfg := apiserver.AsServiceAccount(cfg, ns, install.OperatorName)
	mgr := apiserver.NewManager(t, opCfg, ctrl.Options{Scheme: k8s.Scheme(),
		WebhookServer: webhook.NewServer(webhook.Options{Host: wo.LocalServingHost, Port: wo.LocalServingPort, CertDir: wo.LocalServingCertDir,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.ClientAuth = tls.RequestClientCert }}})})
	r := &hco.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Namespace: ns, Version: "envtest"}
	require.NoError(t, r.SetupWithManager(mgr))
	// Who the API server is, read with the operator's own RBAC.
	callers, err := frontproxy.Load(ctx, mgr.GetAPIReader())
	require.NoError(t, err)
	hco.RegisterWebhooks(mgr.GetWebhookServer(), mgr.GetAPIReader(), ns, callers)
	apiserver.Run(t, mgr)

	// Created as v1beta1 (the API server converts it to v1 to store it).
	b1 := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "hco.kubevirt.io/v1beta1", "kind": "HyperConverged",
		"metadata": map[string]any{"name": hcov1.Name, "namespace": ns},
		"spec": map[string]any{"liveMigrationConfig": map[string]any{"parallelMigrationsPerCluster": int64(3)},
			"certConfig": map[string]any{"ca": map[string]any{"duration": "48h0m0s", "renewBefore": "24h0m0s"}}}}}
	apiserver.WaitFor(t, "the webhook to serve", func() (bool, string) {
		err := k8s.Create(ctx, b1.DeepCopy())
		return err == nil, fmt.Sprint(err)
	})
	hc := &hcov1.HyperConverged{}
	get := func() *hcov1.HyperConverged {
		hc = &hcov1.HyperConverged{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: hcov1.Name}, hc))
		return hc
	}
	assert.Equal(t, ptr.To[uint32](3), get().Spec.Virtualization.LiveMigrationConfig.ParallelMigrationsPerCluster, "read as v1")
	back := &unstructured.Unstructured{}
	back.SetGroupVersionKind(schema.GroupVersionKind{Group: hcov1.GroupName, Version: "v1beta1", Kind: "HyperConverged"})
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: hcov1.Name}, back))
	p, _, _ := unstructured.NestedInt64(back.Object, "spec", "liveMigrationConfig", "parallelMigrationsPerCluster")
	assert.Equal(t, int64(3), p, "read back as v1beta1")

	// The KubeVirt CR is made from it.
	kv := &unstructured.Unstructured{}
	kv.SetGroupVersionKind(kvv1.KubeVirtGroupVersionKind)
	kvKey := client.ObjectKey{Namespace: ns, Name: "kubevirt-kubevirt-hyperconverged"}
	migrations := func() int64 {
		require.NoError(t, k8s.Get(ctx, kvKey, kv))
		v, _, _ := unstructured.NestedInt64(kv.Object, "spec", "configuration", "migrations", "parallelMigrationsPerCluster")
		return v
	}
	apiserver.WaitFor(t, "the KubeVirt CR", func() (bool, string) {
		err := k8s.Get(ctx, kvKey, kv)
		return err == nil, fmt.Sprint(err)
	})
	assert.Equal(t, int64(3), migrations())
	s, _, _ := unstructured.NestedString(kv.Object, "spec", "uninstallStrategy")
	assert.Equal(t, "BlockUninstallIfWorkloadsExist", s, "upstream's default")
	assert.Equal(t, hcov1.Name, kv.GetOwnerReferences()[0].Name)
	apiserver.WaitFor(t, "Progressing while KubeVirt reports nothing", func() (bool, string) {
		get()
		return cond(hc, hcov1.ConditionProgressing) == "True/KubeVirtProgressing", fmt.Sprint(hc.Status.Conditions)
	})
	assert.Contains(t, hc.Finalizers, hco.Finalizer)
	assert.Equal(t, "False/KubeVirtNotAvailable", cond(hc, hcov1.ConditionAvailable))
	assert.Equal(t, []corev1.ObjectReference{{APIVersion: "kubevirt.io/v1", Kind: "KubeVirt", Namespace: ns, Name: kvKey.Name}}, hc.Status.RelatedObjects)

	// virt-operator reports the installation available.
	kvStatus := map[string]any{"conditions": []any{
		map[string]any{"type": "Available", "status": "True", "reason": "AllComponentsReady", "lastTransitionTime": "2026-01-01T00:00:00Z"},
		map[string]any{"type": "Progressing", "status": "False", "reason": "AllComponentsReady", "lastTransitionTime": "2026-01-01T00:00:00Z"},
		map[string]any{"type": "Degraded", "status": "False", "reason": "AllComponentsReady", "lastTransitionTime": "2026-01-01T00:00:00Z"}}}
	require.NoError(t, unstructured.SetNestedField(kv.Object, kvStatus, "status"))
	require.NoError(t, k8s.Status().Update(ctx, kv))
	apiserver.WaitFor(t, "Available", func() (bool, string) {
		get()
		return cond(hc, hcov1.ConditionAvailable) == "True/ReconcileCompleted", fmt.Sprint(hc.Status.Conditions)
	})
	assert.Equal(t, "healthy", hc.Status.SystemHealthStatus)
	assert.Equal(t, "True/ReconcileCompleted", cond(hc, hcov1.ConditionReconcileComplete))
	assert.Equal(t, "True/ReconcileCompleted", cond(hc, hcov1.ConditionUpgradeable))
	assert.Equal(t, []hcov1.Version{{Name: "operator", Version: "envtest"}}, hc.Status.Versions)
	assert.Equal(t, hc.Generation, hc.Status.ObservedGeneration)

	// Drift: a field the HCO sets is put back, a field added is removed;
	// both are counted.
	counter := func() float64 {
		return testutil.ToFloat64(hco.OutOfBandModifications.WithLabelValues("kubevirt/kubevirt-kubevirt-hyperconverged"))
	}
	before := counter()
	require.NoError(t, k8s.Patch(ctx, kv.DeepCopy(), client.RawPatch("application/merge-patch+json",
		[]byte(`{"spec":{"configuration":{"migrations":{"parallelMigrationsPerCluster":9}}}}`))))
	apiserver.WaitFor(t, "the edit reverted", func() (bool, string) { v := migrations(); return v == 3, fmt.Sprint(v) })
	require.NoError(t, k8s.Patch(ctx, kv.DeepCopy(), client.RawPatch("application/merge-patch+json",
		[]byte(`{"spec":{"configuration":{"developerConfiguration":{"featureGates":["X"]}}}}`))))
	apiserver.WaitFor(t, "the added field removed", func() (bool, string) {
		require.NoError(t, k8s.Get(ctx, kvKey, kv))
		_, found, _ := unstructured.NestedFieldNoCopy(kv.Object, "spec", "configuration", "developerConfiguration")
		mf, _ := json.Marshal(kv.GetManagedFields())
		return !found, fmt.Sprint(kv.Object["spec"], string(mf))
	})
	apiserver.WaitFor(t, "the metric", func() (bool, string) { v := counter(); return v >= before+2, fmt.Sprint(v) })

	// The escape hatch: a JSON patch annotation sticks, and taints.
	patch := `[{"op":"add","path":"/spec/configuration/developerConfiguration","value":{"featureGates":["SameNodeLiveMigration"]}}]`
	annotate := func(v string) error {
		b := fmt.Sprintf(`{"metadata":{"annotations":{"kubevirt.kubevirt.io/jsonpatch":%s}}}`, v)
		return k8s.Patch(ctx, get(), client.RawPatch("application/merge-patch+json", []byte(b)))
	}
	require.NoError(t, annotate(strconv.Quote(patch)))
	apiserver.WaitFor(t, "the patched feature gate", func() (bool, string) {
		require.NoError(t, k8s.Get(ctx, kvKey, kv))
		gates, _, _ := unstructured.NestedStringSlice(kv.Object, "spec", "configuration", "developerConfiguration", "featureGates")
		get()
		return len(gates) == 1 && gates[0] == "SameNodeLiveMigration" && cond(hc, hcov1.ConditionTaintedConfiguration) == "True/UnsupportedFeatureAnnotation",
			fmt.Sprint(gates, hc.Status.Conditions)
	})
	// A patch that does not apply is refused at admission, naming it.
	err = annotate(strconv.Quote(`[{"op":"replace","path":"/spec/nothing/here","value":1}]`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "annotation kubevirt.kubevirt.io/jsonpatch")
	require.NoError(t, annotate("null"))
	apiserver.WaitFor(t, "untainted", func() (bool, string) {
		get()
		return cond(hc, hcov1.ConditionTaintedConfiguration) == "none", fmt.Sprint(hc.Status.Conditions)
	})

	// Refused at admission: a bad certConfig (naming the field), an
	// unknown field, another name.
	err = k8s.Patch(ctx, get(), client.RawPatch("application/merge-patch+json",
		[]byte(`{"spec":{"security":{"certConfig":{"server":{"duration":"1h","renewBefore":"2h"}}}}}`)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.security.certConfig.server.renewBefore 2h0m0s: must be positive and less than server.duration (1h0m0s)")
	err = k8s.Patch(ctx, get(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"virtualization":{"evictionStrategy":"LiveMigrate"}}}`)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not supported by kubevmm: spec.virtualization.evictionStrategy")
	b1v := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "hco.kubevirt.io/v1beta1", "kind": "HyperConverged",
		"metadata": map[string]any{"name": hcov1.Name, "namespace": ns, "resourceVersion": get().ResourceVersion},
		"spec":     map[string]any{"certConfig": map[string]any{"ca": map[string]any{"duration": "1h", "renewBefore": "2h"}}}}}
	err = k8s.Update(ctx, b1v)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.certConfig.ca.renewBefore", "named as written, in v1beta1")
	err = k8s.Create(ctx, &hcov1.HyperConverged{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "second"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a HyperConverged must be named kubevirt-hyperconverged in namespace kubevirt")

	// An operand's operator is installed later: its CR is made then.
	sspCRD := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "ssps.ssp.kubevirt.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "ssp.kubevirt.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "ssps", Singular: "ssp", Kind: "SSP", ListKind: "SSPList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1beta3", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
					XPreserveUnknownFields: ptr.To(true)}}}}}}
	require.NoError(t, k8s.Create(ctx, sspCRD))
	ssp := &unstructured.Unstructured{}
	ssp.SetGroupVersionKind(schema.GroupVersionKind{Group: "ssp.kubevirt.io", Version: "v1beta3", Kind: "SSP"})
	apiserver.WaitFor(t, "the SSP CR", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ssp-kubevirt-hyperconverged"}, ssp)
		return err == nil, fmt.Sprint(err)
	})
	tns, _, _ := unstructured.NestedString(ssp.Object, "spec", "commonTemplates", "namespace")
	assert.Equal(t, "openshift", tns)
	apiserver.WaitFor(t, "waiting for SSP", func() (bool, string) {
		get()
		return cond(hc, hcov1.ConditionAvailable) == "False/SSPNotAvailable" && len(hc.Status.RelatedObjects) == 2, fmt.Sprint(hc.Status)
	})

	// Golden images: the template, its name kept through the HCO's CRD,
	// reaches the SSP in the boot image namespace, which the HCO makes.
	require.NoError(t, k8s.Patch(ctx, get(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"workloadSources":{"dataImportCronTemplates":[`+
		`{"metadata":{"name":"fedora-image-cron"},"spec":{"schedule":"@daily","managedDataSource":"fedora","template":{"spec":{"source":{"registry":`+
		`{"url":"docker://10.200.0.1:5000/fedora:latest"}},"storage":{"resources":{"requests":{"storage":"1Gi"}}}}}}}]}}}`))))
	apiserver.WaitFor(t, "the golden image in the SSP and the status", func() (bool, string) {
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ssp-kubevirt-hyperconverged"}, ssp))
		tmpls, _, _ := unstructured.NestedSlice(ssp.Object, "spec", "commonTemplates", "dataImportCronTemplates")
		nsErr := k8s.Get(ctx, client.ObjectKey{Name: hcov1.DefaultCommonBootImageNamespace}, &corev1.Namespace{})
		st := get().Status.DataImportCronTemplates
		if len(tmpls) != 1 || nsErr != nil || len(st) != 1 {
			return false, fmt.Sprint(tmpls, nsErr, st)
		}
		md, _ := tmpls[0].(map[string]any)["metadata"].(map[string]any)
		return md["name"] == "fedora-image-cron" && md["namespace"] == hcov1.DefaultCommonBootImageNamespace && st[0].Name == "fedora-image-cron",
			fmt.Sprint(md, st)
	})
	err = k8s.Patch(ctx, get(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"workloadSources":{"dataImportCronTemplates":[`+
		`{"spec":{"schedule":"@daily","managedDataSource":"fedora","template":{"spec":{"source":{"registry":`+
		`{"url":"docker://10.200.0.1:5000/fedora:latest"}},"storage":{"resources":{"requests":{"storage":"1Gi"}}}}}}}]}}}`)))
	require.Error(t, err, "a template without a name")
	assert.Contains(t, err.Error(), "metadata.name")

	// Uninstall: refused while a VM exists (BlockUninstallIfWorkloadsExist).
	err = k8s.Delete(ctx, get())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 VirtualMachines and 0 VirtualMachineInstances exist")
	require.NoError(t, k8s.Delete(ctx, vm))
	apiserver.WaitFor(t, "the VM gone", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(vm), &kvv1.VirtualMachine{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// virt-operator's finalizer on the KubeVirt CR: the HCO waits for it.
	require.NoError(t, k8s.Patch(ctx, kv.DeepCopy(), client.RawPatch("application/merge-patch+json",
		[]byte(`{"metadata":{"finalizers":["kubevirt.io/foregroundDeleteKubeVirt"]}}`))))
	require.NoError(t, k8s.Delete(ctx, get()))
	apiserver.WaitFor(t, "the KubeVirt CR deleting, the HCO waiting", func() (bool, string) {
		require.NoError(t, k8s.Get(ctx, kvKey, kv))
		c := apimeta.FindStatusCondition(get().Status.Conditions, hcov1.ConditionProgressing)
		return kv.GetDeletionTimestamp() != nil && c != nil && c.Reason == hco.ReasonDeleting &&
			c.Message == "waiting for the operators to remove KubeVirt kubevirt-kubevirt-hyperconverged", fmt.Sprint(hc.Status.Conditions)
	})
	assert.Contains(t, hc.Finalizers, hco.Finalizer)
	require.NoError(t, k8s.Patch(ctx, kv.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))))
	// Nothing it made is left, and the CR is gone.
	apiserver.WaitFor(t, "everything removed", func() (bool, string) {
		e1 := k8s.Get(ctx, kvKey, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt"}})
		e2 := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ssp-kubevirt-hyperconverged"}, ssp)
		e3 := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: hcov1.Name}, &hcov1.HyperConverged{})
		return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) && apierrors.IsNotFound(e3), fmt.Sprint(e1, e2, e3)
	})
}
