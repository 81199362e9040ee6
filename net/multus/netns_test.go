package multus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubevmm/kubevmm/api/nad/crd"
	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/net/multus"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// env is a node as the runtime sees it: the CNI bin directory (the
// plugins built from the module proxy and the meta-plugin built from
// here), the conf directory with the pod network, and the meta-plugin's
// conflist; and the API server it reads.
type env struct {
	c                    client.Client
	cni                  *libcni.CNIConfig
	list                 *libcni.NetworkConfigList
	podBridge, nadBridge string
	ipamDir              string
}

func setup(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, bridges")
	}
	nadCRD, err := crd.NetworkAttachmentDefinition()
	require.NoError(t, err)
	cfg, _ := apiserver.Start(t, func(e *envtest.Environment) { e.CRDs = append(e.CRDs, nadCRD) })
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	require.NoError(t, nadv1.AddToScheme(s))
	c, err := client.New(cfg, client.Options{Scheme: s})
	require.NoError(t, err)

	dir := t.TempDir()
	bin, conf := filepath.Join(dir, "bin"), filepath.Join(dir, "net.d")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.MkdirAll(conf, 0o755))
	plugins := buildPlugins(t)
	ents, err := os.ReadDir(plugins)
	require.NoError(t, err)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			require.NoError(t, os.Symlink(filepath.Join(plugins, e.Name()), filepath.Join(bin, e.Name())))
		}
	}
	out, err := exec.Command("go", "build", "-o", filepath.Join(bin, multus.PluginType), "../../cmd/kubevmm-multus").CombinedOutput()
	require.NoError(t, err, "building the meta-plugin: %s", out)

	id := os.Getpid() % 100000
	e := &env{c: c, podBridge: fmt.Sprintf("m12p%d", id), nadBridge: fmt.Sprintf("m12n%d", id), ipamDir: filepath.Join(dir, "ipam")}
	for _, br := range []string{e.podBridge, e.nadBridge} {
		t.Cleanup(func() {
			if l, err := netlink.LinkByName(br); err == nil {
				_ = netlink.LinkDel(l)
			}
		})
	}
	// The pod network: a bridge with host-local addresses, no gateway
	// (nothing on the host changes but the test's bridges).
	podNet := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"bridge","bridge":%q,
		"ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.0.0/24"}]],"dataDir":%q}},{"type":"loopback"}]}`, e.podBridge, e.ipamDir)
	require.NoError(t, os.WriteFile(filepath.Join(conf, "10-podnet.conflist"), []byte(podNet), 0o644))
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeKubeconfig(t, cfg, kubeconfig)
	b, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": multus.NetworkName, "plugins": []any{map[string]any{
		"type": multus.PluginType, "kubeconfig": kubeconfig, "clusterNetwork": filepath.Join(conf, "10-podnet.conflist"),
		"confDir": conf, "cniDir": filepath.Join(dir, "multus-cache"), "binDir": bin}}})
	require.NoError(t, err)
	e.list, err = libcni.NetworkConfFromBytes(b)
	require.NoError(t, err)
	// The runtime's own cache, as containerd keeps one.
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "runtime-cache"), nil)
	return e
}

// buildPlugins runs the script that builds the node's CNI plugins.
func buildPlugins(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("../../hack/cluster/cni-plugins.sh").Output()
	require.NoError(t, err, "hack/cluster/cni-plugins.sh")
	return strings.TrimSpace(string(out))
}

func writeKubeconfig(t *testing.T, cfg *rest.Config, path string) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
}

func (e *env) pod(t *testing.T, name, networks string) (*corev1.Pod, *libcni.RuntimeConf, *link.Netns) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		Annotations: map[string]string{nadv1.NetworksAnnotation: networks}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	require.NoError(t, e.c.Create(context.Background(), p))
	ns, err := link.NewNetns(fmt.Sprintf("m12-%s-%d", name, os.Getpid()%100000))
	require.NoError(t, err)
	t.Cleanup(func() { _ = ns.Delete() })
	rt := &libcni.RuntimeConf{ContainerID: "sandbox-" + name, NetNS: "/var/run/netns/" + ns.Name, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name},
			{"K8S_POD_INFRA_CONTAINER_ID", "sandbox-" + name}, {"K8S_POD_UID", string(p.UID)}}}
	return p, rt, ns
}

func (e *env) nad(t *testing.T, name, config string) {
	t.Helper()
	require.NoError(t, e.c.Create(context.Background(), &nadv1.NetworkAttachmentDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: nadv1.NetworkAttachmentDefinitionSpec{Config: config}}))
}

func links(t *testing.T, ns *link.Netns) map[string]netlink.Link {
	t.Helper()
	h, err := ns.Handle()
	require.NoError(t, err)
	defer h.Close()
	ls, err := h.LinkList()
	require.NoError(t, err)
	out := map[string]netlink.Link{}
	for _, l := range ls {
		out[l.Attrs().Name] = l
	}
	return out
}

func addrs(t *testing.T, ns *link.Netns, ifname string) []string {
	t.Helper()
	h, err := ns.Handle()
	require.NoError(t, err)
	defer h.Close()
	l, err := h.LinkByName(ifname)
	require.NoError(t, err)
	as, err := h.AddrList(l, netlink.FAMILY_V4)
	require.NoError(t, err)
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
	}
	return out
}

// TestSecondaryNetworkInNetns is a pod's whole life on a node: the
// runtime calls the meta-plugin (ADD), the pod gets eth0 from the pod
// network and net1 from a bridge NetworkAttachmentDefinition with the
// MAC and address it asked for, its network-status says so; CHECK
// passes; with the pod and the NetworkAttachmentDefinition deleted, DEL
// still removes both interfaces and frees the pod network's address.
func TestSecondaryNetworkInNetns(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.nad(t, "br", fmt.Sprintf(`{"cniVersion":"1.0.0","name":"br-net","plugins":[
		{"type":"bridge","bridge":%q,"ipam":{"type":"static"},"capabilities":{"ips":true}},
		{"type":"tuning","capabilities":{"mac":true}}]}`, e.nadBridge))
	pod, rt, ns := e.pod(t, "vm", `[{"name":"br","mac":"02:12:00:00:00:01","ips":["198.18.1.10/24"]}]`)

	r, err := e.cni.AddNetworkList(ctx, e.list, rt)
	require.NoError(t, err)
	res, err := types100.NewResultFromResult(r)
	require.NoError(t, err)
	require.Len(t, res.IPs, 1, "the pod network's result: %v", res)
	assert.Equal(t, "198.18.0.0/24", (&net.IPNet{IP: res.IPs[0].Address.IP.Mask(res.IPs[0].Address.Mask), Mask: res.IPs[0].Address.Mask}).String())

	ls := links(t, ns)
	require.Contains(t, ls, "eth0")
	require.Contains(t, ls, "net1")
	assert.Equal(t, "02:12:00:00:00:01", ls["net1"].Attrs().HardwareAddr.String())
	assert.Equal(t, []string{"198.18.1.10/24"}, addrs(t, ns, "net1"))
	assert.Equal(t, []string{res.IPs[0].Address.String()}, addrs(t, ns, "eth0"))

	require.NoError(t, e.c.Get(ctx, client.ObjectKeyFromObject(pod), pod))
	var status []nadv1.NetworkStatus
	require.NoError(t, json.Unmarshal([]byte(pod.Annotations[nadv1.NetworkStatusAnnotation]), &status))
	require.Len(t, status, 2)
	assert.Equal(t, nadv1.NetworkStatus{Name: "podnet", Interface: "eth0", IPs: []string{res.IPs[0].Address.IP.String()},
		Mac: ls["eth0"].Attrs().HardwareAddr.String(), Default: true}, status[0])
	assert.Equal(t, nadv1.NetworkStatus{Name: "default/br", Interface: "net1", IPs: []string{"198.18.1.10"}, Mac: "02:12:00:00:00:01"}, status[1])

	require.NoError(t, e.cni.CheckNetworkList(ctx, e.list, rt))

	// Cleanup must not depend on the cluster: both objects are gone.
	require.NoError(t, e.c.Delete(ctx, pod))
	require.NoError(t, e.c.Delete(ctx, &nadv1.NetworkAttachmentDefinition{ObjectMeta: metav1.ObjectMeta{Name: "br", Namespace: "default"}}))
	require.NoError(t, e.cni.DelNetworkList(ctx, e.list, rt))
	ls = links(t, ns)
	assert.NotContains(t, ls, "eth0")
	assert.NotContains(t, ls, "net1")
	leases, err := filepath.Glob(filepath.Join(e.ipamDir, "podnet", "198.*"))
	require.NoError(t, err)
	assert.Empty(t, leases, "the pod network's address is free again")
	require.NoError(t, e.cni.DelNetworkList(ctx, e.list, rt), "DEL twice is fine")
}

// TestAddRefused: what ADD refuses, it refuses before anything is
// attached, with an error that says why; the sandbox has no interface
// left behind.
func TestAddRefused(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.nad(t, "self", `{"cniVersion":"1.0.0","name":"loop","type":"kubevmm-multus"}`)
	for _, tc := range []struct{ name, networks, want string }{
		{"missing", "nope", "NetworkAttachmentDefinition default/nope not found"},
		{"badjson", `[{"name":"br"`, "not a JSON list of networks"},
		{"pathname", "../../etc/x", "name"},
		{"toomany", strings.Repeat("a,", nadv1.MaxNetworks) + "a", "at most 32"},
		{"podiface", "a@eth0", "interface eth0 is the pod network's"},
		{"recursion", "self", "would run the meta-plugin itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, rt, ns := e.pod(t, tc.name, tc.networks)
			_, err := e.cni.AddNetworkList(ctx, e.list, rt)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, links(t, ns), "eth0")
		})
	}
}
