package controller

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/launcher/cloudinit"
)

// The contract between virt-controller and virt-launcher. The launcher gets
// everything it needs from its pod, without API access (launcher pods run
// without a service-account token):
//
//   - KUBEVMM_VMI_FILE: the VMI (apiVersion, kind, name, namespace, uid,
//     labels, annotations, spec) as JSON, projected by the downward API from
//     the pod annotation VMIAnnotation;
//   - KUBEVMM_VMI_NAME, KUBEVMM_VMI_NAMESPACE, KUBEVMM_VMI_UID, POD_NAME;
//   - KUBEVMM_SOCKET_DIR: the pod's own directory shared with virt-handler
//     (the emptyDir vmispec.SocketsVolume, which virt-handler finds in the
//     kubelet's directory of the pod), where the launcher serves its
//     control socket;
//   - the kernelBoot kernel/initrd and the containerDisk images, copied by
//     init containers into emptyDirs at api/vmispec.KernelBootDir and
//     vmispec.ContainerDiskDir (see bootFileContainers);
//   - it runs as the VMI's own user, vmispec.LauncherUID(vmi.UID), not root,
//     with a read-only root filesystem (an emptyDir on /tmp) under the
//     seccomp profile vmispec.SeccompProfile, all capabilities dropped but
//     NET_BIND_SERVICE: the pod passes the PodSecurity "restricted"
//     level; virt-handler creates its taps (package handler);
//   - the Secrets a cloud-init volume's disk is made of, mounted under
//     vmispec.SecretDir, and an emptyDir at vmispec.CloudInitDir that the launcher
//     renders the disk into (see cloudInitVolumes);
//   - SIGTERM means: shut the guest down gracefully (package launcher: the
//     guest's ACPI power button, then a stop),
//     within the pod's terminationGracePeriodSeconds, which is the VMI's
//     plus LauncherGraceMargin.
const (
	// ComputeContainerName is the launcher container's name, as KubeVirt's.
	ComputeContainerName = "compute"
	// LauncherLabelValue is the value of the kubevirt.io label on launcher pods.
	LauncherLabelValue = "virt-launcher"
	// VMIAnnotation holds the VMI JSON the launcher reads at start.
	VMIAnnotation = "kubevmm.io/vmi"
	// MigrationJobLabel marks a migration target pod with the migration
	// UID; such a pod is not the VMI's active launcher until the migration
	// succeeded (and the label is removed).
	MigrationJobLabel = v1.MigrationJobLabel
	// NodeSchedulableLabel is set to "true" by virt-handler on nodes that
	// can run VMs; launcher pods select it, as in KubeVirt.
	NodeSchedulableLabel = "kubevirt.io/schedulable"

	// SocketRootDir is the launcher's socket directory.
	SocketRootDir = vmispec.SocketRootDir
	// TmpDir is the launcher's writable /tmp (an emptyDir: the root
	// filesystem is read-only).
	TmpDir = "/tmp"
	// VMIFileDir is where the downward-API VMI file is mounted.
	VMIFileDir = "/var/run/kubevmm/vmi"
	// VMIFileName is the VMI file's name inside VMIFileDir.
	VMIFileName = "vmi.json"

	// LauncherGraceMargin is added to the VMI's grace period for the pod's:
	// the guest gets the VMI's full grace period for its ACPI shutdown and
	// the launcher still has time to tear down before the kubelet kills it
	// (KubeVirt uses the same 15 s).
	LauncherGraceMargin int64 = 15
)

// Memory overhead of a launcher pod on top of guest memory. Our VMM is one Go
// process, far smaller than libvirt+QEMU, but it still needs: a fixed part
// for the launcher and the VMM runtime, a part per vCPU (thread stacks,
// kvm_run pages, per-vCPU state), and a part proportional to guest memory
// (KVM shadow structures and the dirty bitmap for live migration: 1/512).
var (
	overheadFixed   = resource.MustParse("96Mi")
	overheadPerVCPU = resource.MustParse("8Mi")
)

const overheadGuestMemoryDivisor = 512

// LauncherConfig are the cluster-wide settings for launcher pods.
type LauncherConfig struct {
	// Image is the virt-launcher image.
	Image string
	// ImagePullPolicy for the launcher image; IfNotPresent when empty.
	ImagePullPolicy corev1.PullPolicy
}

// MemoryOverhead is what the launcher pod needs on top of guest memory.
func MemoryOverhead(vmi *v1.VirtualMachineInstance, guest resource.Quantity) resource.Quantity {
	o := overheadFixed.DeepCopy()
	perCPU := overheadPerVCPU.DeepCopy()
	perCPU.Mul(int64(vmispec.VCPUs(&vmi.Spec)))
	o.Add(perCPU)
	o.Add(*resource.NewQuantity(guest.Value()/overheadGuestMemoryDivisor, resource.BinarySI))
	return o
}

// launcherVMI is the part of the VMI the launcher gets. Of the status only
// the vsock CID, fixed before the pod exists: the rest changes all the time
// and the launcher must not act on it.
type launcherVMI struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              v1.VirtualMachineInstanceSpec   `json:"spec"`
	Status            v1.VirtualMachineInstanceStatus `json:"status"`
}

// computeContainer is the launcher pod's container that runs the VM.
func computeContainer(vmi *v1.VirtualMachineInstance, image string, pullPolicy corev1.PullPolicy, resources corev1.ResourceRequirements, extraMounts []corev1.VolumeMount) corev1.Container {
	return corev1.Container{
		Name:            ComputeContainerName,
		Image:           image,
		ImagePullPolicy: pullPolicy,
		Env: []corev1.EnvVar{
			{Name: "KUBEVMM_VMI_NAME", Value: vmi.Name},
			{Name: "KUBEVMM_VMI_NAMESPACE", Value: vmi.Namespace},
			{Name: "KUBEVMM_VMI_UID", Value: string(vmi.UID)},
			{Name: "KUBEVMM_VMI_FILE", Value: VMIFileDir + "/" + VMIFileName},
			{Name: "KUBEVMM_SOCKET_DIR", Value: SocketRootDir},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		},
		Resources: resources,
		VolumeMounts: append([]corev1.VolumeMount{
			{Name: vmispec.SocketsVolume, MountPath: SocketRootDir},
			{Name: tmpVolume, MountPath: TmpDir},
			{Name: "vmi", MountPath: VMIFileDir, ReadOnly: true},
		}, extraMounts...),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities: &corev1.Capabilities{
				Drop: []corev1.Capability{"ALL"},
				// Binding low ports for masquerade port forwarding (the one
				// capability the "restricted" level allows adding).
				Add: []corev1.Capability{"NET_BIND_SERVICE"},
			},
		},
	}
}

const tmpVolume = "tmp"

// emptyDirVolume is a pod volume that lives and dies with the pod.
func emptyDirVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// RenderLauncherPod builds the virt-launcher pod for a VMI. It is a pure
// function of its inputs so that it can be tested without an API server.
func RenderLauncherPod(vmi *v1.VirtualMachineInstance, cfg LauncherConfig) (*corev1.Pod, error) {
	// The launcher boots the VMI without its hot-plugged volumes: those
	// are attached to the running guest, from the node.
	boot := *vmi
	boot.Spec = *vmi.Spec.WithoutHotplugVolumes()
	vmi = &boot
	guest, err := vmispec.GuestMemory(&vmi.Spec)
	if err != nil {
		return nil, err
	}
	vmiJSON, err := json.Marshal(launcherVMI{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachineInstance"},
		ObjectMeta: metav1.ObjectMeta{
			Name: vmi.Name, Namespace: vmi.Namespace, UID: vmi.UID,
			Labels: vmi.Labels, Annotations: vmi.Annotations,
		},
		Spec:   vmi.Spec,
		Status: v1.VirtualMachineInstanceStatus{VSOCKCID: vmi.Status.VSOCKCID},
	})
	if err != nil {
		return nil, fmt.Errorf("encoding VMI for the launcher: %w", err)
	}

	// Labels: the VMI's own first, so that Services selecting on VMI labels
	// reach the VM (as in KubeVirt), then ours, which must win.
	labels := map[string]string{}
	maps.Copy(labels, vmi.Labels)
	labels[v1.AppLabel] = LauncherLabelValue
	labels[v1.CreatedByLabel] = string(vmi.UID)
	labels[v1.VirtualMachineNameLabel] = vmi.Name

	nodeSelector := map[string]string{}
	maps.Copy(nodeSelector, vmi.Spec.NodeSelector)
	nodeSelector[NodeSchedulableLabel] = "true"

	resources, err := launcherResources(vmi, guest)
	if err != nil {
		return nil, err
	}

	pullPolicy := cfg.ImagePullPolicy
	if pullPolicy == "" {
		pullPolicy = corev1.PullIfNotPresent
	}
	uid := vmispec.LauncherUID(vmi.UID)
	initContainers, computeMounts, extraVolumes, pullSecrets := bootFileContainers(vmi, cfg.Image, pullPolicy)
	ciMounts, ciVolumes := cloudInitVolumes(vmi)
	computeMounts, extraVolumes = append(computeMounts, ciMounts...), append(extraVolumes, ciVolumes...)
	// The generated name must leave room for the 5-character suffix the API
	// server adds; it truncates generateName to 58 characters itself.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "virt-launcher-" + vmi.Name + "-",
			Namespace:    vmi.Namespace,
			Labels:       labels,
			Annotations: map[string]string{
				v1.DomainAnnotation: vmi.Name,
				VMIAnnotation:       string(vmiJSON),
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, v1.VirtualMachineInstanceGroupVersionKind)},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To(vmispec.GracePeriodSeconds(&vmi.Spec) + LauncherGraceMargin),
			NodeSelector:                  nodeSelector,
			Affinity:                      vmi.Spec.Affinity.DeepCopy(),
			Tolerations:                   append([]corev1.Toleration(nil), vmi.Spec.Tolerations...),
			TopologySpreadConstraints:     append([]corev1.TopologySpreadConstraint(nil), vmi.Spec.TopologySpreadConstraints...),
			SchedulerName:                 vmi.Spec.SchedulerName,
			PriorityClassName:             vmi.Spec.PriorityClassName,
			Hostname:                      vmi.Spec.Hostname,
			Subdomain:                     vmi.Spec.Subdomain,
			DNSPolicy:                     vmi.Spec.DNSPolicy,
			DNSConfig:                     vmi.Spec.DNSConfig.DeepCopy(),
			ServiceAccountName:            vmi.Spec.ServiceAccountName,
			// The launcher needs no API access; a token in the pod would
			// only be something for a compromised guest escape to steal.
			AutomountServiceAccountToken: ptr.To(vmi.Spec.ServiceAccountName != ""),
			SecurityContext: &corev1.PodSecurityContext{
				// Not root, and not a user any other VMI's launcher runs as.
				// The runtime gives the device-plugin devices (/dev/kvm,
				// /dev/net/tun, /dev/userfaultfd) to this user (containerd:
				// device_ownership_from_security_context), so it needs to be
				// said here, not only in the image.
				RunAsUser:    ptr.To(int64(uid)),
				RunAsGroup:   ptr.To(int64(uid)),
				RunAsNonRoot: ptr.To(true),
				// The runtime's default profile lacks userfaultfd, which
				// post-copy needs on a node without /dev/userfaultfd
				// (before Linux 6.1): this is that default plus userfaultfd,
				// installed on the node by virt-handler (as KubeVirt's
				// kubevirt/kubevirt.json). The VMM narrows it further with
				// its own filter once the VM is set up.
				SeccompProfile: &corev1.SeccompProfile{
					Type:             corev1.SeccompProfileTypeLocalhost,
					LocalhostProfile: ptr.To(vmispec.SeccompProfile),
				},
				// The launcher serves its guest DHCP on port 67, as this
				// user (package launcher, dhcp.go).
				Sysctls: vmispec.LauncherSysctls(&vmi.Spec),
			},
			InitContainers:   initContainers,
			ImagePullSecrets: pullSecrets,
			Containers:       []corev1.Container{computeContainer(vmi, cfg.Image, pullPolicy, resources, computeMounts)},
			Volumes: append([]corev1.Volume{
				// The pod's own socket directory: no host path, and no
				// other pod sees it; virt-handler finds it from the pod UID.
				emptyDirVolume(vmispec.SocketsVolume),
				emptyDirVolume(tmpVolume),
				{
					Name: "vmi",
					VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
						Items: []corev1.DownwardAPIVolumeFile{{
							Path:     VMIFileName,
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + VMIAnnotation + "']"},
						}},
					}},
				},
			}, extraVolumes...),
		},
	}
	return pod, nil
}

// RenderMigrationTargetPod builds the target launcher pod of a migration:
// the VMI's launcher pod, marked as the migration's target (label and
// annotation), with its own socket directory (every pod has its own), its
// launcher running as the source's user, told to receive the guest on
// vmispec.MigrationInSocket instead of booting it, the migration's
// addedNodeSelector, and, unless sameNode, kept off the source's node.
func RenderMigrationTargetPod(vmi *v1.VirtualMachineInstance, m *v1.VirtualMachineInstanceMigration, cfg LauncherConfig, sourceNode string, sameNode bool) (*corev1.Pod, error) {
	pod, err := RenderLauncherPod(vmi, cfg)
	if err != nil {
		return nil, err
	}
	pod.Labels[MigrationJobLabel] = string(m.UID)
	pod.Annotations[v1.MigrationJobNameAnnotation] = m.Name
	maps.Copy(pod.Spec.NodeSelector, m.Spec.AddedNodeSelector)
	// The schedulable label stays required whatever the migration adds.
	pod.Spec.NodeSelector[NodeSchedulableLabel] = "true"
	c := &pod.Spec.Containers[0]
	c.Env = append(c.Env, corev1.EnvVar{Name: vmispec.IncomingEnv, Value: "unix:" + SocketRootDir + "/" + vmispec.MigrationInSocket})
	if !sameNode && sourceNode != "" {
		notSource := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{sourceNode}}
		if pod.Spec.Affinity == nil {
			pod.Spec.Affinity = &corev1.Affinity{}
		}
		if pod.Spec.Affinity.NodeAffinity == nil {
			pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
		}
		na := pod.Spec.Affinity.NodeAffinity
		if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
		}
		// Terms are alternatives: each must exclude the source.
		terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		for i := range terms {
			terms[i].MatchFields = append(terms[i].MatchFields, notSource)
		}
	}
	return pod, nil
}

// launcherResources are the compute container's requests and limits: the
// VMI's, with memory raised by the launcher overhead, plus one KVM and one
// TUN device from the device plugins.
func launcherResources(vmi *v1.VirtualMachineInstance, guest resource.Quantity) (corev1.ResourceRequirements, error) {
	d := vmi.Spec.Domain.Resources
	req := corev1.ResourceList{}
	lim := corev1.ResourceList{}
	for k, q := range d.Requests {
		req[k] = q.DeepCopy()
	}
	for k, q := range d.Limits {
		lim[k] = q.DeepCopy()
	}

	overhead := MemoryOverhead(vmi, guest)
	mem := guest.DeepCopy()
	if q, ok := req[corev1.ResourceMemory]; ok && q.Cmp(guest) > 0 {
		mem = q.DeepCopy()
	}
	if !d.OvercommitGuestOverhead {
		mem.Add(overhead)
	}
	req[corev1.ResourceMemory] = mem
	if q, ok := lim[corev1.ResourceMemory]; ok {
		// A limit below what the guest plus launcher needs would get the pod
		// OOM-killed under load; the overhead always goes on top.
		q.Add(overhead)
		lim[corev1.ResourceMemory] = q
	}
	if _, ok := req[corev1.ResourceCPU]; !ok {
		if l, ok := lim[corev1.ResourceCPU]; ok {
			req[corev1.ResourceCPU] = l.DeepCopy()
		} else {
			// KubeVirt's default CPU allocation ratio of 10: 100m per vCPU.
			req[corev1.ResourceCPU] = *resource.NewMilliQuantity(100*int64(vmispec.VCPUs(&vmi.Spec)), resource.DecimalSI)
		}
	}
	// Extended resources cannot be overcommitted: request == limit.
	one := resource.MustParse("1")
	for _, r := range []corev1.ResourceName{v1.KVMResource, v1.TunResource, v1.UserfaultfdResource} {
		req[r] = one.DeepCopy()
		lim[r] = one.DeepCopy()
	}
	if lq, ok := lim[corev1.ResourceMemory]; ok {
		if rq := req[corev1.ResourceMemory]; rq.Cmp(lq) > 0 {
			return corev1.ResourceRequirements{}, fmt.Errorf("spec.domain.resources: memory request %s exceeds limit %s", rq.String(), lq.String())
		}
	}
	return corev1.ResourceRequirements{Requests: req, Limits: lim}, nil
}

// bootFileContainers are the init containers that bring the files of
// foreign images into the pod: the kernel and initrd of a kernelBoot
// container, and the disk image of each containerDisk volume. Such images
// need not contain any program: the first init container copies the
// launcher binary (static) into an emptyDir, and each image's init
// container runs that copy (`virt-launcher copy`) to copy its files into
// emptyDirs the compute container mounts. (KubeVirt does the same with its
// container-disk binary.) A copied containerDisk is writable and ephemeral:
// it is the VMI's overlay, gone with the pod.
func bootFileContainers(vmi *v1.VirtualMachineInstance, launcherImage string, launcherPull corev1.PullPolicy) (inits []corev1.Container, computeMounts []corev1.VolumeMount, vols []corev1.Volume, secrets []corev1.LocalObjectReference) {
	const binVolume, kernelVolume, diskVolume = "kubevmm-bin", "kernel-boot", "container-disks"
	sc := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	small := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi"),
	}}
	binMount := corev1.VolumeMount{Name: binVolume, MountPath: vmispec.BinDir, ReadOnly: true}
	copyCmd := vmispec.BinDir + "/virt-launcher"
	// The user's policy, else KubeVirt's (and the kubelet's) default:
	// Always for :latest or no tag, IfNotPresent otherwise.
	pull := func(p corev1.PullPolicy, image string) corev1.PullPolicy {
		if p != "" {
			return p
		}
		name := image[strings.LastIndex(image, "/")+1:]
		if i := strings.LastIndex(name, ":"); !strings.Contains(name, "@") && (i < 0 || name[i+1:] == "latest") {
			return corev1.PullAlways
		}
		return corev1.PullIfNotPresent
	}
	secret := func(name string) {
		if name != "" {
			secrets = append(secrets, corev1.LocalObjectReference{Name: name})
		}
	}

	var kb *v1.KernelBootContainer
	if fw := vmi.Spec.Domain.Firmware; fw != nil && fw.KernelBoot != nil && fw.KernelBoot.Container != nil {
		kb = fw.KernelBoot.Container
	}
	var disks []v1.Volume
	for _, v := range vmi.Spec.Volumes {
		if v.ContainerDisk != nil {
			disks = append(disks, v)
		}
	}
	if kb == nil && len(disks) == 0 {
		return nil, nil, nil, nil
	}
	inits = append(inits, corev1.Container{
		Name: "container-disk-binary", Image: launcherImage, ImagePullPolicy: launcherPull,
		Command:         []string{"/usr/bin/virt-launcher", "install", vmispec.BinDir},
		VolumeMounts:    []corev1.VolumeMount{{Name: binVolume, MountPath: vmispec.BinDir}},
		SecurityContext: sc, Resources: small,
	})
	vols = append(vols, emptyDirVolume(binVolume))
	if kb != nil {
		cmd := []string{copyCmd, "copy"}
		if kb.KernelPath != "" {
			cmd = append(cmd, kb.KernelPath, vmispec.KernelBootDir+"/"+vmispec.KernelFile)
		}
		if kb.InitrdPath != "" {
			cmd = append(cmd, kb.InitrdPath, vmispec.KernelBootDir+"/"+vmispec.InitrdFile)
		}
		inits = append(inits, corev1.Container{
			Name: "kernel-boot", Image: kb.Image, ImagePullPolicy: pull(kb.ImagePullPolicy, kb.Image), Command: cmd,
			VolumeMounts:    []corev1.VolumeMount{binMount, {Name: kernelVolume, MountPath: vmispec.KernelBootDir}},
			SecurityContext: sc, Resources: small,
		})
		vols = append(vols, emptyDirVolume(kernelVolume))
		computeMounts = append(computeMounts, corev1.VolumeMount{Name: kernelVolume, MountPath: vmispec.KernelBootDir, ReadOnly: true})
		secret(kb.ImagePullSecret)
	}
	for _, v := range disks {
		src := v.ContainerDisk.Path
		if src == "" {
			src = "/disk"
		}
		inits = append(inits, corev1.Container{
			Name: "volume" + v.Name, Image: v.ContainerDisk.Image, ImagePullPolicy: pull(v.ContainerDisk.ImagePullPolicy, v.ContainerDisk.Image),
			Command:         []string{copyCmd, "copy", src, vmispec.ContainerDiskFile(v.Name)},
			VolumeMounts:    []corev1.VolumeMount{binMount, {Name: diskVolume, MountPath: vmispec.ContainerDiskDir}},
			SecurityContext: sc, Resources: small,
		})
		secret(v.ContainerDisk.ImagePullSecret)
	}
	if len(disks) > 0 {
		vols = append(vols, emptyDirVolume(diskVolume))
		computeMounts = append(computeMounts, corev1.VolumeMount{Name: diskVolume, MountPath: vmispec.ContainerDiskDir})
	}
	return inits, computeMounts, vols, secrets
}

// cloudInitVolumes are what the launcher renders a cloud-init volume from
// and into: the Secrets it names and those of SSH keys propagated through
// it, mounted read-only where launcher/cloudinit reads them (the launcher
// has no API access, so the kubelet brings them, as in KubeVirt), and an
// emptyDir for the rendered disk.
func cloudInitVolumes(vmi *v1.VirtualMachineInstance) (mounts []corev1.VolumeMount, vols []corev1.Volume) {
	ci := cloudinit.Volume(&vmi.Spec)
	if ci == nil {
		return nil, nil
	}
	const diskVolume = "cloud-init"
	vols = append(vols, corev1.Volume{Name: diskVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	mounts = append(mounts, corev1.VolumeMount{Name: diskVolume, MountPath: vmispec.CloudInitDir})
	secret := func(name, secretName, path string) {
		vols = append(vols, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secretName}}})
		mounts = append(mounts, corev1.VolumeMount{Name: name, MountPath: path, ReadOnly: true})
	}
	var user, network *v1.LocalObjectReference
	if c := ci.CloudInitNoCloud; c != nil {
		user, network = c.UserDataSecretRef, c.NetworkDataSecretRef
	} else {
		user, network = ci.CloudInitConfigDrive.UserDataSecretRef, ci.CloudInitConfigDrive.NetworkDataSecretRef
	}
	if user != nil {
		secret("cloud-init-userdata", user.Name, cloudinit.UserDataSecretDir(vmispec.SecretDir, ci.Name))
	}
	if network != nil {
		secret("cloud-init-networkdata", network.Name, cloudinit.NetworkDataSecretDir(vmispec.SecretDir, ci.Name))
	}
	seen := map[string]bool{}
	for _, c := range vmi.Spec.AccessCredentials {
		k := c.SSHPublicKey
		if k == nil || k.Source.Secret == nil || (k.PropagationMethod.NoCloud == nil && k.PropagationMethod.ConfigDrive == nil) || seen[k.Source.Secret.SecretName] {
			continue
		}
		seen[k.Source.Secret.SecretName] = true
		name := k.Source.Secret.SecretName
		secret(fmt.Sprintf("access-cred-%d", len(seen)-1), name, cloudinit.AccessCredentialDir(vmispec.SecretDir, name))
	}
	return mounts, vols
}
