package importcontroller

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/storage/cdi/registry"
)

// registryPodPull: the importer pulls the image itself (pullMethod pod)
// and needs scratch space for the disk, as for http.
func registryPodPull(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Annotations[cdiv1.AnnSource] == cdiv1.SourceRegistry &&
		pvc.Annotations[cdiv1.AnnRegistryImportMethod] != string(cdiv1.RegistryPullNode)
}

// registryPod makes pod a registry import. With pullMethod node, as in
// CDI, the kubelet pulls the image: the importer container runs the
// containerDisk image itself, with the cdi-importer binary an init
// container copied into an emptyDir, and reads the disk from the image's
// /disk/ as user 107, a containerDisk's disk's owner (possibly 0440).
// No scratch space: the disk is already a local file.
func registryPod(pod *corev1.Pod, pvc *corev1.PersistentVolumeClaim, c PodConfig) {
	ann := pvc.Annotations
	ctr := &pod.Spec.Containers[0]
	ctr.Env = append(ctr.Env, corev1.EnvVar{Name: importer.EnvRegistryPullMethod, Value: ann[cdiv1.AnnRegistryImportMethod]})
	if a := ann[cdiv1.AnnRegistryArchitecture]; a != "" {
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: importer.EnvRegistryArchitecture, Value: a})
	}
	if registryPodPull(pvc) {
		if ref, err := registry.ParseURL(ann[cdiv1.AnnEndpoint]); err == nil && slices.Contains(c.InsecureRegistries, ref.Host) {
			ctr.Env = append(ctr.Env, corev1.EnvVar{Name: importer.EnvInsecureTLS, Value: "true"})
		}
		return
	}
	const bin = "cdi-importer-bin"
	image := strings.TrimPrefix(ann[cdiv1.AnnEndpoint], "docker://")
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{
		Name: "install-importer", Image: c.Image, ImagePullPolicy: c.PullPolicy,
		Command:         []string{"/usr/bin/cdi-importer", "install", importer.InstallDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: bin, MountPath: importer.InstallDir}},
		SecurityContext: ctr.SecurityContext, Resources: c.Resources,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: bin, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	ctr.Image, ctr.ImagePullPolicy = image, pullPolicy(image)
	ctr.Command = []string{importer.InstallDir + "/cdi-importer"}
	ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: bin, MountPath: importer.InstallDir, ReadOnly: true})
}

// pullPolicy is the kubelet's default for an image: Always for :latest
// (or no tag), else IfNotPresent.
func pullPolicy(image string) corev1.PullPolicy {
	if ref, err := registry.ParseImage(image); err == nil && ref.Tag == "latest" {
		return corev1.PullAlways
	}
	return corev1.PullIfNotPresent
}
