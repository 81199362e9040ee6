package kit

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
)

// Operator says how an operator itself is deployed: its name (of its
// Deployment, service account, ClusterRole and binding), namespace,
// image, the ClusterRole's rules and its arguments.
type Operator struct {
	Name, Namespace string
	Image           string
	PullPolicy      corev1.PullPolicy
	Rules           []rbacv1.PolicyRule
	// NamespaceRules are granted in Namespace only (a Role): what it
	// touches there alone and reads uncached.
	NamespaceRules []rbacv1.PolicyRule
	Args           []string
}

// OperatorObjects are the service account, ClusterRole, binding, the
// leader election lease's Role and binding (LeaseRBAC), the Role and
// binding of NamespaceRules if any, and the one-replica Deployment that
// run an operator: non-root with every capability dropped, POD_NAMESPACE
// set, ready when /readyz on :8081 answers; and its NetworkPolicy. The
// network and hostpath operators are deployed so; their CRD, namespace
// and the namespace's DenyByDefault come first, from their callers.
func OperatorObjects(o Operator) []client.Object {
	ctr := corev1.Container{Name: o.Name, Image: o.Image, ImagePullPolicy: o.PullPolicy,
		Args: o.Args,
		Env:  []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz",
			Port: intstr.FromInt(8081), Scheme: corev1.URISchemeHTTP}}, PeriodSeconds: 2}}
	labels := map[string]string{v1.AppLabel: o.Name}
	dep := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: o.Name, Containers: []corev1.Container{ctr},
					TerminationGracePeriodSeconds: ptr.To(int64(5))},
			},
		}}
	objs := LeaseRBAC(o.Name, o.Namespace, o.Name)
	if len(o.NamespaceRules) > 0 {
		objs = append(objs, RoleRBAC(o.Name, o.Namespace, o.Namespace, o.Name, o.NamespaceRules)...)
	}
	return append(objs,
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace}},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: o.Name}, Rules: o.Rules},
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: o.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: o.Name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: o.Name, Namespace: o.Namespace}}},
		dep,
		// It only calls the API server.
		NetworkPolicy(dep, Traffic{}),
	)
}

// LeaseRBAC is the Role and RoleBinding (both named name, in namespace)
// that let ServiceAccount namespace/account hold its leader election
// lease. The lease is in the holder's own namespace (operator/manager's
// --leader-election-namespace, $POD_NAMESPACE), so writing leases need not
// be granted cluster-wide, where it would let the holder take over any
// other controller's election.
func LeaseRBAC(name, namespace, account string) []client.Object {
	return RoleRBAC(name+"-leader-election", namespace, namespace, account, []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"},
		Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}})
}

// RoleRBAC is a Role of rules and its RoleBinding (both named name, in
// namespace) for ServiceAccount accountNamespace/account: what a component
// is granted in one namespace only.
func RoleRBAC(name, namespace, accountNamespace, account string, rules []rbacv1.PolicyRule) []client.Object {
	return []client.Object{
		&rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rules},
		&rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: account, Namespace: accountNamespace}}},
	}
}
