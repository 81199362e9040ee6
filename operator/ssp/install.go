package ssp

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	sspcrds "github.com/kubevmm/kubevmm/api/ssp/crds"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	tektonv1alpha1 "github.com/kubevmm/kubevmm/api/tektontasks/v1alpha1"
	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// OperatorName is the SSP operator's Deployment, service account and
// ClusterRole.
const OperatorName = "ssp-operator"

// OperatorConfig says where the SSP operator runs and which images it and
// the validator use (REGISTRY/NAME:TAG).
type OperatorConfig struct {
	Namespace     string
	ImageRegistry string
	ImageTag      string
	PullPolicy    corev1.PullPolicy
	// ManagedBy is the value of ManagedByLabel on every object (the
	// operator's own deployment is not the operator's).
	ManagedBy string
}

// Operator is what deploys the SSP operator: the SSP and TektonTasks CRDs,
// its service account, ClusterRole and binding, and its Deployment (in
// c.Namespace).
func Operator(c OperatorConfig) ([]client.Object, error) {
	crds, err := sspcrds.All()
	if err != nil {
		return nil, err
	}
	all := []string{"*"}
	read := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: OperatorName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{sspv1beta3.GroupName}, Resources: []string{"ssps", "ssps/status", "ssps/finalizers"}, Verbs: all},
			{APIGroups: []string{tektonv1alpha1.GroupName}, Resources: []string{"tektontasks", "tektontasks/status"}, Verbs: all},
			// What it deploys. escalate and bind: it grants the validator
			// what it need not hold itself.
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: all},
			{APIGroups: []string{templatev1.GroupName}, Resources: []string{"templates"}, Verbs: all},
			{APIGroups: []string{v1beta1.GroupName}, Resources: []string{"virtualmachineclusterinstancetypes", "virtualmachineclusterpreferences"}, Verbs: all},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: all},
			{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: all},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: all},
			// The templates' namespace; the KubeVirt CR, whose
			// certificateRotateStrategy the validator's certificates
			// follow.
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: append([]string{"create", "patch"}, read...)},
			// The golden images' crons.
			{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"dataimportcrons"}, Verbs: all},
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"kubevirts"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}}
	ctr := corev1.Container{Name: OperatorName, Image: c.ImageRegistry + "/" + OperatorName + ":" + c.ImageTag, ImagePullPolicy: c.PullPolicy,
		Args: []string{"--image-registry=" + c.ImageRegistry, "--image-tag=" + c.ImageTag, "--image-pull-policy=" + string(c.PullPolicy),
			"--health-probe-bind-address=:8081"},
		Env: []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz",
			Port: intstr.FromInt(8081), Scheme: corev1.URISchemeHTTP}}, PeriodSeconds: 2}}
	labels := map[string]string{v1.AppLabel: OperatorName}
	objs := make([]client.Object, 0, len(crds)+7)
	for _, crd := range crds {
		objs = append(objs, crd)
	}
	dep := &appsv1.Deployment{TypeMeta: kit.TypeMeta("apps/v1", "Deployment"), ObjectMeta: metav1.ObjectMeta{Name: OperatorName, Namespace: c.Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: OperatorName, Containers: []corev1.Container{ctr},
					TerminationGracePeriodSeconds: ptr.To(int64(5))},
			},
		}}
	objs = append(objs,
		&corev1.ServiceAccount{TypeMeta: kit.TypeMeta("v1", "ServiceAccount"), ObjectMeta: metav1.ObjectMeta{Name: OperatorName, Namespace: c.Namespace}},
		role,
		&rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: OperatorName},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: OperatorName},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: OperatorName, Namespace: c.Namespace}}},
		// The validator reads who the API server is (it answers only its
		// reviews) where extension API servers do, through a RoleBinding
		// in kube-system the operator makes: the operator holds the
		// reader Role itself (so it may grant it) and may write
		// RoleBindings in kube-system, nowhere else.
		frontproxy.ReaderBinding(OperatorName+"-auth-reader", c.Namespace, OperatorName),
		dep,
		// It only calls the API server.
		kit.NetworkPolicy(dep, kit.Traffic{}),
	)
	// RoleBindings in kube-system, nowhere else: the validator's reader
	// binding (see ReaderBinding above).
	objs = append(objs, kit.RoleRBAC(OperatorName+"-auth-binder", "kube-system", c.Namespace, OperatorName,
		[]rbacv1.PolicyRule{{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"rolebindings"}, Verbs: []string{"get", "list", "create", "update", "patch", "delete"}}})...)
	objs = append(objs, kit.LeaseRBAC(OperatorName, c.Namespace, OperatorName)...)
	// The validator's CA and serving certificate, which it reads and
	// applies in the SSP's namespace: its own (Options.Namespace). The
	// garbage collector deletes them with the SSP.
	// The validator's ServiceAccount and Service, in the same namespace,
	// the only one it reads them in.
	objs = append(objs, kit.RoleRBAC(OperatorName, c.Namespace, c.Namespace, OperatorName, kit.OwnNamespaceRules("serviceaccounts", "services"))...)
	objs = append(objs, kit.RoleRBAC(OperatorName+"-secrets", c.Namespace, c.Namespace, OperatorName,
		[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "create", "update", "patch"}}})...)
	for _, o := range objs {
		o.SetLabels(map[string]string{ManagedByLabel: c.ManagedBy})
	}
	return objs, nil
}
