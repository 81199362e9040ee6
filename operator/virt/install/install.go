// Package install is what deploys kubevmm's components into a cluster, as
// objects: service accounts and RBAC (virt-controller's and virt-handler's
// ClusterRoles generated from their RBAC markers, the user-facing
// kubevirt.io:{admin,edit,view} roles aggregated into the cluster's),
// the TLS Secrets when given their certificates, the cluster
// configuration, the virt-controller and virt-api Deployments, the
// virt-handler DaemonSet, the virt-api Service, the admission webhooks and
// the subresources.kubevirt.io APIService; and, apart, the namespace and
// the kubevirt.io CRDs.
//
// Objects is a pure function of its Config: virt-operator applies what it
// returns (from a KubeVirt CR), and hack/cluster/manifests prints it as
// YAML.
package install

import (
	"bytes"
	"encoding/base64"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/crds"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/controller"
	controllerrbac "github.com/kubevmm/kubevmm/controller/rbac"
	"github.com/kubevmm/kubevmm/handler"
	handlerrbac "github.com/kubevmm/kubevmm/handler/rbac"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/virtapi"
)

// ManagedByLabel is set on every object Objects returns, to Config.ManagedBy.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// Config says what to deploy where.
type Config struct {
	// Namespace of the components.
	Namespace string
	// ImageRegistry is the images' repository prefix (IMAGE_REGISTRY/virt-api:TAG).
	ImageRegistry string
	ImageTag      string
	PullPolicy    corev1.PullPolicy
	// PluginDir is the kubelet's device-plugin directory on the nodes.
	PluginDir string
	// KubeletRoot is the kubelet's --root-dir on the nodes (its pods and
	// seccomp directories are below).
	KubeletRoot string
	// Configuration is the cluster configuration (KubeVirt's
	// spec.configuration), given to virt-controller.
	Configuration controller.ClusterConfig
	// CABundle is the CA the API server trusts virt-api's serving
	// certificate with (webhooks, APIService).
	CABundle []byte
	// Certificates, when set, are deployed as the components' TLS
	// Secrets; nil: the Secrets exist already, managed elsewhere.
	Certificates *Certificates
	// ManagedBy is the value of ManagedByLabel on every object.
	ManagedBy string
}

// KeyPair is a PEM certificate and its PEM key.
type KeyPair struct{ Cert, Key []byte }

// Certificates are the components' TLS material, signed by CA.
type Certificates struct {
	CA []byte
	// API serves virt-api (webhooks, APIService); Handler is
	// virt-handler's, server and client between handlers; APIClient is
	// virt-api's client certificate towards virt-handler.
	API, Handler, APIClient KeyPair
}

// The Secrets holding Certificates, as the components mount them.
const (
	SecretAPICerts      = "virt-api-certs"
	SecretAPIClient     = "virt-api-handler-client"
	SecretHandlerCerts  = "virt-handler-certs"
	ConfigMapName       = "kubevmm-config"
	APIServiceName      = "v1." + v1.SubresourceGroupName
	MutatingWebhooks    = "virt-api-mutator"
	ValidatingWebhooks  = "virt-api-validator"
	VirtAPIName         = "virt-api"
	VirtControllerName  = "virt-controller"
	VirtHandlerName     = "virt-handler"
	caBundleSecretField = "ca.crt"
)

// Namespace is the components' namespace object. It is not among Objects:
// whoever deploys the components (virt-operator runs in it) owns it.
func Namespace(name string) *corev1.Namespace {
	// Said, not left to the cluster's default: virt-handler is privileged
	// (it builds the launchers' networks and serves device plugins), which
	// only the "privileged" PodSecurity level admits.
	return &corev1.Namespace{TypeMeta: kit.TypeMeta("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
}

// CRDs are the CRDs of the components' API (api/crds), without the
// KubeVirt CRD, which comes with virt-operator.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	all, err := crds.All()
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, c := range all {
		if c.Name != v1.KubeVirtCRDName {
			c.TypeMeta = kit.TypeMeta("apiextensions.k8s.io/v1", "CustomResourceDefinition")
			out = append(out, c)
		}
	}
	return out, nil
}

// Objects is everything that deploys the components, the namespace and the
// CRDs aside, in an order that applies: RBAC, Secrets, configuration,
// workloads, webhooks.
func Objects(c Config) ([]client.Object, error) {
	if c.Namespace == "" || c.ImageRegistry == "" || c.ImageTag == "" {
		return nil, fmt.Errorf("install: namespace, image registry and image tag are required")
	}
	if len(c.CABundle) == 0 {
		return nil, fmt.Errorf("install: the CA bundle is required")
	}
	b := &builder{c: c}
	for _, step := range []func() error{b.rbac, b.secrets, b.controlPlane, b.handler, b.webhooks} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	for _, o := range b.objs {
		l := o.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[ManagedByLabel] = c.ManagedBy
		o.SetLabels(l)
	}
	return b.objs, nil
}

type builder struct {
	c    Config
	objs []client.Object
}

func (b *builder) add(objs ...client.Object) { b.objs = append(b.objs, objs...) }

func (b *builder) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: b.c.Namespace}
}

func (b *builder) image(n string) string { return b.c.ImageRegistry + "/" + n + ":" + b.c.ImageTag }

func appLabels(app string) map[string]string { return map[string]string{v1.AppLabel: app} }

func nonRoot() *corev1.SecurityContext {
	return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
}

func req(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
}

func secretVol(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}
}

func (b *builder) deploy(name, sa string, c corev1.Container, vols []corev1.Volume) *appsv1.Deployment {
	return &appsv1.Deployment{TypeMeta: kit.TypeMeta("apps/v1", "Deployment"), ObjectMeta: b.meta(name),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: appLabels(name)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels(name)},
				Spec: corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{c}, Volumes: vols,
					Tolerations: []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}}},
			},
		}}
}

func probe(scheme corev1.URIScheme, port int) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(port), Scheme: scheme}},
		PeriodSeconds: 2}
}

// generatedRole decodes a ClusterRole controller-gen wrote.
func generatedRole(y []byte) (*rbacv1.ClusterRole, error) {
	r := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(bytes.TrimPrefix(y, []byte("---\n")), r); err != nil {
		return nil, fmt.Errorf("install: generated ClusterRole: %w", err)
	}
	return r, nil
}

// rbac is the service accounts and their roles.
func (b *builder) rbac() error {
	ns := b.c.Namespace
	// The generated ClusterRoles, as they are.
	for _, y := range [][]byte{controllerrbac.ClusterRole, handlerrbac.ClusterRole} {
		r, err := generatedRole(y)
		if err != nil {
			return err
		}
		b.add(r)
	}
	for _, sa := range []string{"kubevirt-controller", "kubevirt-handler", "kubevirt-apiserver"} {
		b.add(&corev1.ServiceAccount{TypeMeta: kit.TypeMeta("v1", "ServiceAccount"), ObjectMeta: b.meta(sa)})
	}
	crb := func(name, role, sa string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
	}
	apiRole := &rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-apiserver"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachines", "virtualmachineinstances"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachines/status"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachineinstancemigrations"}, Verbs: []string{"create", "get", "list"}},
			// The VMI mutating webhook applies the presets of the VMI's namespace.
			{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachineinstancepresets"}, Verbs: []string{"list"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
			// expand-spec reads what a VM's instance type and preference name.
			{APIGroups: []string{v1beta1.GroupName}, Resources: []string{"virtualmachineinstancetypes", "virtualmachineclusterinstancetypes", "virtualmachinepreferences", "virtualmachineclusterpreferences"}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"controllerrevisions"}, Verbs: []string{"get"}},
			// addvolume checks that the claim or DataVolume exists.
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get"}},
			{APIGroups: []string{"cdi.kubevirt.io"}, Resources: []string{"datavolumes"}, Verbs: []string{"get"}},
			// A dataVolumeTemplate's sourceRef: where its DataSource's claim is.
			{APIGroups: []string{"cdi.kubevirt.io"}, Resources: []string{"datasources"}, Verbs: []string{"get"}},
		}}
	b.add(apiRole,
		crb("kubevirt-controller", "kubevirt-controller", "kubevirt-controller"),
		crb("kubevirt-handler", "kubevirt-handler", "kubevirt-handler"),
		crb("kubevirt-apiserver", "kubevirt-apiserver", "kubevirt-apiserver"),
		crb("kubevirt-apiserver-auth-delegator", "system:auth-delegator", "kubevirt-apiserver"),
		// virt-controller and virt-handler review the bearer tokens of
		// /metrics requests (api/securemetrics).
		crb("kubevirt-controller-auth-delegator", "system:auth-delegator", "kubevirt-controller"),
		crb("kubevirt-handler-auth-delegator", "system:auth-delegator", "kubevirt-handler"),
		frontproxy.ReaderBinding("kubevirt-apiserver-auth-reader", ns, "kubevirt-apiserver"),
	)
	for _, r := range UserRoles() {
		b.add(r)
	}
	return nil
}

// secrets are the components' certificates, when given.
func (b *builder) secrets() error {
	if b.c.Certificates != nil {
		b.add(Secrets(b.c.Namespace, b.c.Certificates)...)
	}
	return nil
}

// Secrets are the Secrets holding the components' certificates.
func Secrets(namespace string, c *Certificates) []client.Object {
	secret := func(name string, p KeyPair) *corev1.Secret {
		return &corev1.Secret{TypeMeta: kit.TypeMeta("v1", "Secret"), ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"tls.crt": p.Cert, "tls.key": p.Key, caBundleSecretField: c.CA}}
	}
	return []client.Object{secret(SecretAPICerts, c.API), secret(SecretAPIClient, c.APIClient), secret(SecretHandlerCerts, c.Handler)}
}

// controlPlane is virt-controller with the cluster configuration, and
// virt-api with its service.
func (b *builder) controlPlane() error {
	// The cluster configuration as a ConfigMap mounted into
	// virt-controller, which re-reads the file when the kubelet updates it.
	ccYAML, err := yaml.Marshal(b.c.Configuration)
	if err != nil {
		return fmt.Errorf("cluster configuration: %w", err)
	}
	if _, err := controller.ParseClusterConfig(ccYAML); err != nil {
		return err
	}
	const configDir, configFile = "/etc/kubevmm/config", "config.yaml"
	pull := b.c.PullPolicy
	cm := &corev1.ConfigMap{TypeMeta: kit.TypeMeta("v1", "ConfigMap"), ObjectMeta: b.meta(ConfigMapName), Data: map[string]string{configFile: string(ccYAML)}}
	vc := corev1.Container{Name: VirtControllerName, Image: b.image("virt-controller"), ImagePullPolicy: pull,
		Args: []string{"--launcher-image", b.image("virt-launcher"), "--launcher-image-pull-policy", string(pull), "--health-probe-bind-address=:8081",
			"--config", configDir + "/" + configFile, "--metrics-bind-address=:8443"},
		Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8443}},
		Resources: req("10m", "32Mi"), SecurityContext: nonRoot(), ReadinessProbe: probe(corev1.URISchemeHTTP, 8081),
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: configDir, ReadOnly: true}}}
	// virt-api reads the feature gates (HotplugVolumes) from the same file.
	va := corev1.Container{Name: VirtAPIName, Image: b.image("virt-api"), ImagePullPolicy: pull,
		Args:      []string{"--config", configDir + "/" + configFile},
		Ports:     []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}},
		Env:       []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		Resources: req("10m", "32Mi"), SecurityContext: nonRoot(), ReadinessProbe: probe(corev1.URISchemeHTTPS, 8443),
		VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/etc/virt-api/certs", ReadOnly: true},
			{Name: "handler-client", MountPath: "/etc/virt-api/handler-client", ReadOnly: true},
			{Name: "config", MountPath: configDir, ReadOnly: true}}}
	configVol := corev1.Volume{Name: "config", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName}}}}
	ctrl := b.deploy(VirtControllerName, "kubevirt-controller", vc, []corev1.Volume{configVol})
	api := b.deploy(VirtAPIName, "kubevirt-apiserver", va, []corev1.Volume{secretVol("certs", SecretAPICerts), secretVol("handler-client", SecretAPIClient), configVol})
	b.add(
		cm, ctrl, api,
		&corev1.Service{TypeMeta: kit.TypeMeta("v1", "Service"), ObjectMeta: b.meta(VirtAPIName), Spec: corev1.ServiceSpec{
			Selector: appLabels(VirtAPIName), Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(8443)}}}},
		// virt-controller serves its metrics; virt-api its API, webhooks
		// and metrics, and calls the handlers' API (consoles, pause,
		// guest agent).
		kit.NetworkPolicy(ctrl, kit.Traffic{Serve: []int32{8443}}),
		kit.NetworkPolicy(api, kit.Traffic{Serve: []int32{8443},
			To: []kit.Peer{{Pods: appLabels(VirtHandlerName), Ports: []int32{handler.Port}}}}),
	)
	return nil
}

// handler is the virt-handler DaemonSet.
func (b *builder) handler() error {
	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	// Privileged, in the host's PID namespace: it enters launcher pods'
	// network namespaces (by the PID their sockets report) to build the
	// masquerade network, and serves the kubelet device plugins. It reaches
	// the launchers' sockets in the kubelet's pods directory (their
	// emptyDirs; the launcher pods have no host path) and installs their
	// seccomp profile in the kubelet's seccomp directory. It opens hot-plugged
	// volumes where the kubelet published them for their attachment pods.
	vh := corev1.Container{Name: VirtHandlerName, Image: b.image("virt-handler"), ImagePullPolicy: b.c.PullPolicy,
		Env: []corev1.EnvVar{
			{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		},
		Args: []string{"--device-plugin-dir=/var/lib/kubelet/device-plugins", "--kubelet-pods-dir=/var/lib/kubelet/pods",
			"--kubelet-plugins-dir=/var/lib/kubelet/plugins", "--seccomp-dir=/var/lib/kubelet/seccomp"},
		Ports:     []corev1.ContainerPort{{Name: "api", ContainerPort: handler.Port}, {Name: "migration", ContainerPort: vmispec.HandlerMigrationPort}, {Name: "metrics", ContainerPort: 8443}},
		Resources: req("10m", "32Mi"), ReadinessProbe: probe(corev1.URISchemeHTTP, 8187),
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false)},
		VolumeMounts: []corev1.VolumeMount{
			// HostToContainer: the kubelet's CSI mounts of hot-plugged
			// volumes, made after the handler started, show here.
			{Name: "kubelet-pods", MountPath: "/var/lib/kubelet/pods", MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)},
			// Where CSI publishes a Block volume's device for a pod.
			{Name: "kubelet-plugins", MountPath: "/var/lib/kubelet/plugins", ReadOnly: true, MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)},
			{Name: "seccomp", MountPath: "/var/lib/kubelet/seccomp"},
			{Name: "device-plugins", MountPath: "/var/lib/kubelet/device-plugins"},
			{Name: "certs", MountPath: "/etc/virt-handler/certs", ReadOnly: true},
		}}
	ds := &appsv1.DaemonSet{TypeMeta: kit.TypeMeta("apps/v1", "DaemonSet"), ObjectMeta: b.meta(VirtHandlerName),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: appLabels(VirtHandlerName)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels(VirtHandlerName)},
				Spec: corev1.PodSpec{ServiceAccountName: "kubevirt-handler", HostPID: true, Containers: []corev1.Container{vh},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Volumes: []corev1.Volume{
						hostPath("kubelet-pods", b.c.KubeletRoot+"/pods", corev1.HostPathDirectory),
						hostPath("kubelet-plugins", b.c.KubeletRoot+"/plugins", corev1.HostPathDirectory),
						hostPath("seccomp", b.c.KubeletRoot+"/seccomp", corev1.HostPathDirectoryOrCreate),
						hostPath("device-plugins", b.c.PluginDir, corev1.HostPathDirectory),
						secretVol("certs", SecretHandlerCerts),
					}},
			},
		}}
	// Its API answers virt-api only, its migration port the other nodes'
	// handlers only (both mutual TLS besides); its metrics anyone with a
	// token allowed to read them.
	migration := kit.Peer{Pods: appLabels(VirtHandlerName), Ports: []int32{vmispec.HandlerMigrationPort}}
	b.add(ds, kit.NetworkPolicy(ds, kit.Traffic{Serve: []int32{8443},
		From: []kit.Peer{{Pods: appLabels(VirtAPIName), Ports: []int32{handler.Port}}, migration},
		To:   []kit.Peer{migration}}))
	return nil
}

// webhooks are virt-api's admission webhooks and its APIService, trusting
// the CA bundle.
func (b *builder) webhooks() error {
	ns, ca := b.c.Namespace, b.c.CABundle
	svcRef := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{CABundle: ca,
			Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: VirtAPIName, Path: ptr.To(path), Port: ptr.To(int32(443))}}
	}
	rule := func(res string, ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{v1.GroupName}, APIVersions: []string{"v1"}, Resources: []string{res}}}}
	}
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	fail := ptr.To(admissionregistrationv1.Fail)
	create, update := admissionregistrationv1.Create, admissionregistrationv1.Update
	mw := func(name, path, res string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{Name: name, ClientConfig: svcRef(path), Rules: rule(res, ops...),
			SideEffects: none, FailurePolicy: fail, AdmissionReviewVersions: []string{"v1"}}
	}
	vw := func(name, path, res string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{Name: name, ClientConfig: svcRef(path), Rules: rule(res, ops...),
			SideEffects: none, FailurePolicy: fail, AdmissionReviewVersions: []string{"v1"}}
	}
	// The kube-aggregator's type, unstructured: its Go module is not a
	// dependency of the project.
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": APIServiceName},
		"spec": map[string]any{
			"group": v1.SubresourceGroupName, "version": "v1",
			"service":  map[string]any{"namespace": ns, "name": VirtAPIName, "port": int64(443)},
			"caBundle": base64.StdEncoding.EncodeToString(ca), "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		},
	}}
	b.add(
		&admissionregistrationv1.MutatingWebhookConfiguration{TypeMeta: kit.TypeMeta("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
			ObjectMeta: metav1.ObjectMeta{Name: MutatingWebhooks},
			Webhooks: []admissionregistrationv1.MutatingWebhook{
				mw("virtualmachines-mutator.kubevirt.io", virtapi.PathMutateVM, "virtualmachines", create, update),
				mw("virtualmachineinstances-mutator.kubevirt.io", virtapi.PathMutateVMI, "virtualmachineinstances", create),
			}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{TypeMeta: kit.TypeMeta("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
			ObjectMeta: metav1.ObjectMeta{Name: ValidatingWebhooks},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				vw("virtualmachine-validator.kubevirt.io", virtapi.PathValidateVM, "virtualmachines", create, update),
				vw("virtualmachineinstances-create-validator.kubevirt.io", virtapi.PathValidateVMI, "virtualmachineinstances", create, update),
				vw("migration-create-validator.kubevirt.io", virtapi.PathValidateVMIM, "virtualmachineinstancemigrations", create),
			}},
		apiService,
	)
	return nil
}

// UserRoles are KubeVirt's user-facing ClusterRoles, kubevirt.io:admin,
// :edit and :view. Their labels aggregate them into the cluster's admin,
// edit and view roles: whoever may edit in a namespace may use VMs there,
// subresources (console, start, stop...) included; a viewer may only read
// (what the guest agent reports included).
func UserRoles() []*rbacv1.ClusterRole {
	subres := []string{"virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart", "virtualmachines/migrate",
		"virtualmachines/pause", "virtualmachines/unpause", "virtualmachineinstances/pause", "virtualmachineinstances/unpause",
		"virtualmachineinstances/migrate", "virtualmachineinstances/console",
		"virtualmachineinstances/reset", "virtualmachineinstances/softreboot",
		"virtualmachineinstances/portforward", "virtualmachines/portforward", "virtualmachineinstances/vsock",
		"virtualmachineinstances/freeze", "virtualmachineinstances/unfreeze",
		"virtualmachines/expand-spec", "expand-vm-spec",
		"virtualmachineinstances/addvolume", "virtualmachineinstances/removevolume",
		"virtualmachines/addvolume", "virtualmachines/removevolume"}
	// what the guest agent reports: viewers may read it too, as in KubeVirt
	agentReads := []string{"virtualmachineinstances/guestosinfo", "virtualmachineinstances/userlist", "virtualmachineinstances/filesystemlist"}
	kinds := []string{"virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations", "virtualmachineinstancepresets"}
	role := func(name, label string, verbs []string, withSub bool) *rbacv1.ClusterRole {
		r := &rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1.GroupName}, Resources: kinds, Verbs: verbs},
				// The namespaced instance types and preferences go with the VMs.
				{APIGroups: []string{v1beta1.GroupName}, Resources: []string{"virtualmachineinstancetypes", "virtualmachinepreferences"}, Verbs: verbs}}}
		if withSub {
			r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{v1.SubresourceGroupName}, Resources: subres, Verbs: []string{"get", "update"}})
		}
		r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{v1.SubresourceGroupName}, Resources: agentReads, Verbs: []string{"get"}})
		return r
	}
	rw := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	return []*rbacv1.ClusterRole{
		role("kubevirt.io:admin", "rbac.authorization.k8s.io/aggregate-to-admin", rw, true),
		role("kubevirt.io:edit", "rbac.authorization.k8s.io/aggregate-to-edit", rw, true),
		role("kubevirt.io:view", "rbac.authorization.k8s.io/aggregate-to-view", []string{"get", "list", "watch"}, false),
	}
}
