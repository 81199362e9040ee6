package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Hotplug attachment pods (KubeVirt's hp-volume-*): a running VMI's
// hot-plugged claims are mounted by one pod on the VMI's node, so that the
// kubelet publishes them there (CSI stage and publish, WaitForFirstConsumer
// binding through the scheduler) for virt-handler to hand to the launcher.
// The pod is owned by the launcher pod (it goes with it, and a migrated
// guest gets a new one on its new node) and its container only waits
// (`virt-launcher wait`, the image virt-controller knows). One pod mounts
// all the VMI's ready hot-plugged claims; when that set changes a new pod
// is made, and the old ones are deleted once it runs (the volumes stay
// published in between):
//
//	no pod --create--> pod with the set --Running--> older pods deleted
//
// status.volumeStatus of each hot-plugged volume, written here up to
// AttachedToNode:
//
//	Pending (claim or DataVolume not ready, or its pod not running)
//	  --pod Running--> AttachedToNode --virt-handler attaches it--> Ready
//
// Entries virt-handler moved past AttachedToNode are its own: they are
// kept as they are, including a removed volume's until it detached it.

// The attachment pod's owner reference blocks the launcher pod's deletion
// (foreground), which OwnerReferencesPermissionEnforcement lets only
// those who may update the owner's finalizers set.
// +kubebuilder:rbac:groups="",resources=pods/finalizers,verbs=update

// HotplugLabelValue is the AppLabel value of attachment pods (KubeVirt's).
const HotplugLabelValue = "hotplug-disk"

// HotplugVMILabel on an attachment pod names its VMI (same namespace), for
// the watch that brings the VMI back when the pod changes.
const HotplugVMILabel = "kubevmm.io/hotplug-vmi"

// HotplugDiskDir is where the attachment pod mounts a Filesystem claim
// (and puts a Block claim's device), under the volume's name: virt-handler
// finds the kubelet's published volume by the pod volume's name.
const HotplugDiskDir = "/hotplug"

// hotplugContainerName is the attachment pod's one container.
const hotplugContainerName = "hotplug-disk"

// ReasonVolumePending is a hot-plugged volume's reason while it waits
// for its claim or its attachment pod.
const ReasonVolumePending = "Pending"

// hotplugClaims is what readHotplugClaims found of the VMI's hot-plugged
// volumes: the claims ready to attach, and why the others wait.
type hotplugClaims struct {
	ready   map[string]vmispec.PVCInfo
	waiting map[string]string
}

// readHotplugClaims reads the claims of the VMI's hot-plugged volumes: a
// claim once it exists; a DataVolume's once it succeeded, or waits for
// its first consumer (as for a launcher pod, dataVolumeClaim): on
// WaitForFirstConsumer storage, the default here, the attachment pod is
// that consumer, and nothing would ever bind the claim without it.
func readHotplugClaims(ctx context.Context, c client.Reader, vmi *v1.VirtualMachineInstance) (hotplugClaims, error) {
	hc := hotplugClaims{ready: map[string]vmispec.PVCInfo{}, waiting: map[string]string{}}
	for _, v := range vmi.Spec.Volumes {
		if !v.IsHotplug() {
			continue
		}
		name, _, _ := vmispec.VolumeClaim(&v)
		if v.DataVolume != nil {
			claim, syncErr := dataVolumeClaim(ctx, c, vmi.Namespace, v.DataVolume.Name)
			if syncErr != nil {
				if syncErr.reason == ReasonFailedCreate {
					return hc, syncErr.err
				}
				hc.waiting[v.Name] = syncErr.err.Error()
				continue
			}
			name = claim
		}
		pvc := &corev1.PersistentVolumeClaim{}
		err := c.Get(ctx, types.NamespacedName{Namespace: vmi.Namespace, Name: name}, pvc)
		switch {
		case apierrors.IsNotFound(err):
			hc.waiting[v.Name] = fmt.Sprintf("PVC %s/%s does not exist, waiting for it to appear", vmi.Namespace, name)
			continue
		case err != nil:
			return hc, fmt.Errorf("reading PVC %s/%s of volume %s: %w", vmi.Namespace, name, v.Name, err)
		}
		hc.ready[v.Name] = vmispec.NewPVCInfo(pvc)
	}
	return hc, nil
}

// RenderAttachmentPod builds the attachment pod of the VMI's hot-plugged
// claims (volume name -> claim) for its launcher pod, which must be on a
// node. Restricted-PSA: non-root as the launcher's user, whose group owns
// the claims' files (fsGroup, as on the launcher pod), no capabilities.
func RenderAttachmentPod(vmi *v1.VirtualMachineInstance, launcher *corev1.Pod, claims map[string]vmispec.PVCInfo, cfg LauncherConfig) *corev1.Pod {
	sc := launcher.Spec.SecurityContext
	if sc == nil {
		sc = &corev1.PodSecurityContext{}
	}
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}
	c := corev1.Container{
		Name:            hotplugContainerName,
		Image:           cfg.Image,
		ImagePullPolicy: cfg.ImagePullPolicy,
		Args:            []string{"wait"},
		Resources:       corev1.ResourceRequirements{Requests: small, Limits: small},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
	var vols []corev1.Volume
	for _, name := range slices.Sorted(maps.Keys(claims)) {
		info := claims[name]
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: info.ClaimName},
		}})
		if info.Block {
			c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: name, DevicePath: HotplugDiskDir + "/" + name})
		} else {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: HotplugDiskDir + "/" + name})
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "hp-volume-",
			Namespace:    vmi.Namespace,
			Labels:       map[string]string{v1.AppLabel: HotplugLabelValue, HotplugVMILabel: vmi.Name},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(launcher,
				corev1.SchemeGroupVersion.WithKind("Pod"))},
		},
		Spec: corev1.PodSpec{
			// Through the scheduler, not spec.nodeName: a WaitForFirstConsumer
			// claim is bound (and provisioned on the node) only when the
			// scheduler places a pod using it.
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{launcher.Spec.NodeName}}},
				}}},
			}},
			Tolerations:                   append([]corev1.Toleration(nil), launcher.Spec.Tolerations...),
			PriorityClassName:             launcher.Spec.PriorityClassName,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To(int64(0)),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsUser:      sc.RunAsUser,
				RunAsGroup:     sc.RunAsGroup,
				FSGroup:        sc.RunAsGroup,
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{c},
			Volumes:    vols,
		},
	}
}

// attachmentClaims is the set of claims an attachment pod mounts, by volume.
func attachmentClaims(p *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	return out
}

// attachmentPods lists the attachment pods of the launcher pod, oldest first.
func attachmentPods(ctx context.Context, c client.Reader, vmi *v1.VirtualMachineInstance, launcher *corev1.Pod) ([]*corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := c.List(ctx, list, client.InNamespace(vmi.Namespace),
		client.MatchingLabels{v1.AppLabel: HotplugLabelValue, HotplugVMILabel: vmi.Name}); err != nil {
		return nil, fmt.Errorf("listing the attachment pods of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if ref := metav1.GetControllerOf(&list.Items[i]); ref != nil && ref.UID == launcher.UID {
			out = append(out, &list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return out, nil
}

// attachmentPlan is what syncAttachmentPods does: create a pod for the
// claims (nil: none), delete the pods listed.
type attachmentPlan struct {
	create map[string]vmispec.PVCInfo
	delete []*corev1.Pod
}

// planAttachmentPods decides from the launcher's attachment pods (oldest
// first) and the claims ready to attach: a pod with exactly that set is
// kept (made when there is none); the others go once it runs, all of them
// when there is nothing to attach.
func planAttachmentPods(pods []*corev1.Pod, ready map[string]vmispec.PVCInfo) attachmentPlan {
	want := map[string]string{}
	for name, info := range ready {
		want[name] = info.ClaimName
	}
	var current *corev1.Pod
	for _, p := range pods {
		if !vmispec.PodDown(p) && maps.Equal(attachmentClaims(p), want) {
			current = p
		}
	}
	var plan attachmentPlan
	if len(want) > 0 && current == nil {
		plan.create = ready
	}
	if len(want) > 0 && (current == nil || current.Status.Phase != corev1.PodRunning) {
		return plan
	}
	for _, p := range pods {
		if p != current && p.DeletionTimestamp == nil {
			plan.delete = append(plan.delete, p)
		}
	}
	return plan
}

// syncAttachmentPods carries out planAttachmentPods for a running VMI's
// launcher pod and returns the attachment pods that are left.
func (r *VMIReconciler) syncAttachmentPods(ctx context.Context, vmi *v1.VirtualMachineInstance, launcher *corev1.Pod, hc hotplugClaims) ([]*corev1.Pod, *syncError) {
	logger := log.FromContext(ctx)
	pods, err := attachmentPods(ctx, r.Client, vmi, launcher)
	if err != nil {
		return nil, &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	plan := planAttachmentPods(pods, hc.ready)
	if plan.create != nil {
		// The cache may lag behind the previous pass's create: ask the API
		// server before making a second pod.
		live, err := attachmentPods(ctx, r.APIReader, vmi, launcher)
		if err != nil {
			return nil, &syncError{reason: ReasonFailedCreate, err: err, retry: true}
		}
		if plan = planAttachmentPods(live, hc.ready); plan.create != nil {
			pod := RenderAttachmentPod(vmi, launcher, plan.create, r.Launcher)
			if err := r.Client.Create(ctx, pod); err != nil {
				r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreatePod", "Error creating attachment pod: %v", err)
				return nil, &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("creating the attachment pod of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err), retry: true}
			}
			r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, ReasonSuccessfulCreate, "CreatePod", "Created attachment pod %s", pod.Name)
			logger.Info("attachment pod created", "pod", pod.Name, "volumes", slices.Sorted(maps.Keys(plan.create)))
			live = append(live, pod)
		}
		pods = live
	}
	kept := pods[:0:0]
	for _, p := range pods {
		if !slices.Contains(plan.delete, p) {
			kept = append(kept, p)
			continue
		}
		if err := r.Client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
			return nil, &syncError{reason: ReasonFailedDelete, err: fmt.Errorf("deleting attachment pod %s/%s: %w", p.Namespace, p.Name, err), retry: true}
		}
		logger.Info("attachment pod deleted", "pod", p.Name)
	}
	return kept, nil
}

// decideVolumeStatus is the VMI's status.volumeStatus given its old one,
// its hot-plugged claims and its attachment pods (nil when the VMI has no
// running launcher pod).
func decideVolumeStatus(vmi *v1.VirtualMachineInstance, hc hotplugClaims, pods []*corev1.Pod) []v1.VolumeStatus {
	old := map[string]v1.VolumeStatus{}
	for _, s := range vmi.Status.VolumeStatus {
		old[s.Name] = s
	}
	handlers := func(s v1.VolumeStatus) bool {
		switch s.Phase {
		case v1.HotplugVolumeMounted, v1.VolumeReady, v1.HotplugVolumeDetaching:
			return true
		}
		return false
	}
	var out []v1.VolumeStatus
	inSpec := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		inSpec[v.Name] = true
		if !v.IsHotplug() {
			if s, ok := old[v.Name]; ok {
				out = append(out, s)
			}
			continue
		}
		if s, ok := old[v.Name]; ok && handlers(s) {
			out = append(out, s)
			continue
		}
		s := v1.VolumeStatus{Name: v.Name, Phase: v1.VolumePending, Reason: ReasonVolumePending}
		info, ready := hc.ready[v.Name]
		if !ready {
			s.Message = hc.waiting[v.Name]
			out = append(out, s)
			continue
		}
		s.PersistentVolumeClaimInfo = &v1.PersistentVolumeClaimInfo{ClaimName: info.ClaimName,
			VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem)}
		if info.Block {
			s.PersistentVolumeClaimInfo.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
		}
		s.Message = "waiting for the attachment pod"
		var pod *corev1.Pod
		for _, p := range pods {
			if _, ok := attachmentClaims(p)[v.Name]; ok && !vmispec.PodDown(p) && (pod == nil || p.Status.Phase == corev1.PodRunning) {
				pod = p
			}
		}
		if pod != nil {
			s.HotplugVolume = &v1.HotplugVolumeStatus{AttachPodName: pod.Name, AttachPodUID: pod.UID}
			s.Reason = ReasonSuccessfulCreate
			s.Message = fmt.Sprintf("Created hotplug attachment pod %s, for volume %s", pod.Name, v.Name)
			if pod.Status.Phase == corev1.PodRunning {
				s.Phase = v1.HotplugVolumeAttachedToNode
			}
		}
		out = append(out, s)
	}
	// A removed volume virt-handler still has attached stays until it
	// detached it; one it never took is simply gone.
	for _, s := range vmi.Status.VolumeStatus {
		if !inSpec[s.Name] && handlers(s) {
			out = append(out, s)
		}
	}
	return out
}

// isAttachmentPod selects attachment pods for the VMI controller's watch.
func isAttachmentPod(o client.Object) bool {
	return o.GetLabels()[v1.AppLabel] == HotplugLabelValue && o.GetLabels()[HotplugVMILabel] != ""
}

// vmiOfAttachmentPod is the VMI an attachment pod is for.
func vmiOfAttachmentPod(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[HotplugVMILabel]}}}
}

// hotplugState is what syncHotplug saw, for decideVolumeStatus.
type hotplugState struct {
	claims hotplugClaims
	pods   []*corev1.Pod
}

// syncHotplug reads a running VMI's hot-plugged claims and brings its
// launcher pod's attachment pods in line with them.
func (r *VMIReconciler) syncHotplug(ctx context.Context, vmi *v1.VirtualMachineInstance, launcher *corev1.Pod) (*hotplugState, *syncError) {
	hc, err := readHotplugClaims(ctx, r.Client, vmi)
	if err != nil {
		return nil, &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	pods, syncErr := r.syncAttachmentPods(ctx, vmi, launcher, hc)
	if syncErr != nil {
		return nil, syncErr
	}
	return &hotplugState{claims: hc, pods: pods}, nil
}
