package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// DataVolumes (CDI, cdi.kubevirt.io/v1beta1), as KubeVirt's controllers
// handle them:
//
//   - A VM's spec.dataVolumeTemplates are created by the VM controller
//     whatever the run strategy, named as the template, in the VM's
//     namespace, with the template's labels and annotations and the VM as
//     controller (so they go with it). An existing DataVolume of that name
//     is left alone: if the VM does not control it, the VM's Failure
//     condition names it and no VMI is created.
//   - The VM's VMI is created only once every DataVolume its volumes name
//     is ready (dataVolumesReady): Succeeded, or WaitForFirstConsumer /
//     PendingPopulation, where the launcher pod's scheduling is what
//     binds the claim. Until then the VM is Provisioning, or
//     DataVolumeError when one failed (its condition's message on the
//     VM's Failure condition).
//   - A VMI's dataVolume volume is its DataVolume's claim
//     (status.claimName, else the DataVolume's name) mounted in the
//     launcher pod exactly as a persistentVolumeClaim volume; the pod
//     waits until the DataVolume is ready.
//
// A clone (source.pvc, sourceRef) is one more way of filling: the VM is
// Provisioning through CloneScheduled and CloneInProgress.
// A template cloning from another namespace was authorized by virt-api
// for the VM's creator (api/cdi/cloneauth); CDI's DataVolume webhook asks
// virt-controller, which creates the DataVolume, hence datavolumes/source.

// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=cdi.kubevirt.io,resources=datavolumes/source,verbs=create

// Reasons on the VM's Failure and the VMI's Synchronized conditions.
const (
	// ReasonDataVolumeError: a DataVolume failed; the VM gets no VMI.
	ReasonDataVolumeError = "DataVolumeError"
	// ReasonDataVolumeNotReady: a DataVolume is still being filled (or
	// does not exist yet).
	ReasonDataVolumeNotReady = "DataVolumeNotReady"
	// ReasonDataVolumeNotOwned: a DataVolume named by a template exists
	// and is not the VM's.
	ReasonDataVolumeNotOwned = "FailedDataVolumeCreate"
)

// dataVolumePendingPopulation is upstream CDI's phase of a DataVolume
// whose claim waits for its first consumer through a volume populator.
const dataVolumePendingPopulation cdiv1.DataVolumePhase = "PendingPopulation"

// dataVolumePollInterval is how often a VM or VMI waiting for
// DataVolumes looks again when virt-controller could not watch them (CDI
// was installed after it started).
const dataVolumePollInterval = 5 * time.Second

// dataVolumeFromTemplate is the DataVolume a VM's template asks for. The
// spec is decoded strictly: a field CDI does not have is an error naming
// it, not dropped.
func dataVolumeFromTemplate(vm *v1.VirtualMachine, t *v1.DataVolumeTemplateSpec) (*cdiv1.DataVolume, error) {
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.GroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            t.ObjectMeta.Name,
			Namespace:       vm.Namespace,
			Labels:          copyMap(t.ObjectMeta.Labels),
			Annotations:     copyMap(t.ObjectMeta.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vm, v1.VirtualMachineGroupVersionKind)},
		},
	}
	spec, err := t.DataVolumeSpec()
	if err != nil {
		return nil, fmt.Errorf("spec.dataVolumeTemplates[%s].spec: %w", t.ObjectMeta.Name, err)
	}
	dv.Spec = *spec
	return dv, nil
}

// dvVerdict is what the DataVolumes of a VM say about starting it.
type dvVerdict struct {
	// ready: every DataVolume can be used by a launcher pod.
	ready bool
	// failed: one failed (its name and message in err).
	failed bool
	// waitingForBinding: all are ready, some only because their claim
	// waits for its first consumer.
	waitingForBinding bool
	// err says which one is not ready and why (nil when ready).
	err error
}

// decideDataVolumes is the verdict on the DataVolumes named (in order) by
// a VM's or VMI's volumes; dvs holds those that exist, by name.
func decideDataVolumes(names []string, dvs map[string]*cdiv1.DataVolume) dvVerdict {
	v := dvVerdict{ready: true}
	var notReady error
	for _, name := range names {
		dv, ok := dvs[name]
		if !ok {
			v.ready = false
			if notReady == nil {
				notReady = fmt.Errorf("DataVolume %s does not exist yet", name)
			}
			continue
		}
		if msg, failed := dataVolumeError(dv); failed {
			return dvVerdict{failed: true, err: fmt.Errorf("DataVolume %s failed: %s", name, msg)}
		}
		switch dv.Status.Phase {
		case cdiv1.Succeeded:
		case cdiv1.WaitForFirstConsumer, dataVolumePendingPopulation:
			v.waitingForBinding = true
		default:
			v.ready = false
			if notReady == nil {
				phase := dv.Status.Phase
				if phase == "" {
					phase = cdiv1.Pending
				}
				notReady = fmt.Errorf("DataVolume %s is %s (%s)", name, phase, dv.Status.Progress)
			}
		}
	}
	if !v.ready {
		v.waitingForBinding = false
		v.err = notReady
	}
	return v
}

// dataVolumeError: the DataVolume failed, or its transfer pod keeps
// failing (CDI restarts it; its Running condition says Error), as
// KubeVirt's HasDataVolumeErrors reads it; msg is CDI's message.
func dataVolumeError(dv *cdiv1.DataVolume) (msg string, failed bool) {
	running := cdiv1.FindDataVolumeCondition(dv.Status.Conditions, cdiv1.DataVolumeRunning)
	if dv.Status.Phase == cdiv1.Failed {
		for _, t := range []cdiv1.DataVolumeConditionType{cdiv1.DataVolumeRunning, cdiv1.DataVolumeReady, cdiv1.DataVolumeBound} {
			if c := cdiv1.FindDataVolumeCondition(dv.Status.Conditions, t); c != nil && c.Message != "" {
				return c.Message, true
			}
		}
		return "phase Failed", true
	}
	if running != nil && running.Status == corev1.ConditionFalse && (running.Reason == "Error" || running.Reason == "ImagePullFailed") {
		return running.Message, true
	}
	return "", false
}

// dataVolumeNames are the DataVolumes a VMI spec's volumes name.
func dataVolumeNames(s *v1.VirtualMachineInstanceSpec) []string {
	var out []string
	for _, v := range s.Volumes {
		if v.DataVolume != nil {
			out = append(out, v.DataVolume.Name)
		}
	}
	return out
}

// readDataVolumes reads the named DataVolumes of a namespace that exist.
func readDataVolumes(ctx context.Context, c client.Reader, ns string, names []string) (map[string]*cdiv1.DataVolume, error) {
	out := map[string]*cdiv1.DataVolume{}
	for _, name := range names {
		dv := &cdiv1.DataVolume{}
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, dv)
		switch {
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
			// Not there, or CDI not installed: not ready either way.
		case err != nil:
			return nil, fmt.Errorf("reading DataVolume %s/%s: %w", ns, name, err)
		default:
			out[name] = dv
		}
	}
	return out, nil
}

// syncDataVolumes creates the VM's missing template DataVolumes and
// decides whether its VMI may be created. A DataVolume it does not own is
// a syncError naming it (not retried: the user must resolve it).
func (a *vmAction) syncDataVolumes(ctx context.Context) (dvVerdict, *syncError) {
	vm := a.vm
	var names []string
	if vm.Spec.Template != nil {
		// Hot-plugged ones wait for nothing: they come once the VMI runs.
		names = dataVolumeNames(vm.Spec.Template.Spec.WithoutHotplugVolumes())
	}
	if len(names) == 0 && len(vm.Spec.DataVolumeTemplates) == 0 {
		return dvVerdict{ready: true}, nil
	}
	var tnames []string
	for i := range vm.Spec.DataVolumeTemplates {
		tnames = append(tnames, vm.Spec.DataVolumeTemplates[i].ObjectMeta.Name)
	}
	dvs, err := readDataVolumes(ctx, a.r.Client, vm.Namespace, append(tnames, names...))
	if err != nil {
		return dvVerdict{}, &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	for i := range vm.Spec.DataVolumeTemplates {
		t := &vm.Spec.DataVolumeTemplates[i]
		if dv, ok := dvs[t.ObjectMeta.Name]; ok {
			if !metav1.IsControlledBy(dv, vm) {
				return dvVerdict{}, &syncError{reason: ReasonDataVolumeNotOwned,
					err: fmt.Errorf("DataVolume %s exists and is not controlled by this VirtualMachine", dv.Name)}
			}
			continue
		}
		dv, err := dataVolumeFromTemplate(vm, t)
		if err != nil {
			return dvVerdict{}, &syncError{reason: ReasonInvalidSpec, err: err}
		}
		if err := a.r.Client.Create(ctx, dv); err != nil {
			a.r.Recorder.Eventf(vm, nil, corev1.EventTypeWarning, ReasonFailedCreate, "CreateDataVolume", "Error creating DataVolume %s: %v", dv.Name, err)
			return dvVerdict{}, &syncError{reason: ReasonFailedCreate, err: fmt.Errorf("creating DataVolume %s/%s: %w", dv.Namespace, dv.Name, err), retry: true}
		}
		a.r.Recorder.Eventf(vm, nil, corev1.EventTypeNormal, ReasonSuccessfulCreate, "CreateDataVolume", "Created DataVolume %s", dv.Name)
		dvs[dv.Name] = dv
	}
	return decideDataVolumes(names, dvs), nil
}

// dataVolumeClaim resolves a VMI's dataVolume volume to its claim's name:
// the DataVolume must be ready (decideDataVolumes); its claim is
// status.claimName, else the DataVolume's name.
func dataVolumeClaim(ctx context.Context, c client.Reader, ns, name string) (string, *syncError) {
	dvs, err := readDataVolumes(ctx, c, ns, []string{name})
	if err != nil {
		return "", &syncError{reason: ReasonFailedCreate, err: err, retry: true}
	}
	switch v := decideDataVolumes([]string{name}, dvs); {
	case v.failed:
		return "", &syncError{reason: ReasonDataVolumeError, err: v.err, retry: true}
	case !v.ready:
		return "", &syncError{reason: ReasonDataVolumeNotReady, err: fmt.Errorf("%w, waiting for it", v.err), retry: true}
	}
	if claim := dvs[name].Status.ClaimName; claim != "" {
		return claim, nil
	}
	return name, nil
}

// withDataVolumeStatus is the VM's printable status p (printableStatus)
// given its DataVolumes, in KubeVirt's order: a VM that runs (or is
// stopping, migrating, paused) shows that; without a live VMI a failed
// DataVolume shows DataVolumeError and one being filled Provisioning; a
// VMI starting on claims that wait for their first consumer shows
// WaitingForVolumeBinding.
func withDataVolumeStatus(p v1.VirtualMachinePrintableStatus, vmi *v1.VirtualMachineInstance, v dvVerdict) v1.VirtualMachinePrintableStatus {
	switch p {
	case v1.VirtualMachineStatusTerminating, v1.VirtualMachineStatusStopping, v1.VirtualMachineStatusMigrating,
		v1.VirtualMachineStatusPaused, v1.VirtualMachineStatusRunning:
		return p
	}
	switch {
	case vmi == nil || vmi.IsFinal():
		if v.failed {
			return v1.VirtualMachineStatusDataVolumeError
		}
		if !v.ready {
			return v1.VirtualMachineStatusProvisioning
		}
	case p == v1.VirtualMachineStatusStarting && v.waitingForBinding:
		return v1.VirtualMachineStatusWaitingForVolumeBinding
	}
	return p
}

// servesDataVolumes: the API server serves CDI's DataVolumes (CDI is
// installed), so that controllers can watch them.
func servesDataVolumes(mgr ctrl.Manager) bool {
	_, err := mgr.GetRESTMapper().RESTMapping(cdiv1.GroupVersion.WithKind("DataVolume").GroupKind(), cdiv1.GroupVersion.Version)
	return err == nil
}

// vmsOfDataVolume are the VMs a DataVolume's change may move: its
// controller, and the VMs of its namespace whose template names it.
func (r *VMReconciler) vmsOfDataVolume(ctx context.Context, o client.Object) []reconcile.Request {
	seen := map[string]bool{}
	var out []reconcile.Request
	add := func(name string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}})
		}
	}
	if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == v1.VirtualMachineGroupVersionKind.Kind && ref.APIVersion == v1.VirtualMachineGroupVersionKind.GroupVersion().String() {
		add(ref.Name)
	}
	list := &v1.VirtualMachineList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "listing the VMs of a DataVolume's namespace", "dataVolume", o.GetNamespace()+"/"+o.GetName())
		return out
	}
	for i := range list.Items {
		if t := list.Items[i].Spec.Template; t != nil && slices.Contains(dataVolumeNames(&t.Spec), o.GetName()) {
			add(list.Items[i].Name)
		}
	}
	return out
}

// vmisOfDataVolume are the VMIs of the DataVolume's namespace with a
// volume on it: their pods wait until it is ready.
func (r *VMIReconciler) vmisOfDataVolume(ctx context.Context, o client.Object) []reconcile.Request {
	list := &v1.VirtualMachineInstanceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace())); err != nil {
		log.FromContext(ctx).Error(err, "listing the VMIs of a DataVolume's namespace", "dataVolume", o.GetNamespace()+"/"+o.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if slices.Contains(dataVolumeNames(&list.Items[i].Spec), o.GetName()) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}
