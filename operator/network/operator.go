package network

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/networkaddons/crd"
	networkaddonsv1 "github.com/kubevmm/kubevmm/api/networkaddons/v1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/operator/network/install"
)

// OperatorName is the operator's Deployment, service account and
// ClusterRole.
const OperatorName = "cluster-network-addons-operator"

// OperatorConfig says which images the operator and the components use
// (REGISTRY/NAME:TAG) and the nodes' CNI directories.
type OperatorConfig struct {
	ImageRegistry, ImageTag string
	PullPolicy              corev1.PullPolicy
	CNIBinDir, CNIConfDir   string
	ClusterNetwork          string
}

// Operator is what deploys the operator, in install.Namespace (upstream's
// cluster-network-addons, where it deploys the components too): the
// NetworkAddonsConfig CRD, the namespace, the operator's service account,
// ClusterRole and binding, and its Deployment.
func Operator(c OperatorConfig) ([]client.Object, error) {
	nacCRD, err := crd.NetworkAddonsConfig()
	if err != nil {
		return nil, err
	}
	all := []string{"*"}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{networkaddonsv1.GroupName}, Resources: []string{"networkaddonsconfigs", "networkaddonsconfigs/status"}, Verbs: all},
		// What it deploys. escalate and bind: it grants the components
		// what it need not hold itself.
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: all},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"}, Verbs: all},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets", "deployments"}, Verbs: all},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	args := []string{"--image-registry=" + c.ImageRegistry, "--image-tag=" + c.ImageTag, "--image-pull-policy=" + string(c.PullPolicy),
		"--cni-bin-dir=" + c.CNIBinDir, "--cni-conf-dir=" + c.CNIConfDir, "--cluster-network=" + c.ClusterNetwork,
		"--health-probe-bind-address=:8081"}
	op := kit.OperatorObjects(kit.Operator{Name: OperatorName, Namespace: install.Namespace,
		Image: c.ImageRegistry + "/" + OperatorName + ":" + c.ImageTag, PullPolicy: c.PullPolicy, Rules: rules, Args: args,
		// Its components' ServiceAccounts, Services and ConfigMaps, and
		// kubemacpool's CA and serving certificate: all in its own
		// namespace, the only one it reads them in.
		NamespaceRules: kit.OwnNamespaceRules("serviceaccounts", "services", "configmaps", "secrets")})
	return append([]client.Object{nacCRD, install.NamespaceObject(), kit.DenyByDefault(install.Namespace)}, op...), nil
}
