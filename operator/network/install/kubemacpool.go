package install

import (
	"errors"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/net/kubemacpool"
	"github.com/kubevmm/kubevmm/net/macpool"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// kubemacpool's objects, upstream's names.
const (
	KubeMacPool        = "kubemacpool-mac-controller-manager" // the Deployment
	KubeMacPoolService = "kubemacpool-service"
	// KubeMacPoolSecret is the serving certificate's Secret (tls.crt,
	// tls.key), for DNS name kubemacpool-service.<namespace>.svc; its
	// maker (the deployer) renews it, the server reads it per handshake.
	KubeMacPoolSecret  = "kubemacpool-service"
	KubeMacPoolWebhook = "kubemacpool-mutator"
	kubeMacPoolAccount = "kubemacpool"
	kubeMacPoolPort    = 8443
)

// KubeMacPoolConfig says what kubemacpool runs and hands out.
type KubeMacPoolConfig struct {
	Image      string
	PullPolicy corev1.PullPolicy
	// RangeStart and RangeEnd are the MAC range (NetworkAddonsConfig
	// spec.kubeMacPool), both required: a caller without one picks
	// macpool.RandomRange once and keeps it, as upstream's operator does.
	RangeStart, RangeEnd string
	// CABundle signs the serving certificate in KubeMacPoolSecret.
	CABundle []byte
}

// KubeMacPoolObjects are kubemacpool's objects in Namespace (which
// Objects makes): the range's ConfigMap, its service account and RBAC,
// the Deployment (one replica, replaced not rolled: its pool is in
// memory), the Service and the MutatingWebhookConfiguration. A range that
// is missing or invalid is an error naming what is wrong.
func KubeMacPoolObjects(c KubeMacPoolConfig) ([]client.Object, error) {
	_, ok, err := macpool.ParseRange(c.RangeStart, c.RangeEnd)
	if err != nil {
		return nil, fmt.Errorf("kubeMacPool: %w", err)
	}
	if !ok {
		return nil, errors.New("kubeMacPool: no MAC range (rangeStart, rangeEnd)")
	}
	if len(c.CABundle) == 0 {
		return nil, errors.New("kubeMacPool: no CA bundle for the webhook's serving certificate")
	}
	cm := &corev1.ConfigMap{TypeMeta: kit.TypeMeta("v1", "ConfigMap"), ObjectMeta: meta(kubemacpool.ConfigMap),
		Data: map[string]string{kubemacpool.KeyRangeStart: c.RangeStart, kubemacpool.KeyRangeEnd: c.RangeEnd}}
	objs := []client.Object{cm}
	objs = append(objs, rbac(kubeMacPoolAccount, kubemacpool.ClusterRoleRules())...)
	objs = append(objs,
		&rbacv1.Role{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "Role"), ObjectMeta: meta("kubevmm:" + kubeMacPoolAccount), Rules: kubemacpool.RoleRules()},
		&rbacv1.RoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"), ObjectMeta: meta("kubevmm:" + kubeMacPoolAccount),
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "kubevmm:" + kubeMacPoolAccount},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: kubeMacPoolAccount, Namespace: Namespace}}})
	// It answers the API server's reviews only, and learns who that is
	// where extension API servers do.
	reader := frontproxy.ReaderBinding("kubevmm:"+kubeMacPoolAccount+"-auth-reader", Namespace, kubeMacPoolAccount)
	reader.Labels = managed()
	objs = append(objs, reader)

	labels := map[string]string{"app": "kubemacpool", "control-plane": "mac-controller-manager"}
	const certDir = "/etc/webhook/certs"
	ctr := corev1.Container{Name: "manager", Image: c.Image, ImagePullPolicy: c.PullPolicy,
		Args:  []string{"--port=" + strconv.Itoa(kubeMacPoolPort), "--cert-dir=" + certDir},
		Env:   []corev1.EnvVar{{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}},
		Ports: []corev1.ContainerPort{{Name: "webhook", ContainerPort: kubeMacPoolPort, Protocol: corev1.ProtocolTCP}},
		// Ready once the pool holds every VM's MACs: only then does the
		// Service send it reviews.
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: kubemacpool.PathReady,
			Port: intstr.FromInt32(kubeMacPoolPort), Scheme: corev1.URISchemeHTTPS}}, PeriodSeconds: 2},
		VolumeMounts:             []corev1.VolumeMount{{Name: "tls", MountPath: certDir, ReadOnly: true}},
		Resources:                requests("10m", "32Mi"),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), RunAsNonRoot: ptr.To(true),
			ReadOnlyRootFilesystem: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	deploy := &appsv1.Deployment{TypeMeta: kit.TypeMeta("apps/v1", "Deployment"), ObjectMeta: meta(KubeMacPool),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			// Two pods at once would each hand out MACs from their own
			// pool.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: kubeMacPoolAccount, Containers: []corev1.Container{ctr},
					SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Volumes:                       []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: KubeMacPoolSecret}}}},
				},
			},
		}}
	svc := &corev1.Service{TypeMeta: kit.TypeMeta("v1", "Service"), ObjectMeta: meta(KubeMacPoolService),
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "webhook", Port: 443, TargetPort: intstr.FromInt32(kubeMacPoolPort)}}}}
	hook := kubemacpool.MutatingWebhook(KubeMacPoolWebhook, Namespace, KubeMacPoolService, c.CABundle)
	hook.Labels = managed()
	// Its webhook answers the API server only (client certificate).
	return append(objs, deploy, svc, hook, kit.NetworkPolicy(deploy, kit.Traffic{Serve: []int32{kubeMacPoolPort}})), nil
}
