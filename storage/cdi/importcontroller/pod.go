package importcontroller

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/datavolume"
	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/storage/cdi/podsecurity"
)

// Container is the importer pod's container.
const Container = "importer"

const scratchVolume = "cdi-scratch-vol"

// PodName is the importer pod of a PVC: importer-<pvc>, shortened with a
// hash of the PVC's name where that is too long for a pod's name.
func PodName(pvc string) string { return shorten("importer-"+pvc, "") }

// ScratchName is the scratch PVC of a PVC: <pvc>-scratch.
func ScratchName(pvc string) string { return shorten(pvc, "-scratch") }

func shorten(name, suffix string) string {
	const limit = 63
	if len(name)+len(suffix) <= limit {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:4])
	return name[:limit-len(suffix)-len(h)-1] + "-" + h + suffix
}

// needsScratch: the importer asked for scratch space (a qcow2 image it
// cannot read in place is downloaded whole first, onto the scratch PVC);
// a raw one goes straight to the PVC, as upstream's data processor does.
func needsScratch(pvc *corev1.PersistentVolumeClaim) bool {
	// A registry image pulled by the importer is always written to
	// scratch first: its layers are a stream.
	return pvc.Annotations[cdiv1.AnnRequiresScratch] == "true" || registryPodPull(pvc)
}

// ScratchRequired says whether pod's importer ended asking for scratch
// space (importer.ScratchRequiredMessage), as upstream reads the
// termination message's scratchSpaceRequired.
func ScratchRequired(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != Container || cs.State.Terminated == nil {
			continue
		}
		var msg struct {
			ScratchSpaceRequired bool `json:"scratchSpaceRequired"`
		}
		if json.Unmarshal([]byte(cs.State.Terminated.Message), &msg) == nil && msg.ScratchSpaceRequired {
			return true
		}
	}
	return false
}

func hasScratch(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == scratchVolume {
			return true
		}
	}
	return false
}

// Scratch is the scratch PVC of pvc: as large, in class (pvc's own if
// ""), owned by pvc.
func Scratch(pvc *corev1.PersistentVolumeClaim, class string) *corev1.PersistentVolumeClaim {
	if class == "" {
		class = ptr.Deref(pvc.Spec.StorageClassName, "")
	}
	s := &corev1.PersistentVolumeClaim{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: ScratchName(pvc.Name), Namespace: pvc.Namespace,
			Labels:          map[string]string{datavolume.AppLabel: datavolume.AppName},
			OwnerReferences: []metav1.OwnerReference{owner(pvc)}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem),
			Resources:  corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}}}}
	if class != "" {
		s.Spec.StorageClassName = ptr.To(class)
	}
	return s
}

func owner(pvc *corev1.PersistentVolumeClaim) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Name: pvc.Name, UID: pvc.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
}

// PodConfig is what an importer pod runs with besides its PVC.
type PodConfig struct {
	Image      string
	PullPolicy corev1.PullPolicy
	Resources  corev1.ResourceRequirements
	// Overhead is the share of a Filesystem PVC kept for the filesystem.
	Overhead float64
	// InsecureRegistries are CDIConfig's: registries a pod-pulled
	// registry import does not verify TLS with.
	InsecureRegistries []string
}

// Pod is the importer pod that fills pvc, as user 107 without
// capabilities (podsecurity: the claims are the group's). A failing
// import exits non-zero and the kubelet restarts it (OnFailure); its
// termination message is the error.
func Pod(pvc *corev1.PersistentVolumeClaim, c PodConfig) (*corev1.Pod, error) {
	ann := pvc.Annotations
	size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	env := []corev1.EnvVar{
		{Name: importer.EnvSource, Value: ann[cdiv1.AnnSource]},
		{Name: importer.EnvEndpoint, Value: ann[cdiv1.AnnEndpoint]},
		{Name: importer.EnvChecksum, Value: ann[cdiv1.AnnChecksum]},
		{Name: importer.EnvImageSize, Value: strconv.FormatInt(size.Value(), 10)},
		{Name: importer.EnvOverhead, Value: strconv.FormatFloat(c.Overhead, 'f', -1, 64)},
		{Name: importer.EnvOwnerUID, Value: string(pvc.UID)},
	}
	if h := ann[cdiv1.AnnExtraHeaders]; h != "" {
		env = append(env, corev1.EnvVar{Name: importer.EnvExtraHeaders, Value: h})
	}
	if s := ann[cdiv1.AnnSecret]; s != "" {
		ref := func(key string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: s}, Key: key}}
		}
		env = append(env, corev1.EnvVar{Name: importer.EnvAccessKey, ValueFrom: ref("accessKeyId")},
			corev1.EnvVar{Name: importer.EnvSecretKey, ValueFrom: ref("secretKey")})
	}
	ctr := corev1.Container{Name: Container, Image: c.Image, ImagePullPolicy: c.PullPolicy, Env: env, Resources: c.Resources,
		Ports:                    []corev1.ContainerPort{{Name: "metrics", ContainerPort: importer.MetricsPort, Protocol: corev1.ProtocolTCP}},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          podsecurity.Container()}
	vols := []corev1.Volume{{Name: "cdi-data-vol", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}}}
	if ptr.Deref(pvc.Spec.VolumeMode, corev1.PersistentVolumeFilesystem) == corev1.PersistentVolumeBlock {
		ctr.VolumeDevices = []corev1.VolumeDevice{{Name: "cdi-data-vol", DevicePath: importer.BlockPath}}
	} else {
		ctr.VolumeMounts = []corev1.VolumeMount{{Name: "cdi-data-vol", MountPath: importer.DataDir}}
	}
	if needsScratch(pvc) {
		vols = append(vols, corev1.Volume{Name: scratchVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ScratchName(pvc.Name)}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: scratchVolume, MountPath: importer.ScratchDir})
		ctr.Env = append(ctr.Env, corev1.EnvVar{Name: importer.EnvScratchDir, Value: importer.ScratchDir})
	}
	if cm := ann[cdiv1.AnnCertConfigMap]; cm != "" {
		vols = append(vols, corev1.Volume{Name: "cdi-cert-vol", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}})
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "cdi-cert-vol", MountPath: importer.CertDir, ReadOnly: true})
	}
	if h := ann[cdiv1.AnnSecretExtraHeaders]; h != "" {
		var secrets []string
		if err := json.Unmarshal([]byte(h), &secrets); err != nil {
			return nil, fmt.Errorf("annotation %s: %w", cdiv1.AnnSecretExtraHeaders, err)
		}
		for i, s := range secrets {
			name := fmt.Sprintf("cdi-extra-headers-%d", i)
			vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: s}}})
			ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: fmt.Sprintf("%s/%d", importer.SecretHeadersDir, i), ReadOnly: true})
		}
	}
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: PodName(pvc.Name), Namespace: pvc.Namespace,
			Labels:          map[string]string{datavolume.AppLabel: datavolume.AppName, "cdi.kubevirt.io": "importer"},
			Annotations:     map[string]string{cdiv1.AnnCreatedBy: "yes"},
			OwnerReferences: []metav1.OwnerReference{owner(pvc)}},
		Spec: corev1.PodSpec{SecurityContext: podsecurity.Pod(), Containers: []corev1.Container{ctr}, Volumes: vols, RestartPolicy: corev1.RestartPolicyOnFailure,
			PriorityClassName: ann[cdiv1.AnnPriorityClassName], TerminationGracePeriodSeconds: ptr.To(int64(5))}}
	if ann[cdiv1.AnnSource] == cdiv1.SourceRegistry {
		registryPod(pod, pvc, c)
	}
	return pod, nil
}

// Annotations are what pod says of the import, as the PVC annotations
// the DataVolume controller reads: the pod's phase, its restarts, and the
// Running condition (the importer's last error while it fails).
func Annotations(pod *corev1.Pod) map[string]string {
	out := map[string]string{cdiv1.AnnPodPhase: string(pod.Status.Phase), cdiv1.AnnPodRestarts: "0",
		cdiv1.AnnRunningCondition: "false", cdiv1.AnnRunningConditionReason: "Pending", cdiv1.AnnRunningConditionMessage: ""}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != Container {
			continue
		}
		out[cdiv1.AnnPodRestarts] = strconv.Itoa(int(cs.RestartCount))
		last := cs.LastTerminationState.Terminated
		switch st := cs.State; {
		case st.Running != nil:
			out[cdiv1.AnnRunningCondition], out[cdiv1.AnnRunningConditionReason] = "true", ""
			if last != nil && last.ExitCode != 0 {
				// Still the last failure's word while it tries again.
				out[cdiv1.AnnRunningConditionMessage] = last.Message
			}
		case st.Terminated != nil:
			out[cdiv1.AnnRunningConditionReason], out[cdiv1.AnnRunningConditionMessage] = st.Terminated.Reason, st.Terminated.Message
		case st.Waiting != nil:
			out[cdiv1.AnnRunningConditionReason], out[cdiv1.AnnRunningConditionMessage] = st.Waiting.Reason, st.Waiting.Message
			if last != nil && last.ExitCode != 0 {
				out[cdiv1.AnnRunningConditionReason], out[cdiv1.AnnRunningConditionMessage] = last.Reason, last.Message
			}
		}
	}
	return out
}
