package network_test

import (
	"crypto/x509"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/api/conditions"
	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
	"github.com/kubevmm/kubevmm/operator/network"
	"github.com/kubevmm/kubevmm/operator/network/install"
)

var opts = network.Options{Version: "v9", KubeMacPoolImage: "r/kubemacpool:v9", Config: install.Config{MultusImage: "r/kubevmm-multus:v9", BridgeMarkerImage: "r/bridge-marker:v9",
	PullPolicy: corev1.PullIfNotPresent, CNIBinDir: "/opt/cni/bin", CNIConfDir: "/etc/cni/net.d", ClusterNetwork: "10-bridge.conflist"}}

var (
	multusDS  = "DaemonSet " + install.Namespace + "/" + install.Multus
	markerDS  = "DaemonSet " + install.Namespace + "/" + install.BridgeMarker
	kmpDeploy = "Deployment " + install.Namespace + "/" + install.KubeMacPool
)

func cond(st networkaddonsv1.NetworkAddonsConfigStatus) string {
	out := ""
	for _, t := range []networkaddonsv1.ConditionType{networkaddonsv1.ConditionAvailable, networkaddonsv1.ConditionProgressing, networkaddonsv1.ConditionDegraded} {
		c := conditions.Find(st.Conditions, t)
		if c == nil {
			out += string(t) + "=none "
			continue
		}
		out += string(t) + "=" + string(c.Status) + " "
	}
	return out
}

func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, u := range objs {
		out = append(out, u.GetKind()+" "+u.GetName())
	}
	return out
}

func TestDecide(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	multusObjs := []string{"CustomResourceDefinition network-attachment-definitions.k8s.cni.cncf.io",
		"ServiceAccount kubevmm-multus", "ClusterRole kubevmm:kubevmm-multus", "ClusterRoleBinding kubevmm:kubevmm-multus", "DaemonSet kubevmm-multus"}
	kmpObjs := []string{"Secret kubemacpool-ca", "Secret kubemacpool-service", "ConfigMap kubemacpool-mac-range-config", "ServiceAccount kubemacpool", "ClusterRole kubevmm:kubemacpool", "ClusterRoleBinding kubevmm:kubemacpool",
		"Role kubevmm:kubemacpool", "RoleBinding kubevmm:kubemacpool", "RoleBinding kubevmm:kubemacpool-auth-reader", "Deployment " + install.KubeMacPool, "Service kubemacpool-service", "MutatingWebhookConfiguration kubemacpool-mutator",
		"NetworkPolicy " + install.KubeMacPool}
	markerObjs := []string{"ServiceAccount bridge-marker", "ClusterRole kubevmm:bridge-marker", "ClusterRoleBinding kubevmm:bridge-marker", "DaemonSet bridge-marker"}
	for _, tc := range []struct {
		name      string
		spec      networkaddonsv1.NetworkAddonsConfigSpec
		unknown   []string
		ready     []string
		apply     []string
		deleted   int
		conds     string
		message   string
		observed  string
		pullAlway bool
		configMap *[2]string
		wantRange string
	}{
		{name: "nothing requested: available, all removed", deleted: 8 + 13,
			conds: "Available=True Progressing=False Degraded=False ", observed: "v9"},
		{name: "multus deploying", spec: networkaddonsv1.NetworkAddonsConfigSpec{Multus: &networkaddonsv1.Multus{}},
			apply: multusObjs, deleted: 4 + 13, conds: "Available=False Progressing=True Degraded=False ", message: "not ready yet: " + multusDS},
		{name: "both ready", spec: networkaddonsv1.NetworkAddonsConfigSpec{Multus: &networkaddonsv1.Multus{}, LinuxBridge: &networkaddonsv1.LinuxBridge{}},
			ready: []string{multusDS, markerDS}, apply: append(append([]string{}, multusObjs...), markerObjs...), deleted: 13,
			conds: "Available=True Progressing=False Degraded=False ", observed: "v9"},
		{name: "linuxBridge waits for bridge-marker", spec: networkaddonsv1.NetworkAddonsConfigSpec{LinuxBridge: &networkaddonsv1.LinuxBridge{}, ImagePullPolicy: corev1.PullAlways},
			ready: []string{multusDS}, apply: markerObjs, deleted: 4 + 13, pullAlway: true,
			conds: "Available=False Progressing=True Degraded=False ", message: "not ready yet: " + markerDS},
		{name: "an unsupported key is refused by name, nothing touched", spec: networkaddonsv1.NetworkAddonsConfigSpec{Multus: &networkaddonsv1.Multus{}},
			unknown: []string{"ovs", "multus.delegates"},
			conds:   "Available=False Progressing=False Degraded=True ", message: "not supported by kubevmm: spec.ovs, spec.multus.delegates"},
		{name: "kubeMacPool with an interval that is not a duration", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{},
			SelfSignConfiguration: &networkaddonsv1.SelfSignConfiguration{CertOverlapInterval: "2 minutes"}},
			conds: "Available=False Progressing=False Degraded=True ", message: `spec.selfSignConfiguration.certOverlapInterval "2 minutes": time: unknown unit " minutes" in duration "2 minutes"`},
		{name: "kubeMacPool with an overlap not less than its interval", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{},
			SelfSignConfiguration: &networkaddonsv1.SelfSignConfiguration{CertRotateInterval: "10m", CertOverlapInterval: "10m"}},
			conds: "Available=False Progressing=False Degraded=True ", message: "spec.selfSignConfiguration.certOverlapInterval 10m0s: must be positive and less than certRotateInterval (10m0s)"},
		{name: "kubeMacPool with half a range", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{RangeStart: "02:00:00:00:00:00"}},
			conds: "Available=False Progressing=False Degraded=True ", message: "spec.kubeMacPool: the MAC range needs both its start and its end"},
		{name: "kubeMacPool with the spec's range", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{RangeStart: "02:aa:00:00:00:00", RangeEnd: "02:aa:00:00:ff:ff"}},
			configMap: &[2]string{"02:11:00:00:00:00", "02:11:ff:ff:ff:ff"}, apply: kmpObjs, deleted: 8, wantRange: "02:aa:00:00:00:00-02:aa:00:00:ff:ff",
			conds: "Available=False Progressing=True Degraded=False ", message: "not ready yet: " + kmpDeploy},
		{name: "kubeMacPool keeps its ConfigMap's range", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{}},
			configMap: &[2]string{"02:11:00:00:00:00", "02:11:ff:ff:ff:ff"}, ready: []string{kmpDeploy}, apply: kmpObjs, deleted: 8,
			wantRange: "02:11:00:00:00:00-02:11:ff:ff:ff:ff", conds: "Available=True Progressing=False Degraded=False ", observed: "v9"},
		{name: "kubeMacPool without a range takes the random one", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{}},
			apply: kmpObjs, deleted: 8, wantRange: "02:5e:17:00:00:00-02:5e:17:ff:ff:ff",
			conds: "Available=False Progressing=True Degraded=False ", message: "not ready yet: " + kmpDeploy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nac := &networkaddonsv1.NetworkAddonsConfig{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: "u1", Generation: 3}, Spec: tc.spec}
			o := network.Observed{Config: nac, UnknownFields: tc.unknown, Workloads: map[string]network.Workload{},
				KubeMacPoolRange: tc.configMap, RandomRange: &[2]string{"02:5e:17:00:00:00", "02:5e:17:ff:ff:ff"}}
			for _, k := range tc.ready {
				o.Workloads[k] = network.Workload{Ready: true}
			}
			d := network.Decide(o, opts, now)
			assert.Equal(t, tc.apply, names(d.Apply))
			assert.Len(t, d.Delete, tc.deleted)
			for _, obj := range d.Delete {
				assert.NotEqual(t, "CustomResourceDefinition", obj.GetObjectKind().GroupVersionKind().Kind, "the NAD CRD stays: users' definitions live in it")
			}
			assert.Equal(t, tc.conds, cond(d.Status))
			if tc.message != "" {
				assert.Equal(t, tc.message, conditions.Find(d.Status.Conditions, networkaddonsv1.ConditionAvailable).Message)
			}
			assert.Equal(t, tc.observed, d.Status.ObservedVersion)
			assert.Equal(t, "v9", d.Status.OperatorVersion)
			assert.Equal(t, int64(3), d.Status.ObservedGeneration)
			for _, u := range d.Apply {
				refs := u.GetOwnerReferences()
				if u.GetKind() == "CustomResourceDefinition" {
					assert.Empty(t, refs, "the NAD CRD is not owned")
					continue
				}
				require.Len(t, refs, 1, "%s %s is owned", u.GetKind(), u.GetName())
				assert.Equal(t, "NetworkAddonsConfig", refs[0].Kind)
				assert.Equal(t, "u1", string(refs[0].UID))
				if u.GetKind() == "DaemonSet" {
					ctrs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
					want := corev1.PullIfNotPresent
					if tc.pullAlway {
						want = corev1.PullAlways
					}
					assert.Equal(t, string(want), ctrs[0].(map[string]any)["imagePullPolicy"])
				}
			}
			var imgs []string
			for _, c := range d.Status.Containers {
				imgs = append(imgs, c.ParentName+"="+c.Image)
			}
			var want []string
			for _, a := range tc.apply {
				switch a {
				case "DaemonSet kubevmm-multus":
					want = append(want, "kubevmm-multus=r/kubevmm-multus:v9")
				case "DaemonSet bridge-marker":
					want = append(want, "bridge-marker=r/bridge-marker:v9")
				case "Deployment " + install.KubeMacPool:
					want = append(want, install.KubeMacPool+"=r/kubemacpool:v9")
				}
			}
			assert.Equal(t, want, imgs, "status.containers")
			for _, u := range d.Apply {
				if u.GetKind() == "ConfigMap" {
					data, _, _ := unstructured.NestedStringMap(u.Object, "data")
					assert.Equal(t, tc.wantRange, data["RANGE_START"]+"-"+data["RANGE_END"])
				}
			}
		})
	}
}

// secretData is the data of the applied Secret name, decoded.
func secretData(t *testing.T, objs []*unstructured.Unstructured, name string) map[string][]byte {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == "Secret" && u.GetName() == name {
			m, _, _ := unstructured.NestedStringMap(u.Object, "data")
			out := map[string][]byte{}
			for k, v := range m {
				b, err := base64.StdEncoding.DecodeString(v)
				require.NoError(t, err)
				out[k] = b
			}
			return out
		}
	}
	t.Fatalf("no Secret %s applied", name)
	return nil
}

// kubemacpool's certificate is the operator's: made with upstream's
// default lifetimes, verified for kubemacpool's Service by the bundle
// the webhook trusts, kept while valid, remade at once (its previous CA
// staying in the bundle) when selfSignConfiguration is shortened.
func TestDecideKubeMacPoolCertificates(t *testing.T) {
	now := metav1.Now()
	nac := &networkaddonsv1.NetworkAddonsConfig{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: "u1"},
		Spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{RangeStart: "02:aa:00:00:00:00", RangeEnd: "02:aa:00:00:ff:ff"}}}
	o := network.Observed{Config: nac, Workloads: map[string]network.Workload{}}
	d := network.Decide(o, opts, now)
	require.Len(t, d.Renewed, 2, "the CA and the leaf made")
	assert.WithinDuration(t, now.Add(24*time.Hour-8*time.Hour), d.CertsDue, time.Minute, "due certOverlapInterval before expiry")
	ca, leaf := secretData(t, d.Apply, network.KubeMacPoolCASecret), secretData(t, d.Apply, install.KubeMacPoolSecret)
	roots, err := certs.ParseBundle(leaf[network.CAKey])
	require.NoError(t, err)
	require.Len(t, roots, 1)
	pool := x509.NewCertPool()
	pool.AddCert(roots[0])
	cert, _, err := certs.Parse(certs.KeyPair{Cert: leaf["tls.crt"], Key: leaf["tls.key"]})
	require.NoError(t, err)
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "kubemacpool-service.cluster-network-addons.svc"})
	require.NoError(t, err)
	for _, u := range d.Apply {
		if u.GetKind() == "MutatingWebhookConfiguration" {
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			bundle, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle")
			assert.Equal(t, base64.StdEncoding.EncodeToString(leaf[network.CAKey]), bundle, "the webhook trusts the bundle")
		}
	}

	o.KubeMacPoolCerts = certs.Stored{CA: certs.KeyPair{Cert: ca["tls.crt"], Key: ca["tls.key"]}, Bundle: leaf[network.CAKey],
		Leaves: map[string]certs.KeyPair{install.KubeMacPoolSecret: {Cert: leaf["tls.crt"], Key: leaf["tls.key"]}}}
	d = network.Decide(o, opts, now)
	assert.Empty(t, d.Renewed, "stored and valid: kept")
	assert.Equal(t, leaf["tls.crt"], secretData(t, d.Apply, install.KubeMacPoolSecret)["tls.crt"])

	nac.Spec.SelfSignConfiguration = &networkaddonsv1.SelfSignConfiguration{CARotateInterval: "10m", CAOverlapInterval: "5m",
		CertRotateInterval: "5m", CertOverlapInterval: "2m"}
	d = network.Decide(o, opts, now)
	assert.Len(t, d.Renewed, 2, "both valid longer than now allowed: %v", d.Renewed)
	leaf2 := secretData(t, d.Apply, install.KubeMacPoolSecret)
	cert2, _, err := certs.Parse(certs.KeyPair{Cert: leaf2["tls.crt"], Key: leaf2["tls.key"]})
	require.NoError(t, err)
	assert.WithinDuration(t, now.Add(5*time.Minute), cert2.NotAfter, time.Second)
	roots, err = certs.ParseBundle(leaf2[network.CAKey])
	require.NoError(t, err)
	assert.Len(t, roots, 2, "the previous CA stays in the bundle")
}
