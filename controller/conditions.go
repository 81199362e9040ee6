package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// Event and condition reasons, as KubeVirt spells them.
const (
	ReasonSuccessfulCreate = "SuccessfulCreate"
	ReasonFailedCreate     = "FailedCreate"
	ReasonSuccessfulDelete = "SuccessfulDelete"
	ReasonFailedDelete     = "FailedDelete"
	ReasonInvalidSpec      = "InvalidSpec"
	ReasonVMINotExists     = "VMINotExists"
	ReasonVMICondMissing   = "VMIConditionMissing"
	ReasonErrImagePull     = "ErrImagePull"
	ReasonImagePullBackOff = "ImagePullBackOff"
)

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	if pod == nil {
		return nil
	}
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// wasRunning reports whether the VMI ever reached Running (its guest booted).
func wasRunning(vmi *v1.VirtualMachineInstance) bool {
	for _, t := range vmi.Status.PhaseTransitionTimestamps {
		if t.Phase == v1.Running {
			return true
		}
	}
	return vmi.Status.Phase == v1.Running
}

// imagePullError returns the launcher container's image pull failure, if
// it is waiting on one, so that the VMI (and VM) can show it.
func imagePullError(pod *corev1.Pod) *syncError {
	if pod == nil {
		return nil
	}
	// The compute container's image, and those of the init containers
	// that bring kernelBoot and containerDisk images into the pod.
	statuses := append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		if w.Reason == ReasonErrImagePull || w.Reason == ReasonImagePullBackOff {
			return &syncError{reason: w.Reason, err: fmt.Errorf("%s", w.Message)}
		}
	}
	return nil
}

// quiet filters a reconcile's error: an optimistic-lock conflict becomes a
// quiet retry (we acted on a stale copy, and the newer version's watch
// event re-queues the object anyway; the short requeue is only a backstop),
// and errors caused by the manager shutting down are dropped.
func quiet(ctx context.Context) func(ctrl.Result, error) (ctrl.Result, error) {
	return func(res ctrl.Result, err error) (ctrl.Result, error) {
		switch {
		case err == nil:
			return res, nil
		case ctx.Err() != nil:
			return ctrl.Result{}, nil
		case apierrors.IsConflict(err):
			return ctrl.Result{RequeueAfter: conflictRequeue}, nil
		}
		return res, err
	}
}

const conflictRequeue = 200 * time.Millisecond
