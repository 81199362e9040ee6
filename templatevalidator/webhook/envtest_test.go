package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	templatecrds "github.com/kubevmm/kubevmm/api/template/crds"
	"github.com/kubevmm/kubevmm/api/template/process"
	"github.com/kubevmm/kubevmm/operator/ssp/templates"
	tv "github.com/kubevmm/kubevmm/templatevalidator"
	"github.com/kubevmm/kubevmm/templatevalidator/webhook"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

const (
	minMemory  = `{"name": "minimal-required-memory", "path": "jsonpath::.spec.domain.memory.guest", "rule": "integer", "message": "This VM requires more memory.", "min": 2147483648}`
	virtioWarn = `{"name": "windows-virtio-bus", "path": "jsonpath::.spec.domain.devices.disks[*].disk.bus", "valid": "jsonpath::.spec.domain.devices.disks[*].disk.bus", "rule": "enum", "message": "virtio disk bus type has better performance", "values": ["virtio"], "justWarning": true}`
	rules      = "[" + minMemory + "," + virtioWarn + "]"
	memRefusal = ".spec.domain.memory.guest: This VM requires more memory.: value 1073741824 is lower than minimum [2147483648]"
	busWarning = `.spec.domain.devices.disks[*].disk.bus: virtio disk bus type has better performance: value "sata" is not one of [virtio]`
)

// webhooks are the validator's webhook configuration as SSP deploys it;
// envtest points them at the local server.
func webhooks() *admissionregistrationv1.ValidatingWebhookConfiguration {
	hook := func(name, path, group, resource string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name: name,
			// envtest joins host and path with a slash of its own.
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
				Namespace: "kubevirt", Name: "virt-template-validator", Path: ptr.To(path[1:])}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: ops, Rule: admissionregistrationv1.Rule{
				APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{resource}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "virt-template-validator"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			hook("virtualmachine-validator.kubevmm.io", webhook.PathVirtualMachine, v1.GroupName, "virtualmachines", admissionregistrationv1.Create, admissionregistrationv1.Update),
			hook("template-validator.kubevmm.io", webhook.PathTemplate, tv.TemplateGroup, "templates", admissionregistrationv1.Delete),
		},
	}
}

// warnings collects the API server's warnings, as kubectl prints them.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seen
	w.seen = nil
	return s
}

// start runs an API server calling the validator, served in-process as
// the binary serves it, with only ClusterRoleRules' access. It returns an
// admin client and the warnings it got.
func start(t *testing.T) (client.Client, *warnings, func(token string) int) {
	var env *envtest.Environment
	crd, err := templatecrds.CRD()
	require.NoError(t, err)
	cfg, _ := apiserver.Start(t, func(e *envtest.Environment) {
		env = e
		e.CRDs = append(e.CRDs, crd)
		e.WebhookInstallOptions.ValidatingWebhooks = []*admissionregistrationv1.ValidatingWebhookConfiguration{webhooks()}
	})
	ctx := t.Context()
	scheme, err := kvscheme.New()
	require.NoError(t, err)
	warn := &warnings{}
	adminCfg := rest.CopyConfig(cfg)
	adminCfg.WarningHandler = warn
	admin, err := client.New(adminCfg, client.Options{Scheme: scheme})
	require.NoError(t, err)

	// The validator's own identity, bound to ClusterRoleRules only.
	user, err := env.AddUser(envtest.User{Name: "virt-template-validator"}, nil)
	require.NoError(t, err)
	require.NoError(t, admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "virt-template-validator"}, Rules: webhook.ClusterRoleRules()}))
	require.NoError(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "virt-template-validator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "virt-template-validator"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "virt-template-validator"}}}))
	vc, err := client.New(user.Config(), client.Options{Scheme: scheme})
	require.NoError(t, err)

	wo := &env.WebhookInstallOptions
	// Who the API server is, as the validator reads it with its own RBAC
	// (the binding the SSP operator makes).
	reader := frontproxy.ReaderBinding("virt-template-validator", "", "")
	reader.Subjects = []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "virt-template-validator"}}
	require.NoError(t, admin.Create(ctx, reader))
	callers, err := frontproxy.Load(ctx, vc)
	require.NoError(t, err)
	// /metrics checked as the binary checks it, with the validator's RBAC.
	guard, err := securemetrics.Guard(user.Config(), logr.Discard())
	require.NoError(t, err)
	s := &webhook.Server{Client: vc, CertDir: wo.LocalServingCertDir, Callers: callers, MetricsGuard: guard,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	sctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addr := net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort))
	go func() { done <- s.ListenAndServe(sctx, addr) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	hc := waitReady(t, "https://"+addr+webhook.PathReady, wo.LocalServingCAData, done)
	for _, ns := range []string{"vms", "templates", "common"} {
		require.NoError(t, admin.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}))
	}
	metrics := func(token string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	return admin, warn, metrics
}

// waitReady waits for the server's readiness over TLS with the CA the
// API server trusts, and returns the client it used.
func waitReady(t *testing.T, url string, ca []byte, done chan error) *http.Client {
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(ca))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return hc
			}
			err = errors.New(resp.Status)
		}
		select {
		case err := <-done:
			t.Fatalf("the validator stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the validator is not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// vm is a VM of guest memory mem with a disk on bus, named by the
// labels and annotations given as key, value pairs.
func vm(name, mem string, bus v1.DiskBus, labels, annotations map[string]string) *v1.VirtualMachine {
	guest := resource.MustParse(mem)
	return &v1.VirtualMachine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vms", Labels: labels, Annotations: annotations},
		Spec: v1.VirtualMachineSpec{RunStrategy: ptr.To(v1.RunStrategyHalted), Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &guest}, Devices: v1.Devices{Disks: []v1.Disk{
				{Name: "rootdisk", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: bus}}}}}},
			Volumes: []v1.Volume{{Name: "rootdisk", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "fedora"}}}},
		}}},
	}
}

// template is a common-template-like Template whose VirtualMachine
// carries vmRules (none if "").
func template(name, vmRules string) *unstructured.Unstructured {
	vmObj := map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": map[string]any{"name": "${NAME}"}}
	if vmRules != "" {
		vmObj["metadata"].(map[string]any)["annotations"] = map[string]any{tv.AnnotationValidations: vmRules}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "template.openshift.io/v1", "kind": "Template",
		"metadata":   map[string]any{"name": name, "namespace": "templates", "labels": map[string]any{"template.kubevirt.io/type": "base"}},
		"objects":    []any{vmObj},
		"parameters": []any{map[string]any{"name": "NAME", "required": true}},
	}}
}

func from(tmpl string) map[string]string {
	return map[string]string{tv.LabelTemplate: tmpl, tv.LabelTemplateNamespace: "templates"}
}

// refusal is the status of an API error, asserted to be the validator's
// refusal of the object.
func refusal(t *testing.T, err error) *metav1.Status {
	t.Helper()
	require.Error(t, err)
	var se apierrors.APIStatus
	require.ErrorAs(t, err, &se, "%v", err)
	s := se.Status()
	return &s
}

func TestWebhookEnvtest(t *testing.T) {
	k8s, warn, metrics := start(t)
	ctx := t.Context()
	t.Run("metrics need a token the API server knows", func(t *testing.T) {
		assert.Equal(t, http.StatusUnauthorized, metrics(""), "no token")
		// 401, not a failed review: the validator may ask the API server.
		assert.Equal(t, http.StatusUnauthorized, metrics("eyJhbGciOiJSUzI1NiJ9.e30.forged"), "a forged token")
	})
	require.NoError(t, k8s.Create(ctx, template("fedora-server-small", rules)))
	require.NoError(t, k8s.Create(ctx, template("plain", "")))

	t.Run("a processed VM below its memory rule is refused with the template's message", func(t *testing.T) {
		ann := map[string]string{tv.AnnotationValidations: rules}
		s := refusal(t, k8s.Create(ctx, vm("small", "1Gi", v1.DiskBusVirtio, from("fedora-server-small"), ann)))
		assert.Equal(t, int32(http.StatusUnprocessableEntity), s.Code)
		assert.Equal(t, metav1.StatusReasonInvalid, s.Reason)
		assert.Contains(t, s.Message, memRefusal)
		require.NotNil(t, s.Details)
		require.Len(t, s.Details.Causes, 1)
		assert.Equal(t, metav1.StatusCause{Type: metav1.CauseTypeFieldValueInvalid, Field: ".spec.domain.memory.guest",
			Message: "This VM requires more memory.: value 1073741824 is lower than minimum [2147483648]"}, s.Details.Causes[0])
	})

	t.Run("a VM without rules of its own gets the template's", func(t *testing.T) {
		s := refusal(t, k8s.Create(ctx, vm("small", "1Gi", v1.DiskBusVirtio, from("fedora-server-small"), nil)))
		assert.Contains(t, s.Message, memRefusal)
	})

	t.Run("a justWarning rule warns and admits", func(t *testing.T) {
		warn.take()
		require.NoError(t, k8s.Create(ctx, vm("sata", "2Gi", v1.DiskBusSATA, from("fedora-server-small"), nil)))
		assert.Equal(t, []string{busWarning}, warn.take())
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "vms", Name: "sata"}, &v1.VirtualMachine{}))
	})

	t.Run("an update is validated", func(t *testing.T) {
		v := &v1.VirtualMachine{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "vms", Name: "sata"}, v))
		v.Spec.Template.Spec.Domain.Memory.Guest = ptr.To(resource.MustParse("1Gi"))
		s := refusal(t, k8s.Update(ctx, v))
		assert.Contains(t, s.Message, memRefusal)
	})

	t.Run("an edit leaving the template spec as it was is not refused by rules tightened since", func(t *testing.T) {
		tmpl := &unstructured.Unstructured{}
		tmpl.SetGroupVersionKind(template("", "").GroupVersionKind())
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "templates", Name: "fedora-server-small"}, tmpl))
		min4Gi := strings.Replace(minMemory, "2147483648", "4294967296", 1)
		require.NoError(t, unstructured.SetNestedSlice(tmpl.Object, template("", "["+min4Gi+","+virtioWarn+"]").Object["objects"].([]any), "objects"))
		require.NoError(t, k8s.Update(ctx, tmpl))

		v := &v1.VirtualMachine{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "vms", Name: "sata"}, v))
		v.Labels["tier"] = "gold"
		warn.take()
		require.NoError(t, k8s.Update(ctx, v), "a label is no concern of the rules")
		assert.Empty(t, warn.take(), "nor warned about again")

		v.Spec.Template.Spec.Domain.Memory.Guest = ptr.To(resource.MustParse("3Gi"))
		s := refusal(t, k8s.Update(ctx, v))
		assert.Contains(t, s.Message, "value 3221225472 is lower than minimum [4294967296]", "an edit of the template spec meets the rules as they are")
	})

	t.Run("a VM sized by an instance type is checked with the type's memory", func(t *testing.T) {
		for name, mem := range map[string]string{"small-1g": "1Gi", "big-4g": "4Gi"} {
			require.NoError(t, k8s.Create(ctx, &v1beta1.VirtualMachineClusterInstancetype{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: 1}, Memory: v1beta1.MemoryInstancetype{Guest: resource.MustParse(mem)}}}))
		}
		sized := func(name, it string) *v1.VirtualMachine {
			v := vm(name, "1Gi", v1.DiskBusVirtio, nil, map[string]string{tv.AnnotationValidations: "[" + minMemory + "]"})
			v.Spec.Template.Spec.Domain.Memory = nil
			v.Spec.Instancetype = &v1.InstancetypeMatcher{Name: it}
			return v
		}
		s := refusal(t, k8s.Create(ctx, sized("sized-small", "small-1g")))
		assert.Contains(t, s.Message, memRefusal)
		require.NoError(t, k8s.Create(ctx, sized("sized-big", "big-4g")))
	})

	t.Run("skip-validations admits", func(t *testing.T) {
		require.NoError(t, k8s.Create(ctx, vm("skipped", "1Gi", v1.DiskBusVirtio, from("fedora-server-small"), map[string]string{tv.AnnotationSkipValidations: ""})))
	})

	t.Run("a VM naming a template that does not exist has no rules", func(t *testing.T) {
		require.NoError(t, k8s.Create(ctx, vm("orphan", "1Gi", v1.DiskBusVirtio, from("gone"), nil)))
	})

	t.Run("malformed rules refuse the VM, naming the rule", func(t *testing.T) {
		bad := map[string]string{tv.AnnotationValidations: `[{"name": "r", "rule": "integer", "path": ".spec.domain.memory.guest", "message": "m"}]`}
		s := refusal(t, k8s.Create(ctx, vm("bad", "2Gi", v1.DiskBusVirtio, nil, bad)))
		assert.Contains(t, s.Message, `the validation rules of annotation vm.kubevirt.io/validations: rule 0 ("r"): path: ".spec.domain.memory.guest" does not start with "jsonpath::"`)
	})

	t.Run("a VM processed from the common Fedora template below its memory rule is refused", func(t *testing.T) {
		common, err := templates.Common("common")
		require.NoError(t, err)
		var fedora *unstructured.Unstructured
		for _, tp := range common {
			if tp.Name != "fedora-server-small" {
				continue
			}
			raw, err := json.Marshal(tp)
			require.NoError(t, err)
			fedora = &unstructured.Unstructured{}
			require.NoError(t, json.Unmarshal(raw, &fedora.Object))
			objs, err := process.Process(tp, map[string]string{"NAME": "fedora-small-memory"})
			require.NoError(t, err)
			require.Len(t, objs, 1)
			vm := &objs[0]
			vm.SetNamespace("vms")
			require.NoError(t, unstructured.SetNestedField(vm.Object, "512Mi", "spec", "template", "spec", "domain", "memory", "guest"))
			require.NoError(t, k8s.Create(ctx, fedora))
			s := refusal(t, k8s.Create(ctx, vm))
			assert.Contains(t, s.Message, ".spec.domain.memory.guest: This VM requires more memory.: value 536870912 is lower than minimum")
		}
		require.NotNil(t, fedora, "fedora-server-small is a common template")
		require.NoError(t, k8s.Delete(ctx, fedora), "no VM holds it")
	})

	t.Run("a template validating VMs can't be deleted", func(t *testing.T) {
		s := refusal(t, k8s.Delete(ctx, template("fedora-server-small", "")))
		assert.Equal(t, int32(http.StatusForbidden), s.Code)
		assert.Contains(t, s.Message, "Template cannot be deleted, because the following VMs are referencing it for validation: vms/sata")
		assert.NotContains(t, s.Message, "vms/skipped", "a VM that skips validation does not hold it")
	})

	t.Run("once its VMs are gone, it can", func(t *testing.T) {
		require.NoError(t, k8s.Delete(ctx, &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Namespace: "vms", Name: "sata"}}))
		require.NoError(t, k8s.Delete(ctx, template("fedora-server-small", "")))
	})

	t.Run("a template without rules whose VMs carry none can be deleted", func(t *testing.T) {
		require.NoError(t, k8s.Create(ctx, vm("plain", "1Gi", v1.DiskBusVirtio, from("plain"), nil)))
		require.NoError(t, k8s.Delete(ctx, template("plain", "")))
	})
}
