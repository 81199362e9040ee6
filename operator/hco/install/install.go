// Package install is what deploys the HCO operator: the HyperConverged
// CRD (converting v1beta1 through the hco-webhook), its service account
// and RBAC, its Deployment (the operator and the hco-webhook in one
// process), the webhook's Service and ValidatingWebhookConfiguration, and
// the cli-download Deployment and Service serving virtctl. The
// webhook's serving certificate is the operator's own (hco.WebhookCerts:
// Secrets WebhookSecret and WebhookCASecret), as is the caBundle of the
// webhook configuration and of the CRD's conversion webhook, which these
// objects leave out.
package install

import (
	"strconv"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/api/hco/crd"
	hcov1 "github.com/kubevmm/kubevmm/api/hco/v1"
	"github.com/kubevmm/kubevmm/api/securemetrics"
	"github.com/kubevmm/kubevmm/operator/hco"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// Names of what is deployed, upstream's.
const (
	OperatorName      = "hyperconverged-cluster-operator"
	WebhookService    = "hyperconverged-cluster-webhook-service"
	WebhookPort       = 4343
	WebhookSecret     = "hyperconverged-cluster-webhook-service-cert"
	WebhookCASecret   = "hyperconverged-cluster-webhook-ca"
	CRDName           = "hyperconvergeds." + hcov1.GroupName
	WebhookConfig     = "validate-hco.kubevirt.io"
	CLIDownloadName   = "hyperconverged-cluster-cli-download"
	CLIDownloadPort   = 8080
	CLIDownloadDir    = "/srv/cli-download"
	metricsPort       = 8080
	healthPort        = 8081
	managedByLabel    = "app.kubernetes.io/managed-by"
	componentLabel    = "app.kubernetes.io/component"
	operatorImageName = "hco-operator"
)

// Config says where and with what the HCO operator runs.
type Config struct {
	Namespace     string
	ImageRegistry string
	ImageTag      string
	PullPolicy    corev1.PullPolicy
	// ManagedBy labels everything (who deployed it).
	ManagedBy string
}

// Objects is everything that deploys the HCO operator, CRD first.
func Objects(c Config) ([]client.Object, error) {
	hcoCRD, err := crd.CRD(&crd.WebhookConversion{Namespace: c.Namespace, Name: WebhookService, Port: WebhookPort})
	if err != nil {
		return nil, err
	}
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: c.Namespace} }
	all := []string{"*"}
	rw := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	ro := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: OperatorName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{hcov1.GroupName}, Resources: []string{"hyperconvergeds", "hyperconvergeds/status", "hyperconvergeds/finalizers"}, Verbs: all},
			// The operands.
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"kubevirts"}, Verbs: rw},
			{APIGroups: []string{"cdi.kubevirt.io"}, Resources: []string{"cdis"}, Verbs: rw},
			{APIGroups: []string{"networkaddonsoperator.network.kubevirt.io"}, Resources: []string{"networkaddonsconfigs"}, Verbs: rw},
			{APIGroups: []string{"ssp.kubevirt.io"}, Resources: []string{"ssps"}, Verbs: rw},
			// The golden images' namespace (commonBootImageNamespace).
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
			// Whether an operand's operator is installed.
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: ro},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"},
				ResourceNames: []string{WebhookConfig}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"},
				ResourceNames: []string{CRDName}, Verbs: []string{"patch"}},
			// The webhook refuses an uninstall while workloads exist.
			{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachines", "virtualmachineinstances"}, Verbs: ro},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}}
	// Its /metrics answers a token allowed to GET /metrics only.
	role.Rules = append(role.Rules, securemetrics.ReviewRules()...)
	labels := map[string]string{"name": OperatorName}
	ctr := corev1.Container{Name: OperatorName, Image: c.ImageRegistry + "/" + operatorImageName + ":" + c.ImageTag, ImagePullPolicy: c.PullPolicy,
		Args: []string{"--version=" + c.ImageTag, "--webhook", "--webhook-port=" + strconv.Itoa(WebhookPort),
			"--metrics-bind-address=:" + strconv.Itoa(metricsPort), "--health-probe-bind-address=:" + strconv.Itoa(healthPort)},
		Env:       []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		Ports:     []corev1.ContainerPort{{Name: "webhook", ContainerPort: WebhookPort}, {Name: "metrics", ContainerPort: metricsPort}},
		Resources: requests("10m", "48Mi"), SecurityContext: nonRoot(),
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(healthPort)}},
			PeriodSeconds: 2}}
	operator := deployment(meta(OperatorName), labels, OperatorName, ctr, nil)
	dlLabels := map[string]string{"name": CLIDownloadName}
	dl := corev1.Container{Name: "server", Image: c.ImageRegistry + "/" + operatorImageName + ":" + c.ImageTag, ImagePullPolicy: c.PullPolicy,
		Args:  []string{"--serve-cli-downloads=" + CLIDownloadDir, "--listen=:" + strconv.Itoa(CLIDownloadPort)},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: CLIDownloadPort}}, Resources: requests("5m", "16Mi"), SecurityContext: nonRoot(),
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(CLIDownloadPort)}},
			PeriodSeconds: 2}}
	download := deployment(meta(CLIDownloadName), dlLabels, "", dl, nil)
	path := hco.ValidatePath
	objs := []client.Object{
		hcoCRD,
		&corev1.ServiceAccount{TypeMeta: kit.TypeMeta("v1", "ServiceAccount"), ObjectMeta: meta(OperatorName)},
		role,
		&rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: OperatorName},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: OperatorName},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: OperatorName, Namespace: c.Namespace}}},
		// Its webhook answers the API server's reviews only, and learns
		// who that is where extension API servers do.
		frontproxy.ReaderBinding(OperatorName+"-auth-reader", c.Namespace, OperatorName),
		operator,
		service(meta(WebhookService), labels, WebhookPort),
		&admissionregistrationv1.ValidatingWebhookConfiguration{TypeMeta: kit.TypeMeta("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
			ObjectMeta: metav1.ObjectMeta{Name: WebhookConfig},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: WebhookConfig,
				ClientConfig: admissionregistrationv1.WebhookClientConfig{
					Service: &admissionregistrationv1.ServiceReference{Namespace: c.Namespace, Name: WebhookService, Path: &path, Port: ptr.To[int32](WebhookPort)}},
				// Both versions as sent: a v1beta1 object converted to v1
				// first would lose the fields the webhook must refuse.
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{hcov1.GroupName}, APIVersions: []string{"v1", "v1beta1"},
						Resources: []string{"hyperconvergeds"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)}}},
				MatchPolicy:             ptr.To(admissionregistrationv1.Exact),
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
				AdmissionReviewVersions: []string{"v1"},
			}}},
		download,
		service(meta(CLIDownloadName), dlLabels, CLIDownloadPort),
		// Its webhook answers the API server only (client certificate),
		// its metrics a token allowed to read them; the downloads are
		// for anyone.
		kit.NetworkPolicy(operator, kit.Traffic{Serve: []int32{WebhookPort, metricsPort}}),
		kit.NetworkPolicy(download, kit.Traffic{Serve: []int32{CLIDownloadPort}}),
	}
	objs = append(objs, kit.LeaseRBAC(OperatorName, c.Namespace, OperatorName)...)
	// The webhook's certificate, which it makes, and the CA bundle it puts
	// in its webhook configuration and CRD: Secrets of its own namespace
	// only (read uncached, so no cluster-wide watch).
	objs = append(objs, kit.RoleRBAC(OperatorName+"-secrets", c.Namespace, c.Namespace, OperatorName,
		[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: rw}})...)
	for _, o := range objs {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[managedByLabel] = c.ManagedBy
		l[componentLabel] = "hco"
		o.SetLabels(l)
	}
	return objs, nil
}

func deployment(m metav1.ObjectMeta, labels map[string]string, sa string, ctr corev1.Container, vols []corev1.Volume) *appsv1.Deployment {
	m.Labels = labels
	return &appsv1.Deployment{TypeMeta: kit.TypeMeta("apps/v1", "Deployment"), ObjectMeta: m,
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: sa, AutomountServiceAccountToken: ptr.To(sa != ""),
					Containers: []corev1.Container{ctr}, Volumes: vols,
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}}}
}

func service(m metav1.ObjectMeta, selector map[string]string, port int32) *corev1.Service {
	return &corev1.Service{TypeMeta: kit.TypeMeta("v1", "Service"), ObjectMeta: m, Spec: corev1.ServiceSpec{Selector: selector,
		Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP}}}}
}

func nonRoot() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func requests(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
}
