// Package install builds the objects that deploy CDI: the operator's own
// (the CDI CRD, namespace, RBAC, Deployment; printed by
// hack/cluster/manifests) and the components the CDI operator
// (operator/cdi) deploys from the CDI CR (the other CDI CRDs and each
// component in Components).
package install

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/cdi/crds"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// Namespace is CDI's namespace: upstream's manifests' (HCO installs CDI
// into its own namespace through OLM; kubevmm deploys the CDI operator
// apart, as upstream's manifests do).
const Namespace = "cdi"

// The names upstream gives the operator and the controller.
const (
	OperatorName = "cdi-operator"
	// Controller is the controller's Deployment (upstream's
	// cdi-deployment), ServiceAccount cdi-sa and ClusterRole cdi.
	Controller        = "cdi-deployment"
	ControllerAccount = "cdi-sa"
	ControllerRole    = "cdi"
)

// Config says what the components run.
type Config struct {
	ImageRegistry, ImageTag string
	PullPolicy              corev1.PullPolicy
	// UploadCA is the upload CA's certificate (SecretUploadCA), which the
	// API server trusts cdi-apiserver's serving certificate by.
	UploadCA []byte
}

func (c Config) image(name string) string { return c.ImageRegistry + "/" + name + ":" + c.ImageTag }

// Component builds one component's objects; a Deployment among them is
// what the operator waits on to be Available.
type Component func(Config) []client.Object

// Components are what the operator deploys beside the CRDs, in order.
var Components = []Component{ControllerObjects, APIServerObjects, UploadProxyObjects, CloneAuthObjects}

// Objects are the CRDs the operator installs (all but CDI's, which comes
// with the operator) and every component.
func Objects(c Config) ([]client.Object, error) {
	all, err := crds.All()
	if err != nil {
		return nil, err
	}
	var out []client.Object
	for _, crd := range all {
		if crd.Name != cdiv1.CDICRDName {
			out = append(out, crd)
		}
	}
	for _, comp := range Components {
		out = append(out, comp(c)...)
	}
	return out, nil
}

// ControllerObjects are cdi-controller's: its ServiceAccount, ClusterRole
// and binding, and its Deployment (cdi-deployment).
func ControllerObjects(c Config) []client.Object {
	all := []string{"*"}
	read := []string{"get", "list", "watch"}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"datavolumes", "datavolumes/status", "datavolumes/finalizers"}, Verbs: all},
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"datasources", "datasources/status"}, Verbs: all},
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"dataimportcrons", "dataimportcrons/status", "dataimportcrons/finalizers"}, Verbs: all},
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"cdiconfigs", "storageprofiles"}, Verbs: read},
		// A DataImportCron's registry certConfigMap.
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "pods"}, Verbs: all},
		// The upload servers' Services and certificate Secrets, and the
		// upload CA they are signed with.
		{APIGroups: []string{""}, Resources: []string{"services", "secrets"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: read},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: read},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}
	args := []string{"--importer-image=" + c.image("cdi-importer"), "--uploadserver-image=" + c.image("cdi-uploadserver"), "--cloner-image=" + c.image("cdi-cloner"),
		"--pull-policy=" + string(c.PullPolicy),
		"--health-probe-bind-address=:8081", "--leader-elect"}
	dep := deployment(Controller, ControllerAccount, corev1.Container{
		Name: "cdi-controller", Image: c.image("cdi-controller"), ImagePullPolicy: c.PullPolicy, Args: args})
	// The token key pair: clone tokens checked and extended (the
	// DataVolume controller) and extended ones checked (the clone
	// controller).
	secretVolume(&dep.Spec.Template.Spec.Containers[0], &dep.Spec.Template.Spec, SecretTokenKey, ControllerTokenDir)
	// It polls the registries DataImportCrons name (any address) and
	// reads the importers' progress from their pods.
	return append(append(rbac(ControllerAccount, ControllerRole, rules), kit.LeaseRBAC(Controller, Namespace, ControllerAccount)...),
		dep, kit.NetworkPolicy(dep, kit.Traffic{ToAnywhere: true}))
}

// ControllerTokenDir is where cdi-controller reads the token key pair
// (token.PrivateKeyKey, token.PublicKeyKey).
const ControllerTokenDir = "/etc/cdi-controller/token"

// OperatorConfig says which images the operator and the components use.
type OperatorConfig struct {
	ImageRegistry, ImageTag string
	PullPolicy              corev1.PullPolicy
}

// OperatorObjects deploy the CDI operator: CDI's CRDs (all of them: the
// operator watches CDIConfigs and StorageProfiles from its start, and
// applies the others again, reverting edits), the namespace, its RBAC
// and Deployment.
func OperatorObjects(c OperatorConfig) ([]client.Object, error) {
	all, err := crds.All()
	if err != nil {
		return nil, err
	}
	var out []client.Object
	for _, crd := range all {
		out = append(out, crd)
	}
	any := []string{"*"}
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"cdis", "cdis/status", "cdis/finalizers", "cdiconfigs", "cdiconfigs/status",
			"storageprofiles", "storageprofiles/status"}, Verbs: any},
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"datavolumes"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
		// What it deploys. escalate and bind: it grants the components
		// what it need not hold itself.
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: any},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings", "roles", "rolebindings"}, Verbs: any},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: any},
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations", "mutatingwebhookconfigurations"}, Verbs: any},
		{APIGroups: []string{"apiregistration.k8s.io"}, Resources: []string{"apiservices"}, Verbs: any},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	args := []string{"--image-registry=" + c.ImageRegistry, "--image-tag=" + c.ImageTag, "--image-pull-policy=" + string(c.PullPolicy),
		"--health-probe-bind-address=:8081", "--leader-elect"}
	ns := &corev1.Namespace{TypeMeta: kit.TypeMeta("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: Namespace,
		// Importer pods run in users' namespaces; CDI's own run restricted.
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	out = append(out, ns)
	out = append(out, rbac(OperatorName, OperatorName, rules)...)
	out = append(out, kit.LeaseRBAC(OperatorName, Namespace, OperatorName)...)
	// The components' ServiceAccounts, Services, ConfigMaps and Secrets
	// are all in Namespace, the only one it reads them in.
	out = append(out, kit.RoleRBAC(OperatorName, Namespace, Namespace, OperatorName, kit.OwnNamespaceRules("serviceaccounts", "services", "configmaps", "secrets"))...)
	dep := deployment(OperatorName, OperatorName, corev1.Container{Name: OperatorName, Image: c.ImageRegistry + "/" + OperatorName + ":" + c.ImageTag,
		ImagePullPolicy: c.PullPolicy, Args: args})
	// The namespace is closed by default; the operator only calls the
	// API server.
	return append(out, dep, kit.DenyByDefault(Namespace), kit.NetworkPolicy(dep, kit.Traffic{})), nil
}

// rbac is a ServiceAccount in Namespace bound to a ClusterRole of rules.
func rbac(account, role string, rules []rbacv1.PolicyRule) []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{TypeMeta: kit.TypeMeta("v1", "ServiceAccount"), ObjectMeta: metav1.ObjectMeta{Name: account, Namespace: Namespace}},
		&rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: rules},
		&rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: account, Namespace: Namespace}}},
	}
}

// deployment runs ctr (with POD_NAMESPACE, a readiness probe on :8081 and
// the restricted pod security profile) as one replica.
func deployment(name, account string, ctr corev1.Container) *appsv1.Deployment {
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}})
	ctr.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}}
	ctr.SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(107)),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	ctr.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt(8081),
		Scheme: corev1.URISchemeHTTP}}, PeriodSeconds: 2}
	labels := map[string]string{"cdi.kubevirt.io": name}
	return &appsv1.Deployment{TypeMeta: kit.TypeMeta("apps/v1", "Deployment"), ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: account, Containers: []corev1.Container{ctr}, TerminationGracePeriodSeconds: ptr.To(int64(5))}}}}
}
