package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kubevmm/kubevmm/api/clusterconfig"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/test/apiserver"
	"github.com/kubevmm/kubevmm/virtapi"
	"github.com/kubevmm/kubevmm/vmm/migration/tlstest"
)

// virtctl's commands against the real path they take in a cluster: a
// kube-apiserver (envtest) with the aggregation layer on, fronting the
// subresources.kubevirt.io APIService that the real virt-api serves in
// this process. No controller runs: the test checks what virt-api writes
// for virt-controller to act on.

// hostIP is an address of this machine the API server may route to (an
// Endpoints address may not be a loopback one).
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address for virt-api's endpoint")
	return ""
}

// hotplugGate is the cluster's HotplugVolumes feature gate (the KubeVirt
// CR's) as virt-api sees it; the hotplug subtest toggles it.
var hotplugGate atomic.Bool

// cluster starts the API server and virt-api behind it, and returns a
// kubeconfig for virtctl and a client.
func cluster(t *testing.T) (string, client.Client) {
	t.Helper()
	ip := hostIP(t)
	ca := tlstest.NewCA(t, "kubevmm-test-ca")
	// The aggregation layer as apiserver.Start sets it up.
	cfg, c := apiserver.Start(t, func(env *envtest.Environment) {
		// To the endpoint's address: there is no kube-proxy for the
		// service's cluster IP.
		env.ControlPlane.GetAPIServer().Configure().Set("enable-aggregator-routing", "true")
	})
	ctx := context.Background()

	// virt-api, as cmd/virt-api runs it, on a certificate of our CA for
	// the service's name, which the aggregator checks.
	proxy, err := frontproxy.Load(ctx, c)
	require.NoError(t, err)
	caPEM, err := os.ReadFile(ca.File)
	require.NoError(t, err)
	serving := ca.Issue(t, "virt-api.kubevirt.svc")
	cert, err := tls.LoadX509KeyPair(serving.Cert, serving.Key)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	s := &virtapi.Server{Client: c, Namespace: "kubevirt", Proxy: proxy, Callers: proxy,
		Log: logr.Discard()}
	hotplugGate.Store(true)
	s.Config = func() (clusterconfig.ClusterConfig, error) {
		var c clusterconfig.ClusterConfig
		if hotplugGate.Load() {
			c.DeveloperConfiguration.FeatureGates = []string{clusterconfig.FeatureGateHotplugVolumes}
		}
		return c, nil
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert}}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	// Registered as in a cluster: a service without a selector whose
	// endpoint is virt-api here, and the APIService naming it.
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubevirt"}}))
	require.NoError(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "virt-api", Namespace: "kubevirt"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(port)}}}}))
	require.NoError(t, c.Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "virt-api", Namespace: "kubevirt"}, //nolint:staticcheck // what the aggregator may still read
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: ip}}, Ports: []corev1.EndpointPort{{Name: "https", Port: port}}}}})) //nolint:staticcheck // as above
	require.NoError(t, c.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "virt-api", Namespace: "kubevirt", Labels: map[string]string{discoveryv1.LabelServiceName: "virt-api"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port)}},
	}))
	apisvc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1." + v1.SubresourceGroupName},
		"spec": map[string]any{
			"group": v1.SubresourceGroupName, "version": "v1",
			"service":  map[string]any{"namespace": "kubevirt", "name": "virt-api", "port": int64(443)},
			"caBundle": caPEM, "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		},
	}}
	require.NoError(t, c.Create(ctx, apisvc))
	// The aggregator proxies only once it has found virt-api available;
	// the deadline only turns a hang into a failure.
	require.Eventually(t, func() bool {
		if err := c.Get(ctx, client.ObjectKeyFromObject(apisvc), apisvc); err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(apisvc.Object, "status", "conditions")
		for _, cd := range conds {
			if m, ok := cd.(map[string]any); ok && m["type"] == "Available" && m["status"] == "True" {
				return true
			}
		}
		return false
	}, 3*time.Minute, 100*time.Millisecond, "the APIService never became available")
	// And the aggregator's proxy has taken that in (its own informer may
	// lag the status just read): virt-api's version comes back through
	// it.
	hc, err := rest.HTTPClientFor(cfg)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + "/apis/" + v1.SubresourceGroupVersion.String() + "/version")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, time.Minute, 100*time.Millisecond, "the aggregator never proxied to virt-api")

	return kubeconfig(t, cfg), c
}

// kubeconfig writes the admin config the way a user's kubeconfig holds it.
func kubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

func TestVirtctlAgainstVirtAPI(t *testing.T) {
	kc, c := cluster(t)
	ctx := context.Background()
	virtctl := func(args ...string) (int, string, error) {
		var out bytes.Buffer
		code, err := run(append([]string{"--kubeconfig", kc}, args...), os.Stdin, &out)
		return code, out.String(), err
	}
	g := resource.MustParse("128Mi")
	tmpl := &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{Domain: v1.DomainSpec{Memory: &v1.Memory{Guest: &g}}}}
	newVM := func(name string, rs v1.VirtualMachineRunStrategy) {
		require.NoError(t, c.Create(ctx, &v1.VirtualMachine{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: v1.VirtualMachineSpec{RunStrategy: ptr.To(rs), Template: tmpl}}))
	}
	get := func(name string) *v1.VirtualMachine {
		vm := &v1.VirtualMachine{}
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, vm))
		return vm
	}

	t.Run("version and healthz", func(t *testing.T) {
		// KubeVirt's format: version.Info printed with %#v; a semver.
		info := regexp.MustCompile(`version\.Info\{GitVersion:"v\d+\.\d+\.\d+[^"]*", GitCommit:"[^"]*", GitTreeState:"[^"]*", BuildDate:"[^"]*", GoVersion:"go[^"]+", Compiler:"gc", Platform:"linux/amd64"\}`)
		code, out, err := virtctl("version")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Regexp(t, `^Client Version: `+info.String()+"\nServer Version: "+info.String()+"\n$", out)

		code, out, err = virtctl("version", "-c")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Regexp(t, `^Client Version: `+info.String()+"\n$", out)

		ac, err := newAPIClient("", kc)
		require.NoError(t, err)
		b, err := ac.get(ctx, "/apis/"+v1.SubresourceGroupVersion.String()+"/healthz")
		require.NoError(t, err)
		assert.JSONEq(t, `{"apiserver": {"connectivity": "ok"}}`, string(b))
	})

	t.Run("stop and start flip the run strategy", func(t *testing.T) {
		newVM("always", v1.RunStrategyAlways)
		code, out, err := virtctl("stop", "always")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Equal(t, "VM always was scheduled to stop\n", out)
		assert.Equal(t, v1.RunStrategyHalted, *get("always").Spec.RunStrategy)

		code, _, err = virtctl("stop", "always")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "stop always: VM is not running")

		code, out, err = virtctl("-n", "default", "start", "always")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Equal(t, "VM always was scheduled to start\n", out)
		assert.Equal(t, v1.RunStrategyAlways, *get("always").Spec.RunStrategy)

		code, _, err = virtctl("start", "always")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "start always: Always does not support manual start requests")
	})

	t.Run("manual VM: start, restart, migrate", func(t *testing.T) {
		newVM("manual", v1.RunStrategyManual)
		code, _, err := virtctl("restart", "manual")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "restart manual: VM is not running")

		code, _, err = virtctl("start", "manual")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		reqs := get("manual").Status.StateChangeRequests
		require.Len(t, reqs, 1)
		assert.Equal(t, v1.StartRequest, reqs[0].Action)

		// What virt-controller would do next: drop the request, create
		// the VMI, which then runs.
		vm := get("manual")
		vm.Status.StateChangeRequests = nil
		require.NoError(t, c.Status().Update(ctx, vm))
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "manual", Namespace: "default"}, Spec: tmpl.Spec}
		require.NoError(t, c.Create(ctx, vmi))

		code, _, err = virtctl("migrate", "manual")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "migrate manual: VMI is not running")
		code, _, err = virtctl("pause", "vmi", "manual")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "pause manual: VMI is not running")

		vmi.Status.Phase, vmi.Status.NodeName = v1.Running, "node01"
		require.NoError(t, c.Status().Update(ctx, vmi))

		code, out, err := virtctl("restart", "manual")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Equal(t, "VM manual was scheduled to restart\n", out)
		reqs = get("manual").Status.StateChangeRequests
		require.Len(t, reqs, 2)
		assert.Equal(t, v1.StopRequest, reqs[0].Action)
		assert.Equal(t, vmi.UID, *reqs[0].UID)
		assert.Equal(t, v1.StartRequest, reqs[1].Action)

		code, out, err = virtctl("migrate", "manual")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Equal(t, "VM manual was scheduled to migrate\n", out)
		migs := &v1.VirtualMachineInstanceMigrationList{}
		require.NoError(t, c.List(ctx, migs, client.InNamespace("default")))
		require.Len(t, migs.Items, 1)
		assert.Equal(t, "manual", migs.Items[0].Spec.VMIName)

		// Pausing needs the VMI's virt-handler, and none runs here.
		code, _, err = virtctl("unpause", "vm", "manual")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "unpause manual: VMI is not paused")
		code, _, err = virtctl("pause", "vm", "manual")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "pause manual: no running virt-handler on node node01")

		// The guest agent's subresources: refused as KubeVirt refuses
		// them while no agent is connected; with one, they need the
		// VMI's virt-handler too.
		for _, cmd := range []string{"guestosinfo", "userlist", "fslist"} {
			code, out, err = virtctl(cmd, "manual")
			assert.Equal(t, 1, code)
			assert.Empty(t, out)
			assert.EqualError(t, err, cmd+" manual: VMI does not have guest agent connected")
		}
		vmi.Status.Conditions = v1.SetVMICondition(vmi.Status.Conditions, v1.VirtualMachineInstanceCondition{
			Type: v1.VirtualMachineInstanceAgentConnected, Status: corev1.ConditionTrue}, metav1.Now())
		require.NoError(t, c.Status().Update(ctx, vmi))
		code, _, err = virtctl("guestosinfo", "manual")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "guestosinfo manual: no running virt-handler on node node01")
	})

	t.Run("addvolume, removevolume", func(t *testing.T) {
		require.NoError(t, c.Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "disk1", Namespace: "default"},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}))
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "hp", Namespace: "default"}, Spec: tmpl.Spec}
		require.NoError(t, c.Create(ctx, vmi))
		getVMI := func() *v1.VirtualMachineInstance {
			n := &v1.VirtualMachineInstance{}
			require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "hp"}, n))
			return n
		}
		code, _, err := virtctl("addvolume", "hp", "--volume-name=disk1")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "addvolume hp: VMI is not running")
		vmi.Status.Phase = v1.Running
		require.NoError(t, c.Status().Update(ctx, vmi))

		// Without KubeVirt's HotplugVolumes gate, both are refused as
		// KubeVirt refuses them, and the VMI is left as it was.
		hotplugGate.Store(false)
		code, _, err = virtctl("addvolume", "hp", "--volume-name=disk1")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "addvolume hp: Unable to Add Volume because HotplugVolumes feature gate is not enabled.")
		code, _, err = virtctl("removevolume", "hp", "--volume-name=disk1")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "removevolume hp: Unable to Remove Volume because HotplugVolumes feature gate is not enabled.")
		assert.Equal(t, tmpl.Spec.Volumes, getVMI().Spec.Volumes)
		hotplugGate.Store(true)

		code, out, err := virtctl("addvolume", "hp", "--volume-name=disk1", "--dry-run")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Equal(t, "Successfully submitted add volume request to VMI hp for volume disk1\n", out)
		assert.Equal(t, tmpl.Spec.Volumes, getVMI().Spec.Volumes, "a dry run changes nothing")

		code, _, err = virtctl("addvolume", "hp", "--volume-name=disk1")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		spec := getVMI().Spec
		assert.Equal(t, []v1.Volume{{Name: "disk1", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "disk1", Hotpluggable: true}}}}, spec.Volumes)
		assert.Equal(t, []v1.Disk{{Name: "disk1", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}}}, spec.Domain.Devices.Disks)

		for _, tc := range []struct {
			args []string
			code int
			err  string
		}{
			{[]string{"addvolume", "hp", "--volume-name=disk1"}, 1, `addvolume hp: name: volume "disk1": a volume or disk of that name exists`},
			{[]string{"addvolume", "hp", "--volume-name=nope"}, 1, "addvolume hp: volumeSource.persistentVolumeClaim.claimName: PersistentVolumeClaim default/nope not found"},
			{[]string{"addvolume", "hp", "--volume-name=Bad_Name"}, 1, "addvolume hp: AddVolumeOptions: "},
			{[]string{"addvolume", "absent", "--volume-name=disk1"}, 1, `addvolume absent: virtualmachineinstances.kubevirt.io "absent" not found`},
			{[]string{"addvolume", "hp", "--volume-name=disk1", "--bus=virtio"}, 2, "addvolume: --bus=virtio is not supported by kubevmm's virtctl: hot-plugged disks are on the scsi bus"},
			{[]string{"addvolume", "hp", "--volume-name=disk1", "--serial=s1"}, 2, "addvolume: --serial is not supported by kubevmm's virtctl"},
			{[]string{"addvolume", "hp"}, 2, "addvolume: --volume-name is required"},
			{[]string{"removevolume", "hp", "--volume-name=root"}, 1, `removevolume hp: name: volume "root": no volume of that name`},
		} {
			code, out, err := virtctl(tc.args...)
			assert.Equal(t, tc.code, code, "%v", tc.args)
			assert.Empty(t, out, "%v", tc.args)
			require.Error(t, err, "%v", tc.args)
			assert.Contains(t, err.Error(), tc.err, "%v", tc.args)
		}

		code, _, err = virtctl("removevolume", "hp", "--volume-name=disk1")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		spec = getVMI().Spec
		assert.Empty(t, spec.Volumes)
		assert.Empty(t, spec.Domain.Devices.Disks)

		// --persist: through the VM, a request for virt-controller.
		newVM("hpvm", v1.RunStrategyAlways)
		code, out, err = virtctl("addvolume", "hpvm", "--volume-name=disk1", "--persist")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Equal(t, "Successfully submitted add volume request to VM hpvm for volume disk1\n", out)
		reqs := get("hpvm").Status.VolumeRequests
		require.Len(t, reqs, 1)
		require.NotNil(t, reqs[0].AddVolumeOptions)
		assert.Equal(t, "disk1", reqs[0].AddVolumeOptions.VolumeSource.PersistentVolumeClaim.ClaimName)
		code, _, err = virtctl("removevolume", "hpvm", "--volume-name=disk1", "--persist")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, `removevolume hpvm: name: a request for volume "disk1" is pending; try again`)
	})

	t.Run("reset, soft-reboot, port-forward", func(t *testing.T) {
		vmi := &v1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "guest", Namespace: "default"}, Spec: tmpl.Spec}
		require.NoError(t, c.Create(ctx, vmi))
		for _, tc := range []struct {
			args []string
			err  string
		}{
			{[]string{"reset", "guest"}, "reset guest: VMI is not running"},
			{[]string{"soft-reboot", "guest"}, "soft-reboot guest: VMI is not running"},
			{[]string{"port-forward", "--stdio", "vmi/guest", "22"}, "port-forward guest: VMI is not running"},
			{[]string{"reset", "nope"}, `reset nope: virtualmachineinstances.kubevirt.io "nope" not found`},
			{[]string{"port-forward", "--stdio", "vm/nope", "22"}, `port-forward nope: virtualmachineinstances.kubevirt.io "nope" not found`},
		} {
			code, out, err := virtctl(tc.args...)
			assert.Equal(t, 1, code, "%v", tc.args)
			assert.Empty(t, out, "%v", tc.args)
			assert.EqualError(t, err, tc.err, "%v", tc.args)
		}

		// Running: the node's virt-handler does the work, and none runs
		// here; every route gets that far, the VM's port-forward too.
		vmi.Status.Phase, vmi.Status.NodeName = v1.Running, "node01"
		require.NoError(t, c.Status().Update(ctx, vmi))
		for _, args := range [][]string{
			{"reset", "guest"}, {"soft-reboot", "guest"},
			{"port-forward", "--stdio", "vmi/guest", "22"}, {"port-forward", "--stdio", "vm/guest.default", "tcp/22"},
			{"port-forward", "--stdio", "virtualmachineinstance/guest/default", "2222:22"},
		} {
			code, _, err := virtctl(args...)
			assert.Equal(t, 1, code, "%v", args)
			require.Error(t, err, "%v", args)
			assert.Contains(t, err.Error(), "no running virt-handler on node node01", "%v", args)
		}

		// A paused guest cannot answer the power button; a reset works.
		vmi.Status.Conditions = []v1.VirtualMachineInstanceCondition{{Type: v1.VirtualMachineInstancePaused, Status: corev1.ConditionTrue}}
		require.NoError(t, c.Status().Update(ctx, vmi))
		code, _, err := virtctl("soft-reboot", "guest")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "soft-reboot guest: VMI is paused")
		code, _, err = virtctl("port-forward", "--stdio", "vmi/guest", "22")
		assert.Equal(t, 1, code)
		assert.EqualError(t, err, "port-forward guest: VMI is paused")
		_, _, err = virtctl("reset", "guest")
		assert.ErrorContains(t, err, "no running virt-handler on node node01")
	})

	t.Run("unknown VM and wrong namespace", func(t *testing.T) {
		for _, args := range [][]string{
			{"start", "nope"},
			{"-n", "other", "stop", "always"},
			{"--namespace", "other", "migrate", "manual"},
			{"pause", "vmi", "nope"},
		} {
			code, out, err := virtctl(args...)
			assert.Equal(t, 1, code, "%v", args)
			assert.Empty(t, out, "%v", args)
			require.Error(t, err, "%v", args)
			assert.Contains(t, err.Error(), "not found", "%v", args)
		}
		// Nothing was changed by them.
		assert.Equal(t, v1.RunStrategyAlways, *get("always").Spec.RunStrategy)
	})

	t.Run("expand", func(t *testing.T) {
		code, out, err := virtctl("expand", "--vm", "always")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		vm := &v1.VirtualMachine{}
		require.NoError(t, yaml.Unmarshal([]byte(out), vm))
		assert.Equal(t, "always", vm.Name)
		assert.Equal(t, "128Mi", vm.Spec.Template.Spec.Domain.Memory.Guest.String())

		file := filepath.Join(t.TempDir(), "vm.yaml")
		require.NoError(t, os.WriteFile(file, []byte("apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: fromfile\n"+
			"spec:\n  template:\n    spec:\n      domain:\n        memory:\n          guest: 64Mi\n"), 0o600))
		code, out, err = virtctl("expand", "-f", file, "-o", "json")
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		vm = &v1.VirtualMachine{}
		require.NoError(t, json.Unmarshal([]byte(out), vm))
		assert.Equal(t, "fromfile", vm.Name)
		assert.Equal(t, "default", vm.Namespace)

		code, _, err = virtctl("expand", "--vm", "nope")
		assert.Equal(t, 1, code)
		assert.ErrorContains(t, err, `expand: virtualmachines.kubevirt.io "nope" not found`)
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			err  string
		}{
			{[]string{"start"}, "start: want VM"},
			{[]string{"stop", "a", "b"}, "stop: want VM"},
			{[]string{"pause", "always"}, "pause: want vm|vmi NAME"},
			{[]string{"pause", "pod", "always"}, `pause: "pod" is not vm or vmi`},
			{[]string{"reboot", "always"}, `unknown command "reboot" for "virtctl"; did you mean soft-reboot?`},
			{[]string{"softreboot", "always"}, `unknown command "softreboot" for "virtctl"; did you mean soft-reboot?`},
			{[]string{"reset"}, "reset: want VMI"},
			{[]string{"soft-reboot", "a", "b"}, "soft-reboot: want VMI"},
			{[]string{"version", "extra"}, "version: want no argument"},
			{[]string{"start", "--paused", "always"}, "start: --paused is not supported by kubevmm's virtctl"},
			{[]string{"stop", "always", "--grace-period=0", "--force"}, "stop: --force is not supported by kubevmm's virtctl"},
			{[]string{"migrate", "always", "--addedNodeSelector", "zone=a"}, "migrate: --addedNodeSelector is not supported by kubevmm's virtctl"},
			{[]string{"pause", "vm", "always", "--dry-run"}, "pause: --dry-run is not supported by kubevmm's virtctl"},
			{[]string{"stop", "--bogus", "always"}, "stop: unknown flag: --bogus"},
			{[]string{"expand"}, "expand: want one of --vm NAME and --file FILE"},
			{[]string{"expand", "--vm", "a", "-o", "wide"}, `expand: --output "wide": want yaml or json`},
			{[]string{"port-forward", "vmi/x"}, "port-forward: want [type/]NAME[/NAMESPACE] and one or more [tcp/]LOCAL[:REMOTE]"},
			{[]string{"port-forward", "pod/x", "22"}, `port-forward: target "pod/x": unsupported resource type "pod" (vm or vmi)`},
			{[]string{"port-forward", "vmi/x/", "22"}, `port-forward: target "vmi/x/": the namespace is empty`},
			{[]string{"port-forward", "vmi/", "22"}, `port-forward: target "vmi/": the name is empty`},
			{[]string{"port-forward", "vmi/x", "udp/53"}, `port-forward: port "udp/53": kubevmm forwards tcp only`},
			{[]string{"port-forward", "vmi/x", "80:http"}, `port-forward: port "80:http": "http" is not a port number`},
			{[]string{"port-forward", "vmi/x", "70000"}, `port-forward: port "70000": "70000" is not a port number`},
			{[]string{"port-forward", "vmi/x", "8080:0"}, `port-forward: port "8080:0": the guest's port cannot be 0`},
			{[]string{"port-forward", "--stdio", "vmi/x", "22", "23"}, "port-forward: --stdio forwards one port"},
			{[]string{"guestosinfo"}, "guestosinfo: want VMI"},
			{[]string{"fslist", "a", "b"}, "fslist: want VMI"},
		} {
			code, _, err := virtctl(tc.args...)
			assert.Equal(t, 2, code, "%v", tc.args)
			assert.EqualError(t, err, tc.err, "%v", tc.args)
		}
	})
}

// A broken kubeconfig is an error naming it.
func TestVirtctlBadKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte("not: [a kubeconfig"), 0o600))
	code, err := run([]string{"--kubeconfig", path, "start", "vm"}, os.Stdin, &bytes.Buffer{})
	assert.Equal(t, 1, code)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path, "names the file")
}
