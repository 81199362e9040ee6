// Package install builds the objects of the hostpath provisioner: the
// CSI driver's DaemonSet, the CSIDriver object and their RBAC, which the
// HostPathProvisioner CR's operator (operator/hostpath) applies, and the
// StorageClasses, which users make (upstream's operator makes none either;
// hack/cluster/manifests prints the dev cluster's).
package install

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/storage/hostpath"
)

// Namespace is the hostpath provisioner's namespace, upstream's: its
// operator and the driver run there.
const Namespace = "hostpath-provisioner"

// Name is the driver's DaemonSet, service account and RBAC objects.
const Name = "hostpath-provisioner"

// StorageClass is the default StorageClass of the dev cluster.
const StorageClass = "hostpath-csi"

// SharedStorageClass is the class whose volumes are shared by the pods of
// their node (hostpath.SharedOnNodeParameter): ReadWriteMany claims, for
// a VMI's same-node live migration on the dev cluster.
const SharedStorageClass = "hostpath-csi-shared"

// Pool is one storage pool: its name and its directory on the nodes.
type Pool struct{ Name, Path string }

// Config says where the driver runs and what it serves.
type Config struct {
	Image       string            // the driver's image
	PullPolicy  corev1.PullPolicy // of its container
	KubeletRoot string            // the kubelet's --root-dir on the nodes
	Pools       []Pool            // the storage pools, the same on every node
	// NodeSelector, Tolerations and Affinity place the driver's pods;
	// nil Tolerations tolerate every taint (a node's volumes need their
	// driver whatever its taints).
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	Affinity     *corev1.Affinity
}

// NamespaceObject is the namespace, privileged: the driver bind-mounts
// volumes and attaches loop devices.
func NamespaceObject() *corev1.Namespace {
	return &corev1.Namespace{TypeMeta: kit.TypeMeta("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: Namespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
}

// Objects are the hostpath provisioner in Namespace: its CSI driver and
// provisioner as a DaemonSet (one per node, every pool at its path), the
// CSIDriver object (storage capacity tracked: the daemons publish
// CSIStorageCapacity objects, which the scheduler reads) and their RBAC.
func Objects(c Config) []client.Object {
	meta := func(n string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: n, Namespace: Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "kubevmm"}}
	}
	role := &rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: Name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "delete", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		}}
	// Its capacity objects, in its namespace, owned by its DaemonSet.
	nsRole := &rbacv1.Role{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "Role"), ObjectMeta: meta(Name),
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"csistoragecapacities"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
		}}
	hostPath := func(n, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	// Privileged: it bind-mounts volumes and attaches loop devices. The
	// kubelet's directory is mounted at its host path with bidirectional
	// propagation, so the mounts it makes under it (the targets the
	// kubelet names, host paths) are the host's; the pools too are at
	// their host paths; /dev is the host's, where new loop devices appear.
	bidi := corev1.MountPropagationBidirectional
	args := []string{"--kubelet-root=" + c.KubeletRoot, "--capacity-owner=" + Name}
	mounts := []corev1.VolumeMount{{Name: "kubelet", MountPath: c.KubeletRoot, MountPropagation: &bidi}, {Name: "dev", MountPath: "/dev"}}
	vols := []corev1.Volume{hostPath("kubelet", c.KubeletRoot, corev1.HostPathDirectory), hostPath("dev", "/dev", corev1.HostPathDirectory)}
	for i, p := range c.Pools {
		v := fmt.Sprintf("pool-%d", i)
		args = append(args, "--storage-pool="+p.Name+"="+p.Path)
		mounts = append(mounts, corev1.VolumeMount{Name: v, MountPath: p.Path})
		vols = append(vols, hostPath(v, p.Path, corev1.HostPathDirectoryOrCreate))
	}
	fieldEnv := func(n, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: n, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	ctr := corev1.Container{Name: Name, Image: c.Image, ImagePullPolicy: c.PullPolicy, Args: args,
		Env: []corev1.EnvVar{fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_NAMESPACE", "metadata.namespace")},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("24Mi")}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 2, ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(8188), Scheme: corev1.URISchemeHTTP}}},
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false)},
		VolumeMounts:    mounts}
	tolerations := c.Tolerations
	if tolerations == nil {
		tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	ds := &appsv1.DaemonSet{TypeMeta: kit.TypeMeta("apps/v1", "DaemonSet"), ObjectMeta: meta(Name),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: appLabels(Name)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels(Name)},
				Spec: corev1.PodSpec{ServiceAccountName: Name, Containers: []corev1.Container{ctr},
					NodeSelector: c.NodeSelector, Tolerations: tolerations, Affinity: c.Affinity,
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Volumes:                       vols},
			},
		}}
	// No attacher (volumes are on their node) and no pod information on
	// mount; persistent volumes only. The kubelet gives a Filesystem
	// volume to the pod's fsGroup (File: the volumes have no fsType), so
	// a non-root virt-launcher can make its disk.img there.
	driver := &storagev1.CSIDriver{TypeMeta: kit.TypeMeta("storage.k8s.io/v1", "CSIDriver"), ObjectMeta: metav1.ObjectMeta{Name: hostpath.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false),
			FSGroupPolicy:        ptr.To(storagev1.FileFSGroupPolicy),
			StorageCapacity:      ptr.To(true),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}
	return []client.Object{
		&corev1.ServiceAccount{TypeMeta: kit.TypeMeta("v1", "ServiceAccount"), ObjectMeta: meta(Name)},
		role,
		&rbacv1.ClusterRoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: Name, Namespace: Namespace}}},
		nsRole,
		&rbacv1.RoleBinding{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"), ObjectMeta: meta(Name),
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: Name, Namespace: Namespace}}},
		driver, ds,
		// The driver talks to the kubelet over unix sockets, and to the
		// API server.
		kit.NetworkPolicy(ds, kit.Traffic{}),
	}
}

// StorageClasses are the dev cluster's classes of pool: hostpath-csi, the
// default (volumes may grow), and hostpath-csi-shared (the same, its
// claims may be ReadWriteMany: shared on their node).
func StorageClasses(pool string) []client.Object {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{TypeMeta: kit.TypeMeta("storage.k8s.io/v1", "StorageClass"),
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       hostpath.DriverName,
		Parameters:        map[string]string{hostpath.StoragePoolParameter: pool},
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: &wffc, AllowVolumeExpansion: ptr.To(true)}
	shared := sc.DeepCopy()
	shared.Name, shared.Annotations = SharedStorageClass, nil
	shared.Parameters[hostpath.SharedOnNodeParameter] = "true"
	return []client.Object{sc, shared}
}

func appLabels(app string) map[string]string { return map[string]string{"kubevirt.io": app} }
