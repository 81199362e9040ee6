package templates

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/template/crds"
	"github.com/kubevmm/kubevmm/api/template/process"
	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
	"github.com/kubevmm/kubevmm/test/apiserver"
	"github.com/kubevmm/kubevmm/virtapi"
)

// vmWebhooks are virt-api's VM webhooks as virt-operator registers them
// (operator/virt/install), pointed by envtest at a local virt-api.
func vmWebhooks() (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	cc := func(path string) admissionregistrationv1.WebhookClientConfig {
		// envtest makes https://HOST:PORT/ + the path into the URL.
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Path: ptr.To(path[1:])}}
	}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{v1.GroupName}, APIVersions: []string{"v1"}, Resources: []string{"virtualmachines"}},
	}}
	none, fail := ptr.To(admissionregistrationv1.SideEffectClassNone), ptr.To(admissionregistrationv1.Fail)
	return &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "virt-api-mutator"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "virtualmachines-mutator.kubevirt.io", ClientConfig: cc(virtapi.PathMutateVM),
				Rules: rules, SideEffects: none, FailurePolicy: fail, AdmissionReviewVersions: []string{"v1"}}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "virt-api-validator"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "virtualmachine-validator.kubevirt.io", ClientConfig: cc(virtapi.PathValidateVM),
				Rules: rules, SideEffects: none, FailurePolicy: fail, AdmissionReviewVersions: []string{"v1"}}}}
}

// TestCommonTemplatesEnvtest: the Template CRD installs in a real
// kube-apiserver, every common template is stored and read back unchanged
// (objects included: the CRD keeps their unknown fields), and the VM each
// one makes, processed from the stored copy, is admitted by virt-api's
// real webhooks and carries the template's labels.
func TestCommonTemplatesEnvtest(t *testing.T) {
	crd, err := crds.CRD()
	require.NoError(t, err)
	mw, vw := vmWebhooks()
	var hooks *envtest.WebhookInstallOptions
	cfg, _ := apiserver.Start(t, func(env *envtest.Environment) {
		env.CRDs = append(env.CRDs, crd)
		env.WebhookInstallOptions.MutatingWebhooks = append(env.WebhookInstallOptions.MutatingWebhooks, mw)
		env.WebhookInstallOptions.ValidatingWebhooks = append(env.WebhookInstallOptions.ValidatingWebhooks, vw)
		hooks = &env.WebhookInstallOptions
	})
	scheme, err := kvscheme.New()
	require.NoError(t, err)
	require.NoError(t, templatev1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	// virt-api's admission, on the certificate envtest made for it.
	cert, err := tls.LoadX509KeyPair(filepath.Join(hooks.LocalServingCertDir, "tls.crt"), filepath.Join(hooks.LocalServingCertDir, "tls.key"))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", net.JoinHostPort(hooks.LocalServingHost, strconv.Itoa(hooks.LocalServingPort)))
	require.NoError(t, err)
	proxy, err := frontproxy.Load(t.Context(), c)
	require.NoError(t, err)
	srv := &http.Server{Handler: (&virtapi.Server{Client: c, Callers: proxy, Log: logr.Discard()}).Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	ctx := context.Background()
	const ns = "openshift"
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vms"}}))
	all, err := Common(ns)
	require.NoError(t, err)
	for _, want := range all {
		t.Run(want.Name, func(t *testing.T) {
			require.NoError(t, c.Create(ctx, want.DeepCopy()))
			got := &templatev1.Template{}
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(want), got))
			assert.Equal(t, want.Labels, got.Labels)
			assert.Equal(t, want.Annotations, got.Annotations)
			assert.Equal(t, want.Parameters, got.Parameters)
			require.Len(t, got.Objects, len(want.Objects))
			for i := range want.Objects {
				assert.JSONEq(t, string(want.Objects[i].Raw), string(got.Objects[i].Raw))
			}

			objs, err := process.Process(got, map[string]string{"NAME": want.Name + "-vm"})
			require.NoError(t, err)
			require.Len(t, objs, 1)
			vm := &objs[0]
			vm.SetNamespace("vms")
			require.NoError(t, c.Create(ctx, vm), "the webhooks refused the template's VM")
			stored := &v1.VirtualMachine{}
			require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "vms", Name: want.Name + "-vm"}, stored))
			assert.Equal(t, want.Name, stored.Labels[process.LabelTemplate])
			assert.Equal(t, ns, stored.Labels[process.LabelTemplateNamespace])
			for k, v := range want.Labels {
				if k != "template.kubevirt.io/type" && k != "template.kubevirt.io/version" && k != "template.kubevirt.io/default-os-variant" {
					assert.Equal(t, v, stored.Labels[k], "label %s", k)
				}
			}
			assert.Equal(t, v1.RunStrategyHalted, *stored.Spec.RunStrategy)
		})
	}

	// The webhooks do refuse: upstream's Fedora template boots a
	// DataVolume (CDI), where ours has a containerDisk.
	objs, err := process.Process(all[0], map[string]string{"NAME": "with-dv"})
	require.NoError(t, err)
	vm := &objs[0]
	vm.SetNamespace("vms")
	dv := map[string]any{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "metadata": map[string]any{"name": "with-dv"},
		"spec": map[string]any{"sourceRef": map[string]any{"kind": "DataSource", "name": "fedora"}}}
	require.NoError(t, unstructured.SetNestedSlice(vm.Object, []any{dv}, "spec", "dataVolumeTemplates"))
	err = c.Create(ctx, vm)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.dataVolumeTemplates")
}

// Common's output is what its YAML says: every template processes, and its
// VM is the size its flavor names.
func TestCommon(t *testing.T) {
	all, err := Common("ns1")
	require.NoError(t, err)
	sizes := map[string]struct {
		memory string
		cores  int64
	}{"tiny": {"1Gi", 1}, "small": {"2Gi", 1}, "medium": {"4Gi", 1}, "large": {"8Gi", 2}}
	var names []string
	for _, tp := range all {
		names = append(names, tp.Name)
		assert.Equal(t, "ns1", tp.Namespace)
		assert.Equal(t, "base", tp.Labels["template.kubevirt.io/type"])
		assert.Equal(t, Version, tp.Labels["template.kubevirt.io/version"])
		assert.Equal(t, "rootdisk", tp.Annotations["defaults.template.kubevirt.io/disk"])
		flavor := ""
		for f := range sizes {
			if tp.Labels["flavor.template.kubevirt.io/"+f] == "true" {
				flavor = f
			}
		}
		require.NotEmpty(t, flavor, "%s has no flavor label", tp.Name)

		objs, err := process.Process(tp, nil)
		require.NoError(t, err, tp.Name)
		vm := &v1.VirtualMachine{}
		b, err := objs[0].MarshalJSON()
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, vm))
		assert.Regexp(t, `^[a-z0-9-]+-[a-z0-9]{16}$`, vm.Name, "the generated NAME")
		d := vm.Spec.Template.Spec.Domain
		assert.Equal(t, sizes[flavor].memory, d.Memory.Guest.String(), tp.Name)
		assert.Equal(t, uint32(sizes[flavor].cores), d.CPU.Cores, tp.Name)
		assert.Equal(t, "localhost/kubevmm/test-bootdisk:devel", vm.Spec.Template.Spec.Volumes[0].ContainerDisk.Image)
		assert.Regexp(t, `password: [a-z0-9]{4}-[a-z0-9]{4}-[a-z0-9]{4}\n`, vm.Spec.Template.Spec.Volumes[1].CloudInitNoCloud.UserData)

		var rules []map[string]any
		require.NoError(t, json.Unmarshal([]byte(vm.Annotations["vm.kubevirt.io/validations"]), &rules), tp.Name)
		require.Len(t, rules, 1)
		assert.Equal(t, "jsonpath::.spec.domain.memory.guest", rules[0]["path"])
		assert.LessOrEqual(t, rules[0]["min"], float64(d.Memory.Guest.Value()), "%s breaks its own memory rule", tp.Name)
	}
	assert.Equal(t, []string{"fedora-server-tiny", "fedora-server-small", "fedora-server-medium", "fedora-server-large",
		"centos-stream9-server-small", "centos-stream9-server-medium", "centos-stream9-server-large"}, names)
}
