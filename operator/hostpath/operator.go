package hostpath

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/hostpathprovisioner/crd"
	hppv1 "github.com/kubevmm/kubevmm/api/hostpathprovisioner/v1beta1"
	"github.com/kubevmm/kubevmm/operator/hostpath/install"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// OperatorName is the operator's Deployment, service account and
// ClusterRole.
const OperatorName = "hostpath-provisioner-operator"

// OperatorConfig says which images the operator and the driver use
// (REGISTRY/NAME:TAG) and the kubelet's root directory on the nodes.
type OperatorConfig struct {
	ImageRegistry, ImageTag string
	PullPolicy              corev1.PullPolicy
	KubeletRoot             string
}

// Operator is what deploys the operator, in install.Namespace (upstream's
// hostpath-provisioner, where it deploys the driver too): the
// HostPathProvisioner CRD, the namespace, the operator's service account,
// ClusterRole and binding, and its Deployment.
func Operator(c OperatorConfig) ([]client.Object, error) {
	hppCRD, err := crd.HostPathProvisioner()
	if err != nil {
		return nil, err
	}
	all := []string{"*"}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{hppv1.GroupName}, Resources: []string{"hostpathprovisioners", "hostpathprovisioners/status"}, Verbs: all},
		// What it deploys. escalate and bind: it grants the driver
		// what it need not hold itself.
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"}, Verbs: all},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: all},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	args := []string{"--image-registry=" + c.ImageRegistry, "--image-tag=" + c.ImageTag, "--image-pull-policy=" + string(c.PullPolicy),
		"--kubelet-root=" + c.KubeletRoot, "--health-probe-bind-address=:8081"}
	op := kit.OperatorObjects(kit.Operator{Name: OperatorName, Namespace: install.Namespace,
		Image: c.ImageRegistry + "/" + OperatorName + ":" + c.ImageTag, PullPolicy: c.PullPolicy, Rules: rules, Args: args,
		// The driver's ServiceAccount, in its own namespace, the only one
		// it reads them in.
		NamespaceRules: kit.OwnNamespaceRules("serviceaccounts")})
	return append([]client.Object{hppCRD, install.NamespaceObject(), kit.DenyByDefault(install.Namespace)}, op...), nil
}
