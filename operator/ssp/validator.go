package ssp

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

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/templatevalidator/webhook"
)

// virt-template-validator's objects, upstream's names.
const (
	ValidatorName               = "virt-template-validator"
	ValidatorServiceAccount     = "template-validator"
	ValidatorClusterRole        = "template:view"
	ValidatorClusterRoleBinding = "template-validator"
	// ValidatorAuthReader is the validator's RoleBinding in kube-system
	// (frontproxy.ReaderBinding).
	ValidatorAuthReader = "template-validator-auth-reader"
	// ValidatorSecret holds the validator's serving certificate (tls.crt,
	// tls.key) and the CA that signed it (ca.crt, the webhooks' caBundle),
	// in the SSP's namespace; made outside the operator for now.
	ValidatorSecret = "virt-template-validator-certs"
	CABundleKey     = "ca.crt"
	// ValidatorPort is where the validator serves HTTPS.
	ValidatorPort = 8443
)

// validator is virt-template-validator: its service account and RBAC, its
// Deployment, Service and webhooks (in the SSP's namespace; the webhooks
// trust ca).
func validator(s *sspv1beta3.SSP, o Options, ca []byte) []client.Object {
	ns := s.Namespace
	labels := map[string]string{v1.AppLabel: ValidatorName}
	replicas := int32(2)
	var placement sspv1beta3.NodePlacement
	if tv := s.Spec.TemplateValidator; tv != nil {
		if tv.Replicas != nil {
			replicas = *tv.Replicas
		}
		if tv.Placement != nil {
			placement = *tv.Placement
		}
	}
	affinity := placement.Affinity
	if affinity == nil {
		// Replicas spread over nodes where they can (upstream's).
		affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelHostname}}}}}
	}
	readyz := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: webhook.PathReady,
		Port: intstr.FromInt32(ValidatorPort), Scheme: corev1.URISchemeHTTPS}}, PeriodSeconds: 2}
	const certDir = "/etc/webhook/certs"
	ctr := corev1.Container{Name: "webhook", Image: o.ImageRegistry + "/" + ValidatorName + ":" + o.ImageTag, ImagePullPolicy: o.PullPolicy,
		Args:         []string{"--port=" + strconv.Itoa(ValidatorPort), "--cert-dir=" + certDir},
		Ports:        []corev1.ContainerPort{{Name: "webhook", ContainerPort: ValidatorPort, Protocol: corev1.ProtocolTCP}},
		VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: certDir, ReadOnly: true}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
		ReadinessProbe:           readyz,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
			ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	deploy := &appsv1.Deployment{TypeMeta: kit.TypeMeta("apps/v1", "Deployment"), ObjectMeta: metav1.ObjectMeta{Name: ValidatorName, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: ValidatorServiceAccount, Containers: []corev1.Container{ctr},
					SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					NodeSelector:                  placement.NodeSelector,
					Affinity:                      affinity,
					Tolerations:                   placement.Tolerations,
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Volumes:                       []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ValidatorSecret}}}},
				},
			},
		}}
	svc := &corev1.Service{TypeMeta: kit.TypeMeta("v1", "Service"), ObjectMeta: metav1.ObjectMeta{Name: ValidatorName, Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "webhook", Port: 443, TargetPort: intstr.FromInt32(ValidatorPort)}}}}
	// Both refuse when the validator cannot be asked (upstream's
	// failurePolicy): a rule that is not checked must not let a VM in.
	hook := func(name, path string, rules []admissionregistrationv1.RuleWithOperations, sel *metav1.LabelSelector) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{Name: name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: ca,
				Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: ValidatorName, Path: ptr.To(path), Port: ptr.To(int32(443))}},
			Rules: rules, ObjectSelector: sel,
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"}}
	}
	rule := func(group, version, resource string, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{Operations: ops,
			Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}}}}
	}
	webhooks := &admissionregistrationv1.ValidatingWebhookConfiguration{TypeMeta: kit.TypeMeta("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
		ObjectMeta: metav1.ObjectMeta{Name: ValidatorName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			hook("virtualmachine-admission.ssp.kubevirt.io", webhook.PathVirtualMachine,
				rule(v1.GroupName, "v1", "virtualmachines", admissionregistrationv1.Create, admissionregistrationv1.Update), nil),
			// Only the common templates' deletion is checked (upstream's
			// selector): the validator refuses it while VMs use them.
			hook("template-admission.ssp.kubevirt.io", webhook.PathTemplate,
				rule(templatev1.GroupName, "v1", "templates", admissionregistrationv1.Delete),
				&metav1.LabelSelector{MatchLabels: map[string]string{TemplateTypeLabel: TemplateTypeBase}}),
		}}
	return []client.Object{
		&corev1.ServiceAccount{TypeMeta: kit.TypeMeta("v1", "ServiceAccount"), ObjectMeta: metav1.ObjectMeta{Name: ValidatorServiceAccount, Namespace: ns}},
		&rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: ValidatorClusterRole},
			Rules: webhook.ClusterRoleRules()},
		&rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: ValidatorClusterRoleBinding},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ValidatorClusterRole},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: ValidatorServiceAccount, Namespace: ns}}},
		// It answers the API server's reviews only, and learns who that
		// is where extension API servers do.
		frontproxy.ReaderBinding(ValidatorAuthReader, ns, ValidatorServiceAccount),
		svc, deploy, webhooks,
		// Its webhooks answer the API server only (client certificate).
		kit.NetworkPolicy(deploy, kit.Traffic{Serve: []int32{ValidatorPort}}),
	}
}
