package virt_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/certs"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/operator/virt"
	"github.com/kubevmm/kubevmm/operator/virt/install"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

const ns = "kubevirt"

func condition(kv *v1.KubeVirt, t v1.KubeVirtConditionType) string {
	if c := kv.GetCondition(t); c != nil {
		return string(c.Status) + "/" + c.Reason + ": " + c.Message
	}
	return "none"
}

// The operator against a real API server (no kubelet: the test reports
// the components available itself): a KubeVirt CR deploys everything,
// edits and deletions of deployed objects are reverted, patches apply, a
// second CR is ignored, and deleting the CR waits for workloads under
// BlockUninstallIfWorkloadsExist, then removes them and everything it
// deployed, CRDs last.
func TestKubeVirtEnvtest(t *testing.T) {
	cfg, k8s := apiserver.Start(t)
	ctx := context.Background()
	// (The test reads CRDs; the operator applies them unstructured.)
	require.NoError(t, apiextensionsv1.AddToScheme(k8s.Scheme()))
	for _, n := range []string{ns, "other"} {
		require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}))
	}
	// A workload from before the installation (once installed, creating
	// one would need virt-api's webhooks, which nothing serves here).
	g := resource.MustParse("64Mi")
	require.NoError(t, k8s.Create(ctx, &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vm"}, Spec: v1.VirtualMachineSpec{
		RunStrategy: ptr.To(v1.RunStrategyHalted),
		Template:    &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &g}}}},
	}}))

	// The operator runs as its service account, with the RBAC it is
	// deployed with: it must be able to grant what it deploys.
	ops, err := install.Operator(install.Config{Namespace: ns, ImageRegistry: "localhost/kubevmm", ImageTag: "envtest", ManagedBy: "test"})
	require.NoError(t, err)
	for _, o := range ops {
		if o.GetObjectKind().GroupVersionKind().Kind != "CustomResourceDefinition" { // apiserver.Start installed it
			require.NoError(t, k8s.Create(ctx, o))
		}
	}
	opCfg := apiserver.AsServiceAccount(cfg, ns, "kubevirt-operator")
	mgr := apiserver.NewManager(t, opCfg, ctrl.Options{Scheme: k8s.Scheme(), Cache: kit.OwnNamespaceCache(ns)})
	// No kubelet mounts the Secrets here: a new CA signs leaves at once
	// (SecretPropagation 0; the wait is TestPlanCertificatesLeavesWaitForANewCA's).
	r := &virt.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: virt.Options{Namespace: ns,
		ImageRegistry: "localhost/kubevmm", ImageTag: "envtest", PullPolicy: corev1.PullNever, PluginDir: "/var/lib/kubelet/device-plugins", KubeletRoot: "/var/lib/kubelet"}}
	require.NoError(t, r.SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	kv := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubevirt"}, Spec: v1.KubeVirtSpec{
		UninstallStrategy: v1.KubeVirtUninstallBlockUninstallIfWorkloadsExist,
		Configuration:     v1.KubeVirtConfiguration{DeveloperConfiguration: &v1.DeveloperConfiguration{FeatureGates: []string{"SameNodeLiveMigration"}}},
	}}
	require.NoError(t, k8s.Create(ctx, kv))
	getKV := func(name, namespace string) *v1.KubeVirt {
		out := &v1.KubeVirt{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, out))
		return out
	}
	// updateKV writes the CR's spec as a merge patch (of the fields set):
	// the operator writes its status meanwhile.
	updateKV := func(kv *v1.KubeVirt) {
		orig := kv.DeepCopy()
		orig.Spec = v1.KubeVirtSpec{}
		require.NoError(t, k8s.Patch(ctx, kv, client.MergeFrom(orig)))
	}

	// Deploying: every object is there, labelled and annotated.
	apiserver.WaitFor(t, "phase Deploying", func() (bool, string) {
		kv = getKV("kubevirt", ns)
		return kv.Status.Phase == v1.KubeVirtPhaseDeploying && kv.GetCondition(v1.KubeVirtConditionCreated) != nil,
			fmt.Sprintf("%q %v", kv.Status.Phase, kv.Status.Conditions)
	})
	assert.Contains(t, kv.Finalizers, v1.KubeVirtFinalizer)
	assert.Equal(t, "envtest", kv.Status.TargetKubeVirtVersion)
	assert.Equal(t, "False/DeploymentInProgress: deploying version envtest", condition(kv, v1.KubeVirtConditionAvailable))
	api := &appsv1.Deployment{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-api"}, api))
	assert.Equal(t, "localhost/kubevmm/virt-api:envtest", api.Spec.Template.Spec.Containers[0].Image)
	assert.Equal(t, virt.ManagedBy, api.Labels[install.ManagedByLabel])
	assert.Equal(t, "envtest", api.Annotations[virt.AnnotationVersion])
	cm := &corev1.ConfigMap{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: install.ConfigMapName}, cm))
	assert.Contains(t, cm.Data["config.yaml"], "SameNodeLiveMigration", "spec.configuration reaches virt-controller")
	for _, obj := range []client.Object{&rbacv1.ClusterRole{}, &admissionregistrationv1.ValidatingWebhookConfiguration{}, &apiextensionsv1.CustomResourceDefinition{}} {
		name := map[string]string{"*v1.ClusterRole": "kubevirt.io:view", "*v1.ValidatingWebhookConfiguration": install.ValidatingWebhooks,
			"*v1.CustomResourceDefinition": "virtualmachines.kubevirt.io"}[fmt.Sprintf("%T", obj)]
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: name}, obj), name)
		assert.Equal(t, virt.ManagedBy, obj.GetLabels()[install.ManagedByLabel], "cluster-scoped %s is labelled", name)
	}
	apiSvc := &unstructured.Unstructured{}
	apiSvc.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"})
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.APIServiceName}, apiSvc))

	// The components become available (played by the test): Deployed.
	for _, name := range []string{"virt-api", "virt-controller"} {
		d := &appsv1.Deployment{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d))
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		require.NoError(t, k8s.Status().Update(ctx, d))
	}
	ds := &appsv1.DaemonSet{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-handler"}, ds))
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1}
	require.NoError(t, k8s.Status().Update(ctx, ds))
	apiserver.WaitFor(t, "phase Deployed", func() (bool, string) {
		kv = getKV("kubevirt", ns)
		return kv.Status.Phase == v1.KubeVirtPhaseDeployed, fmt.Sprintf("%q %v", kv.Status.Phase, kv.Status.Conditions)
	})
	assert.Equal(t, "True/AllComponentsReady: all components are ready", condition(kv, v1.KubeVirtConditionAvailable))
	assert.Equal(t, "envtest", kv.Status.ObservedKubeVirtVersion)
	assert.Equal(t, kv.Generation, *kv.Status.ObservedGeneration)

	t.Run("drift is reverted", func(t *testing.T) {
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-api"}, api))
		api.Spec.Template.Spec.Containers[0].Image = "elsewhere/virt-api:other"
		require.NoError(t, k8s.Update(ctx, api, client.FieldOwner("someone")))
		require.NoError(t, k8s.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: install.ValidatingWebhooks}}))
		apiserver.WaitFor(t, "virt-api's image and the webhooks back", func() (bool, string) {
			d := &appsv1.Deployment{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-api"}, d))
			err := k8s.Get(ctx, client.ObjectKey{Name: install.ValidatingWebhooks}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
			return d.Spec.Template.Spec.Containers[0].Image == "localhost/kubevmm/virt-api:envtest" && err == nil,
				fmt.Sprintf("image %s, webhooks: %v", d.Spec.Template.Spec.Containers[0].Image, err)
		})
	})

	t.Run("customizeComponents", func(t *testing.T) {
		kv = getKV("kubevirt", ns)
		kv.Spec.CustomizeComponents.Patches = []v1.CustomizeComponentsPatch{
			{ResourceType: "Deployment", ResourceName: "virt-api", Type: v1.StrategicMergePatchType,
				Patch: `{"spec":{"template":{"spec":{"containers":[{"name":"virt-api","resources":{"requests":{"memory":"64Mi"}}}]}}}}`},
			{ResourceType: "Deployment", ResourceName: "virt-controller", Type: v1.MergePatchType, Patch: `{"metadata":{"annotations":{"example.com/patched":"yes"}}}`},
			{ResourceType: "Service", ResourceName: "virt-api", Type: v1.JSONPatchType, Patch: `[{"op":"add","path":"/metadata/labels/example.com~1patched","value":"json"}]`},
		}
		updateKV(kv)
		apiserver.WaitFor(t, "the patched objects", func() (bool, string) {
			a, c, s := &appsv1.Deployment{}, &appsv1.Deployment{}, &corev1.Service{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-api"}, a))
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-controller"}, c))
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-api"}, s))
			mem := a.Spec.Template.Spec.Containers[0].Resources.Requests.Memory().String()
			return mem == "64Mi" && a.Spec.Template.Spec.Containers[0].Image == "localhost/kubevmm/virt-api:envtest" &&
					c.Annotations["example.com/patched"] == "yes" && s.Labels["example.com/patched"] == "json",
				fmt.Sprintf("memory %s, annotations %v, labels %v", mem, c.Annotations, s.Labels)
		})

		// A patch of nothing deployed is refused, naming it.
		kv = getKV("kubevirt", ns)
		kv.Spec.CustomizeComponents.Patches = append(kv.Spec.CustomizeComponents.Patches,
			v1.CustomizeComponentsPatch{ResourceType: "Deployment", ResourceName: "virt-nothing", Type: v1.MergePatchType, Patch: `{}`})
		updateKV(kv)
		apiserver.WaitFor(t, "Degraded", func() (bool, string) {
			kv = getKV("kubevirt", ns)
			c := condition(kv, v1.KubeVirtConditionDegraded)
			return strings.HasPrefix(c, "True/DeploymentFailed: spec.customizeComponents.patches[3]: no Deployment \"virt-nothing\""), c
		})
		kv.Spec.CustomizeComponents.Patches = kv.Spec.CustomizeComponents.Patches[:3]
		updateKV(kv)
		apiserver.WaitFor(t, "not Degraded", func() (bool, string) {
			kv = getKV("kubevirt", ns)
			c := condition(kv, v1.KubeVirtConditionDegraded)
			return strings.HasPrefix(c, "False/"), c
		})
	})

	t.Run("certificates", func(t *testing.T) {
		type certState struct {
			ca, bundle, api, handler []byte
			// What the components mount trusts, and the API server.
			apiCA, handlerCA, webhook, apiService string
		}
		// consistent: every copy of the bundle is the ConfigMap's (the
		// operator writes them one by one).
		consistent := func(st certState) bool {
			b := string(st.bundle)
			return st.apiCA == b && st.handlerCA == b && st.webhook == b && st.apiService == b
		}
		read := func() certState {
			var st certState
			sec := func(name string) *corev1.Secret {
				s := &corev1.Secret{}
				require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s))
				assert.Equal(t, virt.ManagedBy, s.Labels[install.ManagedByLabel], name)
				return s
			}
			st.ca = sec(virt.CASecret).Data["tls.crt"]
			cm := &corev1.ConfigMap{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: virt.CABundleConfigMap}, cm))
			st.bundle = []byte(cm.Data[virt.CABundleKey])
			api, handler := sec(install.SecretAPICerts), sec(install.SecretHandlerCerts)
			st.api, st.handler = api.Data["tls.crt"], handler.Data["tls.crt"]
			st.apiCA, st.handlerCA = string(api.Data["ca.crt"]), string(handler.Data["ca.crt"])
			wh := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.ValidatingWebhooks}, wh))
			st.webhook = string(wh.Webhooks[0].ClientConfig.CABundle)
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.APIServiceName}, apiSvc))
			b64, _, _ := unstructured.NestedString(apiSvc.Object, "spec", "caBundle")
			b, err := base64.StdEncoding.DecodeString(b64)
			require.NoError(t, err)
			st.apiService = string(b)
			return st
		}
		verifies := func(leaf, bundle []byte) error {
			c, err := certs.ParseBundle(leaf)
			require.NoError(t, err)
			pool := x509.NewCertPool()
			require.True(t, pool.AppendCertsFromPEM(bundle))
			_, err = c[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: "virt-api." + ns + ".svc"})
			return err
		}
		// Made by the operator: one CA, which signed virt-api's serving
		// certificate, and which the API server trusts it with.
		before := read()
		cas, err := certs.ParseBundle(before.bundle)
		require.NoError(t, err)
		require.Len(t, cas, 1)
		assert.Equal(t, string(before.ca), string(before.bundle))
		require.NoError(t, verifies(before.api, before.bundle))
		assert.True(t, consistent(before), "the leaves' ca.crt, the webhooks' and the APIService's caBundle are the bundle")

		// A shorter strategy: the 7-day CA and 1-day leaves outlive it, so
		// everything is remade; the bundle keeps the previous CA.
		kv = getKV("kubevirt", ns)
		kv.Spec.CertificateRotateStrategy.SelfSigned = &v1.KubeVirtSelfSignConfiguration{
			CA:     &v1.CertConfig{Duration: &metav1.Duration{Duration: time.Hour}},
			Server: &v1.CertConfig{Duration: &metav1.Duration{Duration: 10 * time.Minute}, RenewBefore: &metav1.Duration{Duration: 2 * time.Minute}},
		}
		updateKV(kv)
		var after certState
		apiserver.WaitFor(t, "rotated", func() (bool, string) {
			after = read()
			return string(after.ca) != string(before.ca) && string(after.api) != string(before.api) && string(after.handler) != string(before.handler) &&
				consistent(after), "not yet"
		})
		cas, err = certs.ParseBundle(after.bundle)
		require.NoError(t, err)
		require.Len(t, cas, 2, "the new CA and the previous one")
		assert.Equal(t, string(after.ca)+string(before.ca), string(after.bundle), "newest first")
		require.NoError(t, verifies(after.api, after.bundle), "the new leaf")
		require.NoError(t, verifies(before.api, after.bundle), "the previous leaf, during the overlap")
		require.Error(t, verifies(after.api, before.bundle), "the new leaf needs the new CA")
		leaf, err := certs.ParseBundle(after.api)
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now().Add(10*time.Minute), leaf[0].NotAfter, time.Minute, "the strategy's duration")

		// A strategy that cannot work is refused, naming the field; nothing
		// is remade.
		require.NoError(t, k8s.Patch(ctx, getKV("kubevirt", ns), client.RawPatch(types.MergePatchType,
			[]byte(`{"spec":{"certificateRotateStrategy":{"selfSigned":{"server":{"renewBefore":"10m"}}}}}`))))
		apiserver.WaitFor(t, "Degraded", func() (bool, string) {
			kv = getKV("kubevirt", ns)
			c := condition(kv, v1.KubeVirtConditionDegraded)
			return strings.HasPrefix(c, "True/DeploymentFailed: spec.certificateRotateStrategy.selfSigned.server.renewBefore 10m0s: must be positive and less than server.duration"), c
		})
		assert.Equal(t, string(after.api), string(read().api))

		// Back to the defaults.
		require.NoError(t, k8s.Patch(ctx, getKV("kubevirt", ns), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"certificateRotateStrategy":null}}`))))
		apiserver.WaitFor(t, "not Degraded", func() (bool, string) {
			kv = getKV("kubevirt", ns)
			c := condition(kv, v1.KubeVirtConditionDegraded)
			return strings.HasPrefix(c, "False/"), c
		})
	})

	t.Run("a second CR is ignored", func(t *testing.T) {
		second := &v1.KubeVirt{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "second"}, Spec: v1.KubeVirtSpec{ImageTag: "other"}}
		require.NoError(t, k8s.Create(ctx, second))
		apiserver.WaitFor(t, "Synchronized=False", func() (bool, string) {
			second = getKV("second", "other")
			c := condition(second, v1.KubeVirtConditionSynchronized)
			return strings.HasPrefix(c, "False/ExistingDeployment"), c
		})
		assert.Empty(t, second.Finalizers)
		assert.Empty(t, second.Status.Phase)
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-api"}, api))
		assert.Equal(t, "localhost/kubevmm/virt-api:envtest", api.Spec.Template.Spec.Containers[0].Image, "the installation is the first CR's")
		require.NoError(t, k8s.Delete(ctx, second))
	})

	// An update to another tag: virt-controller and virt-handler roll
	// first, virt-api waits for both to have rolled out (the test plays
	// the rollouts), the CR stays Available while Progressing says so.
	t.Run("update", func(t *testing.T) {
		image := func(kind, name string) string {
			if kind == "DaemonSet" {
				d := &appsv1.DaemonSet{}
				require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d))
				return d.Spec.Template.Spec.Containers[0].Image
			}
			d := &appsv1.Deployment{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d))
			return d.Spec.Template.Spec.Containers[0].Image
		}
		rollOut := func(name string) {
			if name == "virt-handler" {
				ds := &appsv1.DaemonSet{}
				require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ds))
				ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1}
				require.NoError(t, k8s.Status().Update(ctx, ds))
				return
			}
			d := &appsv1.Deployment{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d))
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
			require.NoError(t, k8s.Status().Update(ctx, d))
		}
		for _, n := range []string{"virt-api", "virt-controller", "virt-handler"} {
			rollOut(n)
		}
		apiserver.WaitFor(t, "Deployed on envtest", func() (bool, string) {
			kv = getKV("kubevirt", ns)
			return kv.Status.Phase == v1.KubeVirtPhaseDeployed, fmt.Sprintf("%q %v", kv.Status.Phase, kv.Status.Conditions)
		})

		require.NoError(t, k8s.Patch(ctx, getKV("kubevirt", ns), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"imageTag":"envtest2"}}`))))
		// (The status is written after the images are applied.)
		apiserver.WaitFor(t, "virt-controller and virt-handler on envtest2", func() (bool, string) {
			c, h := image("Deployment", "virt-controller"), image("DaemonSet", "virt-handler")
			kv = getKV("kubevirt", ns)
			return strings.HasSuffix(c, ":envtest2") && strings.HasSuffix(h, ":envtest2") && kv.Status.TargetKubeVirtVersion == "envtest2",
				c + " " + h + " target " + kv.Status.TargetKubeVirtVersion
		})
		assert.Equal(t, "localhost/kubevmm/virt-api:envtest", image("Deployment", "virt-api"), "virt-api waits")
		assert.Equal(t, "envtest2", kv.Status.TargetKubeVirtVersion)
		assert.Equal(t, "envtest", kv.Status.ObservedKubeVirtVersion)
		assert.True(t, strings.HasPrefix(condition(kv, v1.KubeVirtConditionAvailable), "True/"), condition(kv, v1.KubeVirtConditionAvailable))
		assert.True(t, strings.HasPrefix(condition(kv, v1.KubeVirtConditionProgressing), "True/UpdateInProgress"), condition(kv, v1.KubeVirtConditionProgressing))

		// One of the two rolled out is not enough.
		rollOut("virt-controller")
		apiserver.WaitFor(t, "the virt-controller rollout seen", func() (bool, string) {
			kv = getKV("kubevirt", ns)
			return strings.HasPrefix(condition(kv, v1.KubeVirtConditionProgressing), "True/UpdateInProgress"), condition(kv, v1.KubeVirtConditionProgressing)
		})
		assert.Equal(t, "localhost/kubevmm/virt-api:envtest", image("Deployment", "virt-api"), "virt-api waits for virt-handler")

		rollOut("virt-handler")
		// The pass that applies virt-api's new image writes the status
		// after it: wait for both.
		apiserver.WaitFor(t, "virt-api on envtest2", func() (bool, string) {
			a := image("Deployment", "virt-api")
			kv = getKV("kubevirt", ns)
			p := condition(kv, v1.KubeVirtConditionProgressing)
			return a == "localhost/kubevmm/virt-api:envtest2" && strings.HasSuffix(p, "rolling virt-api"), a + " " + p
		})
		assert.Equal(t, "envtest", kv.Status.ObservedKubeVirtVersion)

		rollOut("virt-api")
		apiserver.WaitFor(t, "Deployed on envtest2", func() (bool, string) {
			kv = getKV("kubevirt", ns)
			return kv.Status.Phase == v1.KubeVirtPhaseDeployed && kv.Status.ObservedKubeVirtVersion == "envtest2", fmt.Sprintf("%q %q %v", kv.Status.Phase, kv.Status.ObservedKubeVirtVersion, kv.Status.Conditions)
		})
		assert.True(t, strings.HasPrefix(condition(kv, v1.KubeVirtConditionProgressing), "False/AllComponentsReady"), condition(kv, v1.KubeVirtConditionProgressing))
	})

	t.Run("uninstall", func(t *testing.T) {
		kv = getKV("kubevirt", ns)
		require.NoError(t, k8s.Delete(ctx, kv))
		apiserver.WaitFor(t, "blocked by the VM", func() (bool, string) {
			kv = getKV("kubevirt", ns)
			c := condition(kv, v1.KubeVirtConditionDegraded)
			return kv.Status.Phase == v1.KubeVirtPhaseDeleting && strings.HasPrefix(c, "True/WorkloadsExist"), string(kv.Status.Phase) + " " + c
		})
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "virt-api"}, api), "nothing is removed while blocked")

		// RemoveWorkloads: the VM goes, then everything.
		kv.Spec.UninstallStrategy = v1.KubeVirtUninstallRemoveWorkloads
		updateKV(kv)
		apiserver.WaitFor(t, "the CR gone", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kubevirt"}, &v1.KubeVirt{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		for _, l := range []client.ObjectList{&appsv1.DeploymentList{}, &appsv1.DaemonSetList{}, &rbacv1.ClusterRoleList{},
			&admissionregistrationv1.MutatingWebhookConfigurationList{}, &admissionregistrationv1.ValidatingWebhookConfigurationList{}} {
			require.NoError(t, k8s.List(ctx, l, client.MatchingLabels{install.ManagedByLabel: virt.ManagedBy}))
			assert.Zero(t, apimeta.LenList(l), "%T left behind", l)
		}
		whs := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
		require.NoError(t, k8s.List(ctx, whs))
		assert.Empty(t, whs.Items, "no webhook configuration left")
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := k8s.Get(ctx, client.ObjectKey{Name: "virtualmachines.kubevirt.io"}, crd)
		assert.True(t, apierrors.IsNotFound(err) || crd.DeletionTimestamp != nil, "the VM CRD is removed: %v", err)
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: v1.KubeVirtCRDName}, crd), "the KubeVirt CRD stays (it came with the operator)")
	})
}
