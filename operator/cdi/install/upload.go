package install

import (
	"encoding/base64"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	uploadv1 "github.com/kubevmm/kubevmm/api/cdi/upload/v1beta1"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/storage/cdi/upload"
)

// The upload path's names (upstream's where it has them).
const (
	APIServer        = "cdi-apiserver"
	APIServerService = "cdi-api"
	UploadProxy      = "cdi-uploadproxy"
	// APIServiceName registers upload.cdi.kubevirt.io/v1beta1.
	APIServiceName = "v1beta1." + uploadv1.GroupName
	// UserRole lets namespace editors and admins request upload tokens.
	UserRole = "cdi.kubevirt.io:upload"
)

// The upload path's Secrets in Namespace, made by the operator: the CA
// (tls.crt, tls.key) that signs the serving certificates of cdi-apiserver
// and cdi-uploadproxy, the proxy's client certificate and (through the
// upload controller) each upload server's; the token key pair
// (token.PrivateKeyKey, token.PublicKeyKey).
const (
	SecretUploadCA          = upload.CASecret
	SecretTokenKey          = "cdi-upload-token-key"
	SecretAPIServerCert     = "cdi-apiserver-server-cert"
	SecretUploadProxyCert   = "cdi-uploadproxy-server-cert"
	SecretUploadProxyClient = "cdi-uploadproxy-client"
)

// secretVolume mounts Secret name (only keys, when given) at path.
func secretVolume(ctr *corev1.Container, spec *corev1.PodSpec, name, path string, keys ...string) {
	src := &corev1.SecretVolumeSource{SecretName: name}
	for _, k := range keys {
		src.Items = append(src.Items, corev1.KeyToPath{Key: k, Path: k})
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: src}})
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: true})
}

// httpsComponent is a Deployment serving HTTPS on 8443 (ready on
// /healthz) behind Service svc (443), open to any caller (it
// authenticates them itself) and sending what t allows.
func httpsComponent(c Config, name, account, svc string, t kit.Traffic, mounts func(*corev1.Container, *corev1.PodSpec)) []client.Object {
	dep := deployment(name, account, corev1.Container{Name: name, Image: c.image(name), ImagePullPolicy: c.PullPolicy,
		Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}}})
	spec := &dep.Spec.Template.Spec
	ctr := &spec.Containers[0]
	ctr.ReadinessProbe.HTTPGet = &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(8443), Scheme: corev1.URISchemeHTTPS}
	mounts(ctr, spec)
	service := &corev1.Service{TypeMeta: kit.TypeMeta("v1", "Service"), ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Selector: dep.Spec.Selector.MatchLabels,
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(8443)}}}}
	t.Serve = append(t.Serve, 8443)
	return []client.Object{dep, service, kit.NetworkPolicy(dep, t)}
}

// APIServerObjects are cdi-apiserver's: RBAC (SubjectAccessReviews, the
// front proxy's settings in kube-system), Deployment, Service cdi-api,
// the APIService (trusting c.UploadCA) and the role that lets namespace
// editors request upload tokens.
func APIServerObjects(c Config) []client.Object {
	// The DataVolume webhook reads the DataSources a sourceRef names.
	out := rbac(APIServer, APIServer, []rbacv1.PolicyRule{
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"datasources"}, Verbs: []string{"get"}}})
	out = append(out,
		&rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: APIServer + "-auth-delegator"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:auth-delegator"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: APIServer, Namespace: Namespace}}},
		frontproxy.ReaderBinding(APIServer+"-auth-reader", Namespace, APIServer),
		&rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: UserRole,
			Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-admin": "true", "rbac.authorization.k8s.io/aggregate-to-edit": "true"}},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{uploadv1.GroupName}, Resources: []string{uploadv1.Resource}, Verbs: []string{"create"}}}},
	)
	out = append(out, httpsComponent(c, APIServer, APIServer, APIServerService, kit.Traffic{}, func(ctr *corev1.Container, spec *corev1.PodSpec) {
		secretVolume(ctr, spec, SecretAPIServerCert, "/etc/cdi-apiserver/server")
		secretVolume(ctr, spec, SecretTokenKey, "/etc/cdi-apiserver/token", token.PrivateKeyKey)
	})...)
	// The kube-aggregator's type, unstructured: its Go module is not a
	// dependency of the project.
	return append(out, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": APIServiceName},
		"spec": map[string]any{
			"group": uploadv1.GroupName, "version": uploadv1.GroupVersion.Version,
			"service":  map[string]any{"namespace": Namespace, "name": APIServerService, "port": int64(443)},
			"caBundle": base64.StdEncoding.EncodeToString(c.UploadCA), "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		},
	}})
}

// UploadProxyObjects are cdi-uploadproxy's: RBAC (it reads PVCs and the
// upload servers' Services), Deployment and Service.
func UploadProxyObjects(c Config) []client.Object {
	out := rbac(UploadProxy, UploadProxy, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims", "services"}, Verbs: []string{"get", "list", "watch"}}})
	// It forwards each upload to the claim's upload server, in the
	// claim's namespace.
	return append(out, httpsComponent(c, UploadProxy, UploadProxy, UploadProxy, kit.Traffic{ToPods: []int32{upload.Port}}, func(ctr *corev1.Container, spec *corev1.PodSpec) {
		secretVolume(ctr, spec, SecretUploadProxyCert, "/etc/cdi-uploadproxy/server")
		secretVolume(ctr, spec, SecretUploadProxyClient, "/etc/cdi-uploadproxy/client")
		secretVolume(ctr, spec, SecretTokenKey, "/etc/cdi-uploadproxy/token", token.PublicKeyKey)
	})...)
}
