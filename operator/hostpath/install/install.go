// Package install builds the objects that deploy the hostpath provisioner
// on a cluster: what the HostPathProvisioner CR's operator will reconcile
// (later work); today hack/cluster/manifests prints them for cluster-sync.
package install

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/storage/hostpath"
)

// Namespace is the hostpath provisioner's namespace, upstream's.
const Namespace = "hostpath-provisioner"

// StorageClass is the default StorageClass it serves.
const StorageClass = "hostpath-csi"

// SharedStorageClass is the class whose volumes are shared by the pods of
// their node (hostpath.SharedOnNodeParameter): ReadWriteMany claims, for
// a VMI's same-node live migration on the dev cluster.
const SharedStorageClass = "hostpath-csi-shared"

// Config says where the provisioner runs and what it serves.
type Config struct {
	Image       string            // the provisioner's image
	PullPolicy  corev1.PullPolicy // of its container
	KubeletRoot string            // the kubelet's --root-dir on the nodes
	PoolPath    string            // the storage pool "local" on the nodes
}

// Objects are the hostpath provisioner: its CSI driver and provisioner as
// a DaemonSet (one per node, the node's pool at c.PoolPath), the CSIDriver
// object, the default StorageClass hostpath-csi (volumes may grow),
// hostpath-csi-shared (the same, its claims may be ReadWriteMany: shared
// on their node) and their RBAC.
func Objects(c Config) []client.Object {
	ns := Namespace
	const name = "hostpath-provisioner"
	meta := func(n string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: n, Namespace: ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "kubevmm"}}
	}
	role := &rbacv1.ClusterRole{TypeMeta: tm("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"persistentvolumes"}, Verbs: []string{"get", "list", "watch", "create", "delete", "patch"}},
			{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		}}
	hostPath := func(n, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: n, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	// Privileged: it bind-mounts volumes and attaches loop devices. The
	// kubelet's directory is mounted at its host path with bidirectional
	// propagation, so the mounts it makes under it (the targets the
	// kubelet names, host paths) are the host's; the pool too is at its
	// host path; /dev is the host's, where new loop devices appear.
	bidi := corev1.MountPropagationBidirectional
	ctr := corev1.Container{Name: name, Image: c.Image, ImagePullPolicy: c.PullPolicy,
		Args: []string{"--kubelet-root=" + c.KubeletRoot, "--storage-pool=local=" + c.PoolPath},
		Env:  []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("24Mi")}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 2, ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt(8188), Scheme: corev1.URISchemeHTTP}}},
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false)},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "kubelet", MountPath: c.KubeletRoot, MountPropagation: &bidi},
			{Name: "pool", MountPath: c.PoolPath},
			{Name: "dev", MountPath: "/dev"},
		}}
	ds := &appsv1.DaemonSet{TypeMeta: tm("apps/v1", "DaemonSet"), ObjectMeta: meta(name),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: appLabels(name)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels(name)},
				Spec: corev1.PodSpec{ServiceAccountName: name, Containers: []corev1.Container{ctr},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Volumes: []corev1.Volume{
						hostPath("kubelet", c.KubeletRoot, corev1.HostPathDirectory),
						hostPath("pool", c.PoolPath, corev1.HostPathDirectoryOrCreate),
						hostPath("dev", "/dev", corev1.HostPathDirectory),
					}},
			},
		}}
	// No attacher (volumes are on their node) and no pod information on
	// mount; persistent volumes only. The kubelet gives a Filesystem
	// volume to the pod's fsGroup (File: the volumes have no fsType), so
	// a non-root virt-launcher can make its disk.img there.
	driver := &storagev1.CSIDriver{TypeMeta: tm("storage.k8s.io/v1", "CSIDriver"), ObjectMeta: metav1.ObjectMeta{Name: hostpath.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false),
			FSGroupPolicy:        ptr.To(storagev1.FileFSGroupPolicy),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{TypeMeta: tm("storage.k8s.io/v1", "StorageClass"),
		ObjectMeta:        metav1.ObjectMeta{Name: StorageClass, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       hostpath.DriverName,
		Parameters:        map[string]string{hostpath.StoragePoolParameter: "local"},
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: &wffc, AllowVolumeExpansion: ptr.To(true)}
	shared := sc.DeepCopy()
	shared.Name, shared.Annotations = SharedStorageClass, nil
	shared.Parameters[hostpath.SharedOnNodeParameter] = "true"
	return []client.Object{
		&corev1.Namespace{TypeMeta: tm("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}},
		&corev1.ServiceAccount{TypeMeta: tm("v1", "ServiceAccount"), ObjectMeta: meta(name)},
		role,
		&rbacv1.ClusterRoleBinding{TypeMeta: tm("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}},
		driver, sc, shared, ds,
	}
}

func tm(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func appLabels(app string) map[string]string { return map[string]string{"kubevirt.io": app} }
