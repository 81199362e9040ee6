package network_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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
		c := networkaddonsv1.FindCondition(st.Conditions, t)
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
	kmpObjs := []string{"ConfigMap kubemacpool-mac-range-config", "ServiceAccount kubemacpool", "ClusterRole kubevmm:kubemacpool", "ClusterRoleBinding kubevmm:kubemacpool",
		"Role kubevmm:kubemacpool", "RoleBinding kubevmm:kubemacpool", "Deployment " + install.KubeMacPool, "Service kubemacpool-service", "MutatingWebhookConfiguration kubemacpool-mutator"}
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
		ca        bool
		configMap *[2]string
		wantRange string
	}{
		{name: "nothing requested: available, all removed", deleted: 8 + 9,
			conds: "Available=True Progressing=False Degraded=False ", observed: "v9"},
		{name: "multus deploying", spec: networkaddonsv1.NetworkAddonsConfigSpec{Multus: &networkaddonsv1.Multus{}},
			apply: multusObjs, deleted: 4 + 9, conds: "Available=False Progressing=True Degraded=False ", message: "not ready yet: " + multusDS},
		{name: "both ready", spec: networkaddonsv1.NetworkAddonsConfigSpec{Multus: &networkaddonsv1.Multus{}, LinuxBridge: &networkaddonsv1.LinuxBridge{}},
			ready: []string{multusDS, markerDS}, apply: append(append([]string{}, multusObjs...), markerObjs...), deleted: 9,
			conds: "Available=True Progressing=False Degraded=False ", observed: "v9"},
		{name: "linuxBridge waits for bridge-marker", spec: networkaddonsv1.NetworkAddonsConfigSpec{LinuxBridge: &networkaddonsv1.LinuxBridge{}, ImagePullPolicy: corev1.PullAlways},
			ready: []string{multusDS}, apply: markerObjs, deleted: 4 + 9, pullAlway: true,
			conds: "Available=False Progressing=True Degraded=False ", message: "not ready yet: " + markerDS},
		{name: "an unsupported key is refused by name, nothing touched", spec: networkaddonsv1.NetworkAddonsConfigSpec{Multus: &networkaddonsv1.Multus{}},
			unknown: []string{"ovs", "multus.delegates"},
			conds:   "Available=False Progressing=False Degraded=True ", message: "not supported by kubevmm: spec.ovs, spec.multus.delegates"},
		{name: "kubeMacPool without its CA", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{}},
			conds: "Available=False Progressing=False Degraded=True ", message: "spec.kubeMacPool: no ca.crt in Secret cluster-network-addons/kubemacpool-service: " +
				"kubemacpool's serving certificate is made outside the operator for now"},
		{name: "kubeMacPool with half a range", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{RangeStart: "02:00:00:00:00:00"}},
			ca: true, conds: "Available=False Progressing=False Degraded=True ", message: "spec.kubeMacPool: the MAC range needs both its start and its end"},
		{name: "kubeMacPool with the spec's range", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{RangeStart: "02:aa:00:00:00:00", RangeEnd: "02:aa:00:00:ff:ff"}},
			ca: true, configMap: &[2]string{"02:11:00:00:00:00", "02:11:ff:ff:ff:ff"}, apply: kmpObjs, deleted: 8, wantRange: "02:aa:00:00:00:00-02:aa:00:00:ff:ff",
			conds: "Available=False Progressing=True Degraded=False ", message: "not ready yet: " + kmpDeploy},
		{name: "kubeMacPool keeps its ConfigMap's range", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{}},
			ca: true, configMap: &[2]string{"02:11:00:00:00:00", "02:11:ff:ff:ff:ff"}, ready: []string{kmpDeploy}, apply: kmpObjs, deleted: 8,
			wantRange: "02:11:00:00:00:00-02:11:ff:ff:ff:ff", conds: "Available=True Progressing=False Degraded=False ", observed: "v9"},
		{name: "kubeMacPool without a range takes the random one", spec: networkaddonsv1.NetworkAddonsConfigSpec{KubeMacPool: &networkaddonsv1.KubeMacPool{}},
			ca: true, apply: kmpObjs, deleted: 8, wantRange: "02:5e:17:00:00:00-02:5e:17:ff:ff:ff",
			conds: "Available=False Progressing=True Degraded=False ", message: "not ready yet: " + kmpDeploy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nac := &networkaddonsv1.NetworkAddonsConfig{ObjectMeta: metav1.ObjectMeta{Name: "cluster", UID: "u1", Generation: 3}, Spec: tc.spec}
			o := network.Observed{Config: nac, UnknownFields: tc.unknown, Workloads: map[string]network.Workload{},
				KubeMacPoolRange: tc.configMap, RandomRange: &[2]string{"02:5e:17:00:00:00", "02:5e:17:ff:ff:ff"}}
			if tc.ca {
				o.KubeMacPoolCA = []byte("a CA")
			}
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
				assert.Equal(t, tc.message, networkaddonsv1.FindCondition(d.Status.Conditions, networkaddonsv1.ConditionAvailable).Message)
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
