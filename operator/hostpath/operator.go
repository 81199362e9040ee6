package hostpath

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/hostpathprovisioner/crd"
	hppv1 "github.com/kubevmm/kubevmm/api/hostpathprovisioner/v1beta1"
	"github.com/kubevmm/kubevmm/operator/hostpath/install"
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
	role := &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: OperatorName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{hppv1.GroupName}, Resources: []string{"hostpathprovisioners", "hostpathprovisioners/status"}, Verbs: all},
			// What it deploys. escalate and bind: it grants the driver
			// what it need not hold itself.
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"}, Verbs: all},
			{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: all},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csidrivers"}, Verbs: all},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: all},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}}
	args := []string{"--image-registry=" + c.ImageRegistry, "--image-tag=" + c.ImageTag, "--image-pull-policy=" + string(c.PullPolicy),
		"--kubelet-root=" + c.KubeletRoot, "--health-probe-bind-address=:8081"}
	ctr := corev1.Container{Name: OperatorName, Image: c.ImageRegistry + "/" + OperatorName + ":" + c.ImageTag, ImagePullPolicy: c.PullPolicy,
		Args: args,
		Env:  []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz",
			Port: intstr.FromInt(8081), Scheme: corev1.URISchemeHTTP}}, PeriodSeconds: 2}}
	labels := map[string]string{v1.AppLabel: OperatorName}
	return []client.Object{
		hppCRD,
		install.NamespaceObject(),
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: OperatorName, Namespace: install.Namespace}},
		role,
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: OperatorName},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: OperatorName},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: OperatorName, Namespace: install.Namespace}}},
		&appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: OperatorName, Namespace: install.Namespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(1)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{ServiceAccountName: OperatorName, Containers: []corev1.Container{ctr},
						TerminationGracePeriodSeconds: ptr.To(int64(5))},
				},
			}},
	}, nil
}
