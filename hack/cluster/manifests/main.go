// Command manifests prints everything that deploys kubevmm's components
// into a cluster, as one YAML stream for `kubectl apply --server-side`:
// namespace kubevirt, service accounts and RBAC (virt-controller's and
// virt-handler's ClusterRoles generated from their RBAC markers),
// TLS secrets, the virt-controller and virt-api Deployments, the
// virt-handler DaemonSet, the virt-api Service, the admission webhooks and
// the subresources.kubevirt.io APIService. The CRDs are applied from
// api/crds beside it.
//
// Certificates: a CA and the leaf certificates (virt-api's serving
// certificate, virt-handler's and virt-api's for their mutual TLS) are
// generated on first use and kept in -pki, so repeated syncs apply the
// same bytes. They are not rotated (see the report of issue 5).
package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
	"github.com/kubevmm/kubevmm/controller"
	controllerrbac "github.com/kubevmm/kubevmm/controller/rbac"
	"github.com/kubevmm/kubevmm/handler"
	handlerrbac "github.com/kubevmm/kubevmm/handler/rbac"
	"github.com/kubevmm/kubevmm/launcher/spec"
	"github.com/kubevmm/kubevmm/virtapi"
)

type opts struct {
	namespace, imagePrefix, tag, pki, pluginDir string
	kubeletRoot, featureGates                   string
	pull                                        corev1.PullPolicy
}

func main() {
	var o opts
	var pull string
	flag.StringVar(&o.namespace, "namespace", "kubevirt", "namespace of the components")
	flag.StringVar(&o.imagePrefix, "image-prefix", "localhost/kubevmm", "image repository prefix")
	flag.StringVar(&o.tag, "tag", "devel", "image tag")
	flag.StringVar(&o.pki, "pki", "", "directory keeping the generated CA and certificates (required)")
	flag.StringVar(&o.pluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory on the nodes")
	flag.StringVar(&o.kubeletRoot, "kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir on the nodes (its pods and seccomp directories are below)")
	flag.StringVar(&pull, "pull-policy", string(corev1.PullNever), "image pull policy (Never: images are imported, no registry)")
	// The dev cluster has one node: without SameNodeLiveMigration a
	// migration's target pod could never be scheduled there.
	flag.StringVar(&o.featureGates, "feature-gates", controller.FeatureGateSameNodeLiveMigration, "comma-separated feature gates of the cluster configuration (virt-controller's --config)")
	flag.Parse()
	o.pull = corev1.PullPolicy(pull)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func run(o opts) error {
	if o.pki == "" {
		return errors.New("-pki is required")
	}
	ca, err := loadOrCreateCA(o.pki)
	if err != nil {
		return err
	}
	m := &manifests{o: o}
	for _, step := range []func() error{
		m.rbac,
		func() error { return m.secrets(ca) },
		m.controlPlane,
		m.handler,
		func() error { return m.webhooks(ca) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	for _, d := range m.docs {
		fmt.Printf("---\n%s", d)
	}
	return nil
}

// manifests collects the YAML documents of the deployment.
type manifests struct {
	o    opts
	docs [][]byte
}

func (m *manifests) add(objs ...any) error {
	for _, obj := range objs {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		m.docs = append(m.docs, b)
	}
	return nil
}

func (m *manifests) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: m.o.namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "kubevmm"}}
}

func tm(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func (m *manifests) image(n string) string { return m.o.imagePrefix + "/" + n + ":" + m.o.tag }

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

func (m *manifests) deploy(name, sa string, c corev1.Container, vols []corev1.Volume) *appsv1.Deployment {
	return &appsv1.Deployment{TypeMeta: tm("apps/v1", "Deployment"), ObjectMeta: m.meta(name),
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

// rbac is the namespace, the service accounts and their roles.
func (m *manifests) rbac() error {
	ns := m.o.namespace
	// Said, not left to the cluster's default: virt-handler is privileged
	// (it builds the launchers' networks and serves device plugins), which
	// only the "privileged" PodSecurity level admits.
	if err := m.add(&corev1.Namespace{TypeMeta: tm("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}); err != nil {
		return err
	}
	// The generated ClusterRoles, as they are.
	m.docs = append(m.docs, bytes.TrimPrefix(controllerrbac.ClusterRole, []byte("---\n")), bytes.TrimPrefix(handlerrbac.ClusterRole, []byte("---\n")))

	for _, sa := range []string{"kubevirt-controller", "kubevirt-handler", "kubevirt-apiserver"} {
		if err := m.add(&corev1.ServiceAccount{TypeMeta: tm("v1", "ServiceAccount"), ObjectMeta: m.meta(sa)}); err != nil {
			return err
		}
	}
	crb := func(name, role, sa string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{TypeMeta: tm("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
	}
	apiRole := &rbacv1.ClusterRole{TypeMeta: tm("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-apiserver"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachines", "virtualmachineinstances"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachines/status"}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{v1.GroupName}, Resources: []string{"virtualmachineinstancemigrations"}, Verbs: []string{"create", "get", "list"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
			// expand-spec reads what a VM's instance type and preference name.
			{APIGroups: []string{v1beta1.GroupName}, Resources: []string{"virtualmachineinstancetypes", "virtualmachineclusterinstancetypes", "virtualmachinepreferences", "virtualmachineclusterpreferences"}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"controllerrevisions"}, Verbs: []string{"get"}},
		}}
	if err := m.add(apiRole,
		crb("kubevirt-controller", "kubevirt-controller", "kubevirt-controller"),
		crb("kubevirt-handler", "kubevirt-handler", "kubevirt-handler"),
		crb("kubevirt-apiserver", "kubevirt-apiserver", "kubevirt-apiserver"),
		crb("kubevirt-apiserver-auth-delegator", "system:auth-delegator", "kubevirt-apiserver"),
		&rbacv1.RoleBinding{TypeMeta: tm("rbac.authorization.k8s.io/v1", "RoleBinding"),
			ObjectMeta: metav1.ObjectMeta{Name: "kubevirt-apiserver-auth-reader", Namespace: "kube-system"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "extension-apiserver-authentication-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "kubevirt-apiserver", Namespace: ns}}},
	); err != nil {
		return err
	}
	for _, r := range userRoles() {
		if err := m.add(r); err != nil {
			return err
		}
	}
	return nil
}

// secrets are the components' certificates, signed by ca.
func (m *manifests) secrets(ca *authority) error {
	o := m.o
	svc := "virt-api." + o.namespace + ".svc"
	apiCert, err := ca.leaf(o.pki, "virt-api", svc, []string{"virt-api", svc, svc + ".cluster.local"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	// Server for virt-api; both server and client between handlers, which
	// carry live migration streams to each other (handler.MigrationTLS).
	handlerCert, err := ca.leaf(o.pki, "virt-handler", handler.HandlerName, nil, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	apiClient, err := ca.leaf(o.pki, "virt-api-client", handler.VirtAPIClientName, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}

	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{TypeMeta: tm("v1", "Secret"), ObjectMeta: m.meta(name), Type: corev1.SecretTypeOpaque, Data: data}
	}
	if err := m.add(
		secret("virt-api-certs", map[string][]byte{"tls.crt": apiCert.cert, "tls.key": apiCert.key, "ca.crt": ca.certPEM}),
		secret("virt-api-handler-client", map[string][]byte{"tls.crt": apiClient.cert, "tls.key": apiClient.key, "ca.crt": ca.certPEM}),
		secret("virt-handler-certs", map[string][]byte{"tls.crt": handlerCert.cert, "tls.key": handlerCert.key, "ca.crt": ca.certPEM}),
	); err != nil {
		return err
	}
	return nil
}

// controlPlane is virt-controller with the cluster configuration, and
// virt-api with its service.
func (m *manifests) controlPlane() error {
	// The cluster configuration (KubeVirt's spec.configuration; there is
	// no operator yet), as a ConfigMap mounted into virt-controller, which
	// re-reads the file when the kubelet updates it.
	var cc controller.ClusterConfig
	if m.o.featureGates != "" {
		cc.DeveloperConfiguration.FeatureGates = strings.Split(m.o.featureGates, ",")
	}
	ccYAML, err := yaml.Marshal(cc)
	if err != nil {
		return fmt.Errorf("cluster configuration: %w", err)
	}
	if _, err := controller.ParseClusterConfig(ccYAML); err != nil {
		return err
	}
	const configDir, configFile = "/etc/kubevmm/config", "config.yaml"
	cm := &corev1.ConfigMap{TypeMeta: tm("v1", "ConfigMap"), ObjectMeta: m.meta("kubevmm-config"), Data: map[string]string{configFile: string(ccYAML)}}
	vc := corev1.Container{Name: "virt-controller", Image: m.image("virt-controller"), ImagePullPolicy: m.o.pull,
		Args: []string{"--launcher-image", m.image("virt-launcher"), "--launcher-image-pull-policy", string(m.o.pull), "--health-probe-bind-address=:8081",
			"--config", configDir + "/" + configFile, "--metrics-bind-address=:8443"},
		Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8443}},
		Resources: req("10m", "32Mi"), SecurityContext: nonRoot(), ReadinessProbe: probe(corev1.URISchemeHTTP, 8081),
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: configDir, ReadOnly: true}}}
	va := corev1.Container{Name: "virt-api", Image: m.image("virt-api"), ImagePullPolicy: m.o.pull,
		Ports:     []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}},
		Env:       []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		Resources: req("10m", "32Mi"), SecurityContext: nonRoot(), ReadinessProbe: probe(corev1.URISchemeHTTPS, 8443),
		VolumeMounts: []corev1.VolumeMount{{Name: "certs", MountPath: "/etc/virt-api/certs", ReadOnly: true},
			{Name: "handler-client", MountPath: "/etc/virt-api/handler-client", ReadOnly: true}}}
	if err := m.add(
		cm,
		m.deploy("virt-controller", "kubevirt-controller", vc, []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kubevmm-config"}}}}}),
		m.deploy("virt-api", "kubevirt-apiserver", va, []corev1.Volume{secretVol("certs", "virt-api-certs"), secretVol("handler-client", "virt-api-handler-client")}),
		&corev1.Service{TypeMeta: tm("v1", "Service"), ObjectMeta: m.meta("virt-api"), Spec: corev1.ServiceSpec{
			Selector: appLabels("virt-api"), Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(8443)}}}},
	); err != nil {
		return err
	}
	return nil
}

// handler is the virt-handler DaemonSet.
func (m *manifests) handler() error {
	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	// Privileged, in the host's PID namespace: it enters launcher pods'
	// network namespaces (by the PID their sockets report) to build the
	// masquerade network, and serves the kubelet device plugins. It reaches
	// the launchers' sockets in the kubelet's pods directory (their
	// emptyDirs; the launcher pods have no host path) and installs their
	// seccomp profile in the kubelet's seccomp directory.
	vh := corev1.Container{Name: "virt-handler", Image: m.image("virt-handler"), ImagePullPolicy: m.o.pull,
		Env: []corev1.EnvVar{
			{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		},
		Args:      []string{"--device-plugin-dir=/var/lib/kubelet/device-plugins", "--kubelet-pods-dir=/var/lib/kubelet/pods", "--seccomp-dir=/var/lib/kubelet/seccomp"},
		Ports:     []corev1.ContainerPort{{Name: "api", ContainerPort: handler.Port}, {Name: "migration", ContainerPort: spec.HandlerMigrationPort}, {Name: "metrics", ContainerPort: 8443}},
		Resources: req("10m", "32Mi"), ReadinessProbe: probe(corev1.URISchemeHTTP, 8187),
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false)},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "kubelet-pods", MountPath: "/var/lib/kubelet/pods"},
			{Name: "seccomp", MountPath: "/var/lib/kubelet/seccomp"},
			{Name: "device-plugins", MountPath: "/var/lib/kubelet/device-plugins"},
			{Name: "certs", MountPath: "/etc/virt-handler/certs", ReadOnly: true},
		}}
	ds := &appsv1.DaemonSet{TypeMeta: tm("apps/v1", "DaemonSet"), ObjectMeta: m.meta("virt-handler"),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: appLabels("virt-handler")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels("virt-handler")},
				Spec: corev1.PodSpec{ServiceAccountName: "kubevirt-handler", HostPID: true, Containers: []corev1.Container{vh},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Volumes: []corev1.Volume{
						hostPath("kubelet-pods", m.o.kubeletRoot+"/pods", corev1.HostPathDirectory),
						hostPath("seccomp", m.o.kubeletRoot+"/seccomp", corev1.HostPathDirectoryOrCreate),
						hostPath("device-plugins", m.o.pluginDir, corev1.HostPathDirectory),
						secretVol("certs", "virt-handler-certs"),
					}},
			},
		}}
	if err := m.add(ds); err != nil {
		return err
	}
	return nil
}

// webhooks are virt-api's admission webhooks and its APIService, trusting
// ca.
func (m *manifests) webhooks(ca *authority) error {
	ns := m.o.namespace
	svcRef := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{CABundle: ca.certPEM,
			Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "virt-api", Path: ptr.To(path), Port: ptr.To(int32(443))}}
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
	if err := m.add(
		&admissionregistrationv1.MutatingWebhookConfiguration{TypeMeta: tm("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
			ObjectMeta: metav1.ObjectMeta{Name: "virt-api-mutator"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{
				mw("virtualmachines-mutator.kubevirt.io", virtapi.PathMutateVM, "virtualmachines", create, update),
				mw("virtualmachineinstances-mutator.kubevirt.io", virtapi.PathMutateVMI, "virtualmachineinstances", create),
			}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{TypeMeta: tm("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
			ObjectMeta: metav1.ObjectMeta{Name: "virt-api-validator"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				vw("virtualmachine-validator.kubevirt.io", virtapi.PathValidateVM, "virtualmachines", create, update),
				vw("virtualmachineinstances-create-validator.kubevirt.io", virtapi.PathValidateVMI, "virtualmachineinstances", create, update),
				vw("migration-create-validator.kubevirt.io", virtapi.PathValidateVMIM, "virtualmachineinstancemigrations", create),
			}},
		// The kube-aggregator's type, written as a map: its Go module is not
		// a dependency of the project.
		map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{"name": "v1." + v1.SubresourceGroupName},
			"spec": map[string]any{
				"group": v1.SubresourceGroupName, "version": "v1",
				"service":  map[string]any{"namespace": ns, "name": "virt-api", "port": 443},
				"caBundle": ca.certPEM, "groupPriorityMinimum": 1000, "versionPriority": 15,
			},
		},
	); err != nil {
		return err
	}
	return nil
}

type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

type leafCert struct{ cert, key []byte }

// userRoles are KubeVirt's user-facing ClusterRoles, kubevirt.io:admin,
// :edit and :view. Their labels aggregate them into the cluster's admin,
// edit and view roles: whoever may edit in a namespace may use VMs there,
// subresources (console, start, stop...) included; a viewer may only read
// (what the guest agent reports included).
func userRoles() []*rbacv1.ClusterRole {
	subres := []string{"virtualmachines/start", "virtualmachines/stop", "virtualmachines/restart", "virtualmachines/migrate",
		"virtualmachines/pause", "virtualmachines/unpause", "virtualmachineinstances/pause", "virtualmachineinstances/unpause",
		"virtualmachineinstances/migrate", "virtualmachineinstances/console",
		"virtualmachineinstances/reset", "virtualmachineinstances/softreboot",
		"virtualmachineinstances/portforward", "virtualmachines/portforward", "virtualmachineinstances/vsock",
		"virtualmachineinstances/freeze", "virtualmachineinstances/unfreeze",
		"virtualmachines/expand-spec", "expand-vm-spec"}
	// what the guest agent reports: viewers may read it too, as in KubeVirt
	agentReads := []string{"virtualmachineinstances/guestosinfo", "virtualmachineinstances/userlist", "virtualmachineinstances/filesystemlist"}
	kinds := []string{"virtualmachines", "virtualmachineinstances", "virtualmachineinstancemigrations"}
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

func pemBlock(t string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: t, Bytes: b}) }

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func loadOrCreateCA(dir string) (*authority, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if cb, err := os.ReadFile(certPath); err == nil {
		kb, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, err
		}
		c, k, err := parsePair(cb, kb)
		if err != nil {
			return nil, fmt.Errorf("CA in %s: %w", dir, err)
		}
		return &authority{cert: c, key: k, certPEM: cb}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "kubevmm-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cb := pemBlock("CERTIFICATE", der)
	if err := os.WriteFile(keyPath, pemBlock("EC PRIVATE KEY", kder), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(certPath, cb, 0o644); err != nil {
		return nil, err
	}
	c, _ := x509.ParseCertificate(der)
	return &authority{cert: c, key: key, certPEM: cb}, nil
}

func parsePair(cb, kb []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(cb)
	if b == nil {
		return nil, nil, errors.New("no certificate PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, err
	}
	kbk, _ := pem.Decode(kb)
	if kbk == nil {
		return nil, nil, errors.New("no key PEM")
	}
	k, err := x509.ParseECPrivateKey(kbk.Bytes)
	return c, k, err
}

// leaf loads or issues the certificate file name.crt/.key in dir.
func (a *authority) leaf(dir, name, cn string, dns []string, usage ...x509.ExtKeyUsage) (leafCert, error) {
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if cb, err := os.ReadFile(certPath); err == nil {
		if kb, err := os.ReadFile(keyPath); err == nil {
			if c, _, err := parsePair(cb, kb); err == nil && time.Until(c.NotAfter) > 30*24*time.Hour && c.CheckSignatureFrom(a.cert) == nil &&
				slices.Equal(c.ExtKeyUsage, usage) {
				return leafCert{cert: cb, key: kb}, nil
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return leafCert{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return leafCert{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return leafCert{}, err
	}
	l := leafCert{cert: pemBlock("CERTIFICATE", der), key: pemBlock("EC PRIVATE KEY", kder)}
	if err := os.WriteFile(keyPath, l.key, 0o600); err != nil {
		return leafCert{}, err
	}
	return l, os.WriteFile(certPath, l.cert, 0o644)
}
