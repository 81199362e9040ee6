package main

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubevmm/kubevmm/storage/hostpath"
)

// hostpathNamespace is the hostpath provisioner's namespace, upstream's.
const hostpathNamespace = "hostpath-provisioner"

// hostpathStorageClass is the dev cluster's default StorageClass.
const hostpathStorageClass = "hostpath-csi"

// hostpathProvisioner is the hostpath provisioner: its CSI driver and
// provisioner as a DaemonSet (one per node, the node's pool at
// -hostpath-pool), the CSIDriver object, the default StorageClass
// hostpath-csi (volumes may grow) and their RBAC.
func (m *manifests) hostpathProvisioner() error {
	ns := hostpathNamespace
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
	c := corev1.Container{Name: name, Image: m.image(name), ImagePullPolicy: m.o.pull,
		Args:      []string{"--kubelet-root=" + m.o.kubeletRoot, "--storage-pool=local=" + m.o.hostpathPool},
		Env:       []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
		Resources: req("10m", "24Mi"), ReadinessProbe: probe(corev1.URISchemeHTTP, 8188),
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To(int64(0)), RunAsNonRoot: ptr.To(false)},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "kubelet", MountPath: m.o.kubeletRoot, MountPropagation: &bidi},
			{Name: "pool", MountPath: m.o.hostpathPool},
			{Name: "dev", MountPath: "/dev"},
		}}
	ds := &appsv1.DaemonSet{TypeMeta: tm("apps/v1", "DaemonSet"), ObjectMeta: meta(name),
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: appLabels(name)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: appLabels(name)},
				Spec: corev1.PodSpec{ServiceAccountName: name, Containers: []corev1.Container{c},
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					Volumes: []corev1.Volume{
						hostPath("kubelet", m.o.kubeletRoot, corev1.HostPathDirectory),
						hostPath("pool", m.o.hostpathPool, corev1.HostPathDirectoryOrCreate),
						hostPath("dev", "/dev", corev1.HostPathDirectory),
					}},
			},
		}}
	// No attacher (volumes are on their node) and no pod information on
	// mount; persistent volumes only.
	driver := &storagev1.CSIDriver{TypeMeta: tm("storage.k8s.io/v1", "CSIDriver"), ObjectMeta: metav1.ObjectMeta{Name: hostpath.DriverName},
		Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}}}
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{TypeMeta: tm("storage.k8s.io/v1", "StorageClass"),
		ObjectMeta:        metav1.ObjectMeta{Name: hostpathStorageClass, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       hostpath.DriverName,
		Parameters:        map[string]string{hostpath.StoragePoolParameter: "local"},
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: &wffc, AllowVolumeExpansion: ptr.To(true)}
	return m.add(
		&corev1.Namespace{TypeMeta: tm("v1", "Namespace"), ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}},
		&corev1.ServiceAccount{TypeMeta: tm("v1", "ServiceAccount"), ObjectMeta: meta(name)},
		role,
		&rbacv1.ClusterRoleBinding{TypeMeta: tm("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}},
		driver, sc, ds,
	)
}
