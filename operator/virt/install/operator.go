package install

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/crds"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// OperatorName is virt-operator's Deployment, service account and
// ClusterRole.
const OperatorName = "virt-operator"

// Operator is what deploys virt-operator itself: the KubeVirt CRD, its
// service account, ClusterRole and binding, and its Deployment (in
// c.Namespace, which it deploys the components into; c.ImageRegistry,
// ImageTag and PullPolicy are its own image's and the components'
// defaults). The namespace and the components' certificates go beside it.
func Operator(c Config) ([]client.Object, error) {
	all, err := crds.All()
	if err != nil {
		return nil, err
	}
	var kvCRD client.Object
	for _, crd := range all {
		if crd.Name == v1.KubeVirtCRDName {
			crd.TypeMeta = kit.TypeMeta("apiextensions.k8s.io/v1", "CustomResourceDefinition")
			kvCRD = crd
		}
	}
	if kvCRD == nil {
		return nil, fmt.Errorf("install: no %s among the CRDs", v1.KubeVirtCRDName)
	}
	b := &builder{c: c}
	everything := []string{"*"}
	role := &rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-operator"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1.GroupName}, Resources: []string{"kubevirts", "kubevirts/status", "kubevirts/finalizers"}, Verbs: everything},
			// Uninstall with RemoveWorkloads deletes them.
			{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachines", "virtualmachineinstances"}, Verbs: []string{"get", "list", "watch", "delete"}},
			// What it deploys. escalate and bind: it grants the components
			// (and the aggregated user roles) what it need not hold itself.
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: everything},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}, Verbs: everything},
			{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, Verbs: everything},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"}, Verbs: everything},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments", "daemonsets"}, Verbs: everything},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}}
	pull := c.PullPolicy
	ctr := corev1.Container{Name: OperatorName, Image: b.image(OperatorName), ImagePullPolicy: pull,
		Args: []string{"--image-registry=" + c.ImageRegistry, "--image-tag=" + c.ImageTag, "--image-pull-policy=" + string(pull),
			"--device-plugin-dir=" + c.PluginDir, "--kubelet-root=" + c.KubeletRoot, "--health-probe-bind-address=:8081",
			// One operator at a time: during its own rollout (an upgrade)
			// the old and the new pod would each apply their version.
			"--leader-elect"},
		Env:       []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		Resources: req("10m", "32Mi"), SecurityContext: nonRoot(), ReadinessProbe: probe(corev1.URISchemeHTTP, 8081)}
	objs := []client.Object{
		kvCRD,
		&corev1.ServiceAccount{TypeMeta: kit.TypeMeta("v1", "ServiceAccount"), ObjectMeta: b.meta("kubevirt-operator")},
		role,
		&rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-operator"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubevirt-operator"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kubevirt-operator", Namespace: c.Namespace}}},
	}
	dep := b.deploy(OperatorName, "kubevirt-operator", ctr, nil)
	// The namespace is closed by default; the operator only calls the
	// API server.
	objs = append(objs, dep, kit.DenyByDefault(c.Namespace), kit.NetworkPolicy(dep, kit.Traffic{}))
	objs = append(objs, kit.LeaseRBAC("kubevirt-operator", c.Namespace, "kubevirt-operator")...)
	// The components' ServiceAccounts, Services, ConfigMaps and Secrets
	// are all in its namespace, the only one it reads them in.
	objs = append(objs, kit.RoleRBAC("kubevirt-operator", c.Namespace, c.Namespace, "kubevirt-operator", kit.OwnNamespaceRules("serviceaccounts", "services", "configmaps", "secrets"))...)
	for _, o := range objs {
		o.SetLabels(map[string]string{ManagedByLabel: c.ManagedBy})
	}
	return objs, nil
}
