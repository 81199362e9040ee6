package kubemacpool_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
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
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/crds"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/net/kubemacpool"
	"github.com/kubevmm/kubevmm/net/macpool"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

const ns = "kmp"

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

type cluster struct {
	env     *envtest.Environment
	admin   client.Client
	warn    *warnings
	kmp     *rest.Config // kubemacpool's identity, with only its RBAC
	scraper string       // a token allowed to GET /metrics, as Prometheus's
}

// startCluster runs an API server calling kubemacpool's webhook as
// MutatingWebhook configures it (envtest points it at a local address),
// with the range's ConfigMap and kubemacpool's RBAC.
func startCluster(t *testing.T) *cluster {
	var env *envtest.Environment
	cfg, _ := apiserver.Start(t, func(e *envtest.Environment) {
		env = e
		hook := kubemacpool.MutatingWebhook("kubemacpool-mutator", ns, "kubemacpool-service", nil)
		// envtest joins host and path with a slash of its own.
		hook.Webhooks[0].ClientConfig.Service.Path = ptr.To(strings.TrimPrefix(kubemacpool.PathMutateVM, "/"))
		e.WebhookInstallOptions.MutatingWebhooks = []*admissionregistrationv1.MutatingWebhookConfiguration{hook}
	})
	ctx := t.Context()
	scheme, err := kvscheme.New()
	require.NoError(t, err)
	warn := &warnings{}
	adminCfg := rest.CopyConfig(cfg)
	adminCfg.WarningHandler = warn
	admin, err := client.New(adminCfg, client.Options{Scheme: scheme})
	require.NoError(t, err)
	for _, n := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		{ObjectMeta: metav1.ObjectMeta{Name: "vms"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "optout", Labels: map[string]string{kubemacpool.OptOutLabel: kubemacpool.OptOutValue}}},
	} {
		require.NoError(t, admin.Create(ctx, n))
	}
	require.NoError(t, admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kubemacpool.ConfigMap, Namespace: ns},
		Data: map[string]string{kubemacpool.KeyRangeStart: "02:00:00:00:00:00", kubemacpool.KeyRangeEnd: "02:00:00:00:00:0f"}}))

	user, err := env.AddUser(envtest.User{Name: "kubemacpool"}, nil)
	require.NoError(t, err)
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "kubemacpool"}}
	require.NoError(t, admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kubemacpool"}, Rules: kubemacpool.ClusterRoleRules()}))
	require.NoError(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kubemacpool"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubemacpool"}, Subjects: subj}))
	require.NoError(t, admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "kubemacpool", Namespace: ns}, Rules: kubemacpool.RoleRules()}))
	require.NoError(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kubemacpool", Namespace: ns},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kubemacpool"}, Subjects: subj}))
	// As the operator binds its ServiceAccount (test: its user).
	reader := frontproxy.ReaderBinding("kubemacpool", ns, "kubemacpool")
	reader.Subjects = subj
	require.NoError(t, admin.Create(ctx, reader))
	// Prometheus, with the right a cluster admin gives it (README, Metrics).
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: ns}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metrics-reader"},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "metrics-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: ns}}},
	} {
		require.NoError(t, admin.Create(ctx, o))
	}
	apiserver.WaitAllowed(t, admin, authzv1.SubjectAccessReviewSpec{User: "system:serviceaccount:" + ns + ":prometheus",
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/metrics", Verb: "get"}})
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "prometheus", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	return &cluster{env: env, admin: admin, warn: warn, kmp: user.Config(), scraper: tr.Status.Token}
}

// kmp is one running kubemacpool: its server and the way to stop it.
type kmp struct {
	s       *kubemacpool.Server
	base    string
	scraper string
	hc      *http.Client
	stop    func()
}

// start runs kubemacpool in-process as the binary does (a new, empty
// pool) and waits for its readiness.
func (c *cluster) start(t *testing.T) *kmp {
	scheme, err := kvscheme.New()
	require.NoError(t, err)
	wo := &c.env.WebhookInstallOptions
	// Who the API server is, as kubemacpool reads it with its own RBAC.
	kc, err := client.New(c.kmp, client.Options{Scheme: scheme})
	require.NoError(t, err)
	callers, err := frontproxy.Load(t.Context(), kc)
	require.NoError(t, err)
	// /metrics checked as the binary checks it, with kubemacpool's RBAC.
	guard, err := securemetrics.Guard(c.kmp, logr.Discard())
	require.NoError(t, err)
	s := &kubemacpool.Server{Pool: macpool.New(macpool.Range{}), CertDir: wo.LocalServingCertDir, Callers: callers, MetricsGuard: guard,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	ctx, cancel := context.WithCancel(context.Background())
	addr := net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort))
	var ln net.Listener
	// The previous instance's port is free once it stopped; its
	// connections may linger a moment.
	for range 100 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	require.NoError(t, kubemacpool.Watch(ctx, c.kmp, scheme, ns, s))
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(wo.LocalServingCAData))
	k := &kmp{s: s, base: "https://" + addr, scraper: c.scraper, hc: &http.Client{Timeout: 5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}
	var once sync.Once
	k.stop = func() {
		once.Do(func() {
			cancel()
			assert.NoError(t, <-done)
			k.hc.CloseIdleConnections()
		})
	}
	t.Cleanup(k.stop)
	waitFor(t, "kubemacpool ready", func() error {
		body, err := k.get(kubemacpool.PathReady)
		if err == nil && body != "ok" {
			err = errors.New(body)
		}
		return err
	})
	return k
}

func (k *kmp) get(path string) (string, error) {
	return k.getAs(path, "")
}

// metrics is GET /metrics with the scraper's token.
func (k *kmp) metrics() (string, error) {
	return k.getAs("/metrics", k.scraper)
}

// getAs is get with a bearer token (none if empty).
func (k *kmp) getAs(path, token string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, k.base+path, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status + ": " + string(b))
	}
	return string(b), err
}

// waitFor polls cond until it succeeds; the bound is for a busy 2-core
// machine, not a speed claim.
func waitFor(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// vm is a halted VM with one interface per MAC given ("" asks for one).
func vm(namespace, name string, macs ...string) *v1.VirtualMachine {
	var ifs []v1.Interface
	var nets []v1.Network
	for i, m := range macs {
		n := "nic" + strconv.Itoa(i)
		ifs = append(ifs, v1.Interface{Name: n, MacAddress: m, InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})
		nets = append(nets, v1.Network{Name: n, NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}})
	}
	return &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: v1.VirtualMachineSpec{RunStrategy: ptr.To(v1.RunStrategyHalted), Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{Devices: v1.Devices{Interfaces: ifs}}, Networks: nets}}}}
}

func macsOf(v *v1.VirtualMachine) []string {
	var out []string
	for _, i := range v.Spec.Template.Spec.Domain.Devices.Interfaces {
		out = append(out, i.MacAddress)
	}
	return out
}

func TestKubeMacPool(t *testing.T) {
	c := startCluster(t)
	ctx := t.Context()
	a := c.start(t)

	// Every interface without a MAC gets one, distinct, from the range.
	one, two := vm("vms", "one", "", ""), vm("vms", "two", "")
	require.NoError(t, c.admin.Create(ctx, one))
	require.NoError(t, c.admin.Create(ctx, two))
	assert.Equal(t, []string{"02:00:00:00:00:00", "02:00:00:00:00:01"}, macsOf(one))
	assert.Equal(t, []string{"02:00:00:00:00:02"}, macsOf(two))

	// A VM in an opted-out namespace is left alone.
	out := vm("optout", "mine", "")
	require.NoError(t, c.admin.Create(ctx, out))
	assert.Equal(t, []string{""}, macsOf(out))

	// An invalid MAC, and the same MAC twice in one VM, are refused,
	// naming the field; nothing is handed out for them.
	for _, tc := range []struct {
		vm    *v1.VirtualMachine
		field string
		msg   string
	}{
		{vm("vms", "bad", "", "02:00:00:00:00"), "spec.template.spec.domain.devices.interfaces[1].macAddress", `"02:00:00:00:00" is not a MAC address`},
		{vm("vms", "multi", "01:00:5e:00:00:01"), "spec.template.spec.domain.devices.interfaces[0].macAddress", "multicast"},
		{vm("vms", "twice", "02:00:00:00:00:0a", "02:00:00:00:00:0A"), "spec.template.spec.domain.devices.interfaces[1].macAddress", "already interface nic0's in this VM"},
	} {
		err := c.admin.Create(ctx, tc.vm)
		require.Error(t, err, tc.vm.Name)
		assert.True(t, apierrors.IsInvalid(err), "%s: %v", tc.vm.Name, err)
		var st apierrors.APIStatus
		require.ErrorAs(t, err, &st)
		require.NotNil(t, st.Status().Details, "%v", err)
		require.Len(t, st.Status().Details.Causes, 1)
		assert.Equal(t, tc.field, st.Status().Details.Causes[0].Field)
		assert.Contains(t, st.Status().Details.Causes[0].Message, tc.msg)
	}

	// An update keeps the MACs: one left out is given back.
	require.NoError(t, c.admin.Get(ctx, client.ObjectKeyFromObject(one), one))
	one.Spec.Template.Spec.Domain.Devices.Interfaces[1].MacAddress = ""
	one.Spec.Template.Spec.Domain.Devices.Interfaces = append(one.Spec.Template.Spec.Domain.Devices.Interfaces,
		v1.Interface{Name: "nic2", InterfaceBindingMethod: v1.InterfaceBindingMethod{Bridge: &v1.InterfaceBridge{}}})
	one.Spec.Template.Spec.Networks = append(one.Spec.Template.Spec.Networks,
		v1.Network{Name: "nic2", NetworkSource: v1.NetworkSource{Multus: &v1.MultusNetwork{NetworkName: "br1"}}})
	require.NoError(t, c.admin.Update(ctx, one))
	assert.Equal(t, []string{"02:00:00:00:00:00", "02:00:00:00:00:01", "02:00:00:00:00:03"}, macsOf(one))

	// A MAC another VM has is admitted (upstream's current behaviour),
	// with a warning naming that VM, and counted as a collision.
	c.warn.take()
	dup := vm("vms", "dup", "02:00:00:00:00:02")
	require.NoError(t, c.admin.Create(ctx, dup))
	assert.Equal(t, []string{"spec.template.spec.domain.devices.interfaces[0].macAddress (interface nic0): MAC 02:00:00:00:00:02 is already in use by vms/two"}, c.warn.take())
	metrics, err := a.metrics()
	require.NoError(t, err)
	assert.Contains(t, metrics, `kmp_mac_collisions{mac="02:00:00:00:00:02"} 2`)
	// The MACs are no one else's business: no token, no metrics.
	_, err = a.get("/metrics")
	assert.ErrorContains(t, err, "401 Unauthorized")

	// A dry run hands out nothing.
	dry := vm("vms", "dry", "")
	require.NoError(t, c.admin.Create(ctx, dry, client.DryRunAll))
	assert.Equal(t, []string{"02:00:00:00:00:04"}, macsOf(dry))

	// Reviews from anyone but the API server (any pod can reach the
	// Service) are refused unread: a flood of them, more than the range
	// holds, hands out nothing.
	flood, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "flood", Operation: admissionv1.Create, Namespace: "vms", Name: "flood",
			Object: runtime.RawExtension{Object: vm("vms", "flood", "", "", "", "")}}})
	require.NoError(t, err)
	for i := range 8 {
		resp, err := a.hc.Post(a.base+kubemacpool.PathMutateVM, "application/json", bytes.NewReader(flood))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "review %d without the API server's certificate: %s", i, body)
	}
	assert.Empty(t, a.s.Pool.Held("vms/flood"))
	require.NoError(t, c.admin.Create(ctx, dry, client.DryRunAll))
	assert.Equal(t, []string{"02:00:00:00:00:04"}, macsOf(dry), "the flood took no MAC")

	// A new kubemacpool rebuilds the pool from the VMs before it is ready:
	// what they hold is not handed out again.
	a.stop()
	b := c.start(t)
	three := vm("vms", "three", "", "")
	require.NoError(t, c.admin.Create(ctx, three))
	assert.Equal(t, []string{"02:00:00:00:00:04", "02:00:00:00:00:05"}, macsOf(three))
	metrics, err = b.metrics()
	require.NoError(t, err)
	assert.Contains(t, metrics, `kmp_mac_collisions{mac="02:00:00:00:00:02"} 2`, "the collision is rebuilt too")

	// Deleting a VM frees its MACs; the collision is gone with it.
	require.NoError(t, c.admin.Delete(ctx, dup))
	mac2, err := macpool.ParseMAC("02:00:00:00:00:02")
	require.NoError(t, err)
	waitFor(t, "the deleted VM's MAC freed", func() error {
		if o := b.s.Pool.Owners(mac2); len(o) != 1 {
			return errors.New("owners " + strings.Join(o, ","))
		}
		return nil
	})
	metrics, err = b.metrics()
	require.NoError(t, err)
	assert.NotContains(t, metrics, "kmp_mac_collisions{")
	require.NoError(t, c.admin.Delete(ctx, two))
	waitFor(t, "the deleted VM's MAC freed", func() error {
		if o := b.s.Pool.Owners(mac2); len(o) != 0 {
			return errors.New("owners " + strings.Join(o, ","))
		}
		return nil
	})

	// The range is reloaded when its ConfigMap changes.
	cm := &corev1.ConfigMap{}
	require.NoError(t, c.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: kubemacpool.ConfigMap}, cm))
	cm.Data[kubemacpool.KeyRangeStart], cm.Data[kubemacpool.KeyRangeEnd] = "02:00:00:00:01:00", "02:00:00:00:01:ff"
	require.NoError(t, c.admin.Update(ctx, cm))
	waitFor(t, "the new range", func() error {
		if r := b.s.Pool.Range(); r.Start.String() != "02:00:00:00:01:00" {
			return errors.New("range starts at " + r.Start.String())
		}
		return nil
	})
	four := vm("vms", "four", "")
	require.NoError(t, c.admin.Create(ctx, four))
	assert.Equal(t, []string{"02:00:00:00:01:00"}, macsOf(four))
}

// TestWaitsForTheVMCRD: kubemacpool started before KubeVirt's CRDs are
// installed waits for them, not ready, and then rebuilds as usual.
func TestWaitsForTheVMCRD(t *testing.T) {
	all, err := crds.All()
	require.NoError(t, err)
	var vmCRD *apiextensionsv1.CustomResourceDefinition
	for _, c := range all {
		if c.Name == "virtualmachines.kubevirt.io" {
			vmCRD = c
		}
	}
	require.NotNil(t, vmCRD)
	cfg, admin := apiserver.Start(t, func(e *envtest.Environment) { e.CRDs = nil })
	ctx := t.Context()
	require.NoError(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	require.NoError(t, admin.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kubemacpool.ConfigMap, Namespace: ns},
		Data: map[string]string{kubemacpool.KeyRangeStart: "02:00:00:00:00:00", kubemacpool.KeyRangeEnd: "02:00:00:00:00:0f"}}))
	scheme, err := kvscheme.New()
	require.NoError(t, err)
	s := &kubemacpool.Server{Pool: macpool.New(macpool.Range{}), Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	wctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watched := make(chan error, 1)
	go func() { watched <- kubemacpool.Watch(wctx, cfg, scheme, ns, s) }()

	// Not ready while there is no VM kind: it refuses to admit.
	resp := s.Admit(review(t, admissionv1.Create, oneNIC))
	assert.False(t, resp.Allowed)
	select {
	case err := <-watched:
		t.Fatalf("Watch returned before the CRD existed: %v", err)
	default:
	}
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{vmCRD}})
	require.NoError(t, err)
	select {
	case err := <-watched:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("Watch did not start once the CRD was installed")
	}
	waitFor(t, "ready", func() error {
		if resp := s.Admit(review(t, admissionv1.Create, oneNIC)); !resp.Allowed {
			return errors.New(resp.Result.Message)
		}
		return nil
	})
}
