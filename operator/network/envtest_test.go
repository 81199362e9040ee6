package network_test

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/api/conditions"
	"github.com/kubevmm/kubevmm/api/networkaddons/crd"
	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/operator/network"
	"github.com/kubevmm/kubevmm/operator/network/install"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The operator against a real API server (no kubelet: the test reports
// the DaemonSets ready itself), running as its service account with the
// RBAC it is deployed with: each key deploys its component, owned; edits
// and deletions are reverted; a removed key removes its component; an
// unsupported key is refused by name; another name is refused at
// admission; v1alpha1 is served with the same schema.
func TestNetworkAddonsEnvtest(t *testing.T) {
	nacCRD, err := crd.NetworkAddonsConfig()
	require.NoError(t, err)
	cfg, k8s := apiserver.Start(t, apiserver.WithCRDs(nacCRD))
	ctx := context.Background()
	s := k8s.Scheme()
	require.NoError(t, apiextensionsv1.AddToScheme(s))
	require.NoError(t, networkaddonsv1.AddToScheme(s))

	ops, err := network.Operator(network.OperatorConfig{ImageRegistry: "localhost/kubevmm", ImageTag: "envtest", PullPolicy: corev1.PullNever,
		CNIBinDir: "/opt/cni/bin", CNIConfDir: "/etc/cni/net.d", ClusterNetwork: "10-bridge.conflist"})
	require.NoError(t, err)
	for _, o := range ops {
		if _, ok := o.(*apiextensionsv1.CustomResourceDefinition); !ok { // installed by Start
			require.NoError(t, k8s.Create(ctx, o))
		}
	}
	opCfg := apiserver.AsServiceAccount(cfg, install.Namespace, network.OperatorName)
	mgr := apiserver.NewManager(t, opCfg, ctrl.Options{Scheme: s, Cache: kit.OwnNamespaceCache(install.Namespace)})
	r := &network.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: network.Options{Version: "envtest",
		KubeMacPoolImage: "localhost/kubevmm/kubemacpool:envtest",
		Config: install.Config{MultusImage: "localhost/kubevmm/kubevmm-multus:envtest", BridgeMarkerImage: "localhost/kubevmm/bridge-marker:envtest",
			PullPolicy: corev1.PullNever, CNIBinDir: "/opt/cni/bin", CNIConfDir: "/etc/cni/net.d", ClusterNetwork: "10-bridge.conflist"}}}
	require.NoError(t, r.SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	get := func() *networkaddonsv1.NetworkAddonsConfig {
		out := &networkaddonsv1.NetworkAddonsConfig{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: networkaddonsv1.Name}, out))
		return out
	}
	patch := func(p string) {
		require.NoError(t, k8s.Patch(ctx, &networkaddonsv1.NetworkAddonsConfig{ObjectMeta: metav1.ObjectMeta{Name: networkaddonsv1.Name}},
			client.RawPatch("application/merge-patch+json", []byte(p))))
	}
	waitCond := func(ct networkaddonsv1.ConditionType, prefix string) *networkaddonsv1.NetworkAddonsConfig {
		var cur *networkaddonsv1.NetworkAddonsConfig
		apiserver.WaitFor(t, fmt.Sprintf("%s %s", ct, prefix), func() (bool, string) {
			cur = get()
			c := "none"
			if cond := conditions.Find(cur.Status.Conditions, ct); cond != nil {
				c = string(cond.Status) + "/" + cond.Reason + ": " + cond.Message
			}
			return strings.HasPrefix(c, prefix), c
		})
		return cur
	}
	ds := func(name string) (*appsv1.DaemonSet, error) {
		d := &appsv1.DaemonSet{}
		return d, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: name}, d)
	}
	ready := func(name string) {
		d, err := ds(name)
		require.NoError(t, err)
		d.Status = appsv1.DaemonSetStatus{ObservedGeneration: d.Generation, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
			UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1}
		require.NoError(t, k8s.Status().Update(ctx, d))
	}

	t.Run("another name is refused", func(t *testing.T) {
		for _, v := range []string{"v1", "v1alpha1"} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(networkaddonsv1.GroupName + "/" + v)
			u.SetKind("NetworkAddonsConfig")
			u.SetName("mine")
			err := k8s.Create(ctx, u)
			require.Error(t, err, v)
			assert.Contains(t, err.Error(), "there is one NetworkAddonsConfig per cluster and its name is cluster", v)
		}
	})

	// multus and linuxBridge, as the HCO writes them (v1alpha1 is served
	// alike: the same object read back as v1).
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"multus": map[string]any{}, "linuxBridge": map[string]any{}}}}
	u.SetAPIVersion(networkaddonsv1.GroupVersionAlpha.String())
	u.SetKind("NetworkAddonsConfig")
	u.SetName(networkaddonsv1.Name)
	require.NoError(t, k8s.Create(ctx, u))
	nac := waitCond(networkaddonsv1.ConditionProgressing, "True/Deploying: not ready yet: DaemonSet cluster-network-addons/kubevmm-multus, DaemonSet cluster-network-addons/bridge-marker")
	assert.Equal(t, "envtest", nac.Status.TargetVersion)
	assert.Empty(t, nac.Status.ObservedVersion)
	for _, name := range []string{install.Multus, install.BridgeMarker} {
		d, err := ds(name)
		require.NoError(t, err, name)
		require.Len(t, d.OwnerReferences, 1, name)
		assert.Equal(t, nac.UID, d.OwnerReferences[0].UID, name)
		assert.Equal(t, corev1.PullNever, d.Spec.Template.Spec.Containers[0].ImagePullPolicy)
	}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "network-attachment-definitions.k8s.cni.cncf.io"}, &apiextensionsv1.CustomResourceDefinition{}))

	ready(install.Multus)
	ready(install.BridgeMarker)
	nac = waitCond(networkaddonsv1.ConditionAvailable, "True/AsExpected")
	assert.Equal(t, "envtest", nac.Status.ObservedVersion)
	assert.Len(t, nac.Status.Containers, 2)

	t.Run("drift is reverted", func(t *testing.T) {
		require.NoError(t, k8s.Patch(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: install.Namespace, Name: install.BridgeMarker}},
			client.RawPatch("application/strategic-merge-patch+json",
				[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"bridge-marker","image":"elsewhere/bridge-marker:old"}]}}}}`)),
			client.FieldOwner("someone")))
		require.NoError(t, k8s.Delete(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kubevmm:" + install.Multus}}))
		apiserver.WaitFor(t, "the image and the ClusterRole back", func() (bool, string) {
			d, err := ds(install.BridgeMarker)
			require.NoError(t, err)
			rerr := k8s.Get(ctx, client.ObjectKey{Name: "kubevmm:" + install.Multus}, &rbacv1.ClusterRole{})
			img := d.Spec.Template.Spec.Containers[0].Image
			return img == "localhost/kubevmm/bridge-marker:envtest" && rerr == nil, fmt.Sprintf("image %s, ClusterRole: %v", img, rerr)
		})
	})

	t.Run("a removed key removes its component", func(t *testing.T) {
		patch(`{"spec":{"linuxBridge":null}}`)
		apiserver.WaitFor(t, "bridge-marker gone", func() (bool, string) {
			_, err := ds(install.BridgeMarker)
			serr := k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.BridgeMarker}, &corev1.ServiceAccount{})
			return apierrors.IsNotFound(err) && apierrors.IsNotFound(serr), fmt.Sprintf("DaemonSet: %v, ServiceAccount: %v", err, serr)
		})
		_, err := ds(install.Multus)
		require.NoError(t, err, "multus stays")
		waitCond(networkaddonsv1.ConditionAvailable, "True/AsExpected")
		patch(`{"spec":{"linuxBridge":{}}}`)
		waitCond(networkaddonsv1.ConditionProgressing, "True/Deploying: not ready yet: DaemonSet cluster-network-addons/bridge-marker")
		ready(install.BridgeMarker)
		waitCond(networkaddonsv1.ConditionAvailable, "True/AsExpected")
	})

	t.Run("an unsupported key is refused by name", func(t *testing.T) {
		patch(`{"spec":{"ovs":{},"multus":{"delegates":"[]"}}}`)
		waitCond(networkaddonsv1.ConditionDegraded, "True/InvalidConfiguration: not supported by kubevmm: spec.multus.delegates, spec.ovs")
		assert.Equal(t, "False", string(conditions.Find(get().Status.Conditions, networkaddonsv1.ConditionAvailable).Status))
		patch(`{"spec":{"ovs":null,"multus":{"delegates":null}}}`)
		waitCond(networkaddonsv1.ConditionAvailable, "True/AsExpected")
	})

	t.Run("kubeMacPool", func(t *testing.T) {
		patch(`{"spec":{"kubeMacPool":{}}}`)
		waitCond(networkaddonsv1.ConditionProgressing, "True/Deploying: not ready yet: Deployment cluster-network-addons/kubemacpool-mac-controller-manager")
		rangeOf := func() string {
			cm := &corev1.ConfigMap{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: "kubemacpool-mac-range-config"}, cm))
			return cm.Data["RANGE_START"] + "-" + cm.Data["RANGE_END"]
		}
		first := rangeOf()
		assert.Regexp(t, `^02:[0-9a-f]{2}:[0-9a-f]{2}:00:00:00-02:[0-9a-f]{2}:[0-9a-f]{2}:ff:ff:ff$`, first, "a random 02:XX:XX range")
		hook := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.KubeMacPoolWebhook}, hook))
		leafOf := func() *corev1.Secret {
			sec := &corev1.Secret{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.KubeMacPoolSecret}, sec))
			return sec
		}
		leaf := leafOf()
		require.NotEmpty(t, leaf.Data[network.CAKey], "the operator made kubemacpool's certificate")
		assert.Equal(t, leaf.Data[network.CAKey], hook.Webhooks[0].ClientConfig.CABundle, "the webhook trusts its bundle")
		dep := &appsv1.Deployment{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.KubeMacPool}, dep))
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		require.NoError(t, k8s.Status().Update(ctx, dep))
		waitCond(networkaddonsv1.ConditionAvailable, "True/AsExpected")
		// Another reconcile (a new generation, seen in the status).
		patch(`{"spec":{"imagePullPolicy":"Never"}}`)
		apiserver.WaitFor(t, "the new generation reconciled", func() (bool, string) {
			cur := get()
			return cur.Generation > 1 && cur.Status.ObservedGeneration == cur.Generation, fmt.Sprint(cur.Status.ObservedGeneration, "/", cur.Generation)
		})
		assert.Equal(t, first, rangeOf(), "the random range is kept")
		assert.Equal(t, leaf.Data["tls.crt"], leafOf().Data["tls.crt"], "a valid certificate is kept")

		// Shorter lifetimes (as the HCO passes its certConfig on): the
		// certificate is remade at once, the webhook following the
		// bundle, which keeps the previous CA.
		patch(`{"spec":{"selfSignConfiguration":{"caRotateInterval":"10m","caOverlapInterval":"5m","certRotateInterval":"5m","certOverlapInterval":"2m"}}}`)
		apiserver.WaitFor(t, "kubemacpool's certificate remade for 5 minutes", func() (bool, string) {
			cur := leafOf()
			cert, _, err := certs.Parse(certs.KeyPair{Cert: cur.Data["tls.crt"], Key: cur.Data["tls.key"]})
			require.NoError(t, err)
			roots, err := certs.ParseBundle(cur.Data[network.CAKey])
			require.NoError(t, err)
			h := &admissionregistrationv1.MutatingWebhookConfiguration{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.KubeMacPoolWebhook}, h))
			left := time.Until(cert.NotAfter)
			return left <= 5*time.Minute && len(roots) == 2 && bytes.Equal(h.Webhooks[0].ClientConfig.CABundle, cur.Data[network.CAKey]),
				fmt.Sprintf("valid %v more, %d CAs", left.Round(time.Second), len(roots))
		})

		patch(`{"spec":{"kubeMacPool":{"rangeStart":"02:aa:00:00:00:00","rangeEnd":"02:aa:00:00:ff:ff"}}}`)
		apiserver.WaitFor(t, "the spec's range", func() (bool, string) { r := rangeOf(); return r == "02:aa:00:00:00:00-02:aa:00:00:ff:ff", r })

		patch(`{"spec":{"kubeMacPool":null}}`)
		apiserver.WaitFor(t, "kubemacpool gone", func() (bool, string) {
			derr := k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.KubeMacPool}, &appsv1.Deployment{})
			herr := k8s.Get(ctx, client.ObjectKey{Name: install.KubeMacPoolWebhook}, &admissionregistrationv1.MutatingWebhookConfiguration{})
			return apierrors.IsNotFound(derr) && apierrors.IsNotFound(herr), fmt.Sprintf("Deployment: %v, webhook: %v", derr, herr)
		})
		waitCond(networkaddonsv1.ConditionAvailable, "True/AsExpected")
	})
}
