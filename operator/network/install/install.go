// Package install builds the objects that deploy the network add-ons on a
// cluster: the NetworkAttachmentDefinition CRD, the kubevmm-multus
// meta-plugin's node installer and bridge-marker, each a DaemonSet, and
// their RBAC, per component. The NetworkAddonsConfig operator
// (operator/network) deploys them; hack/cluster/manifests prints them all
// without -operator.
package install

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/nad/crd"
	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
	"github.com/kubevmm/kubevmm/net/multus"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
)

// Namespace is the network add-ons' namespace, the cluster network
// addons operator's.
const Namespace = "cluster-network-addons"

// Names of the DaemonSets (and their service accounts and roles).
const (
	Multus       = "kubevmm-multus"
	BridgeMarker = "bridge-marker"
)

// Config says what the add-ons run and where the nodes keep CNI files.
type Config struct {
	MultusImage, BridgeMarkerImage string
	PullPolicy                     corev1.PullPolicy
	// CNIBinDir and CNIConfDir are the container runtime's CNI
	// directories on the nodes (containerd's bin_dir and conf_dir).
	CNIBinDir, CNIConfDir string
	// ClusterNetwork is the pod network's conf file in CNIConfDir, which
	// the meta-plugin delegates the pod's own interface to.
	ClusterNetwork string
}

// Objects are the network add-ons. The NetworkAttachmentDefinition CRD
// comes first: the caller applies the objects in order.
func Objects(c Config) ([]client.Object, error) {
	objs, err := MultusObjects(c)
	if err != nil {
		return nil, err
	}
	objs = append([]client.Object{objs[0], NamespaceObject()}, objs[1:]...)
	return append(objs, LinuxBridgeObjects(c)...), nil
}

// NamespaceObject is the add-ons' namespace (privileged: the DaemonSets
// use host paths and the host's network).
func NamespaceObject() *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: kit.TypeMeta("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: Namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
}

// MultusObjects are the meta-plugin's: the NetworkAttachmentDefinition CRD
// first, then its RBAC and DaemonSet (in Namespace).
func MultusObjects(c Config) ([]client.Object, error) {
	nadCRD, err := crd.NetworkAttachmentDefinition()
	if err != nil {
		return nil, err
	}
	nadCRD.TypeMeta = kit.TypeMeta("apiextensions.k8s.io/v1", "CustomResourceDefinition")
	objs := []client.Object{nadCRD}
	objs = append(objs, rbac(Multus, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{nadv1.GroupName}, Resources: []string{nadv1.Resource}, Verbs: []string{"get", "list"}},
	})...)
	return append(objs, multusDaemonSet(c)), nil
}

// LinuxBridgeObjects are bridge-marker's RBAC and DaemonSet (in
// Namespace).
func LinuxBridgeObjects(c Config) []client.Object {
	objs := rbac(BridgeMarker, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	})
	return append(objs, bridgeMarkerDaemonSet(c))
}

// multusDaemonSet runs `kubevmm-multus install` on every node: the binary,
// its kubeconfig and 00-multus.conflist into the node's CNI directories,
// mounted at their host paths (the files it writes name host paths). Host
// network: the node's pod network may be the meta-plugin itself, which
// this pod must not need to start.
func multusDaemonSet(c Config) *appsv1.DaemonSet {
	ctr := corev1.Container{Name: Multus, Image: c.MultusImage, ImagePullPolicy: c.PullPolicy,
		Args: []string{"install", "--bin-dir=" + c.CNIBinDir, "--conf-dir=" + c.CNIConfDir,
			"--cluster-network=" + c.ClusterNetwork, "--cni-dir=" + multus.DefaultCNIDir},
		Resources: requests("10m", "16Mi"),
		// Root, the owner of the host's CNI directories; no capabilities.
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false),
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "cni-bin", MountPath: c.CNIBinDir}, {Name: "cni-conf", MountPath: c.CNIConfDir}}}
	return daemonSet(Multus, ctr, []corev1.Volume{
		hostPath("cni-bin", c.CNIBinDir), hostPath("cni-conf", c.CNIConfDir)})
}

// bridgeMarkerDaemonSet publishes each node's bridges; host network, to
// see the host's links. Its init container first installs the bridge and
// tuning CNI plugins its image carries into the node's CNI bin directory
// (as root, the directory's owner; no capabilities), as upstream's
// linux-bridge DaemonSet does.
func bridgeMarkerDaemonSet(c Config) *appsv1.DaemonSet {
	ctr := corev1.Container{Name: BridgeMarker, Image: c.BridgeMarkerImage, ImagePullPolicy: c.PullPolicy,
		Env:       []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
		Resources: requests("10m", "16Mi"),
		SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	plugins := corev1.Container{Name: "cni-plugins", Image: c.BridgeMarkerImage, ImagePullPolicy: c.PullPolicy,
		Args:      []string{"install-plugins", "--bin-dir=" + c.CNIBinDir},
		Resources: requests("10m", "16Mi"),
		SecurityContext: &corev1.SecurityContext{RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false),
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
		VolumeMounts: []corev1.VolumeMount{{Name: "cni-bin", MountPath: c.CNIBinDir}}}
	ds := daemonSet(BridgeMarker, ctr, []corev1.Volume{hostPath("cni-bin", c.CNIBinDir)})
	ds.Spec.Template.Spec.InitContainers = []corev1.Container{plugins}
	return ds
}

func daemonSet(name string, ctr corev1.Container, vols []corev1.Volume) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{TypeMeta: kit.TypeMeta("apps/v1", "DaemonSet"), ObjectMeta: meta(name),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{ServiceAccountName: name, HostNetwork: true, Containers: []corev1.Container{ctr},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					TerminationGracePeriodSeconds: ptr.To(int64(5)), Volumes: vols},
			},
		}}
}

func rbac(name string, rules []rbacv1.PolicyRule) []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{TypeMeta: kit.TypeMeta("v1", "ServiceAccount"), ObjectMeta: meta(name)},
		&rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: "kubevmm:" + name, Labels: managed()}, Rules: rules},
		&rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: "kubevmm:" + name, Labels: managed()},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "kubevmm:" + name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: Namespace}}},
	}
}

func hostPath(name, path string) corev1.Volume {
	t := corev1.HostPathDirectoryOrCreate
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
}

func requests(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
}

func managed() map[string]string { return map[string]string{"app.kubernetes.io/managed-by": "kubevmm"} }

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: Namespace, Labels: managed()}
}
