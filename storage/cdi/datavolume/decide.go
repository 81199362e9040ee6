package datavolume

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
)

// ProgressNA is the progress of a transfer that has none to report.
const ProgressNA cdiv1.DataVolumeProgress = "N/A"

// Seen is what a reconcile read besides the DataVolume.
type Seen struct {
	// Claim is the DataVolume's PVC, nil if none.
	Claim *corev1.PersistentVolumeClaim
	// Invalid is why the DataVolume cannot have its PVC ("" if it can):
	// its spec, the API server refusing the PVC, a clone not authorized.
	Invalid string
	// InvalidReason is the conditions' reason when Invalid
	// (ErrClaimNotValid if empty).
	InvalidReason string
	// Foreign: the PVC of that name is not the DataVolume's.
	Foreign bool
	// Progress is what the importer reported ("45.50%"), "" if unread.
	Progress cdiv1.DataVolumeProgress
	// Waiting is what the DataVolume waits for before its claim is made
	// (a DataSource to be Ready, a clone's source claim), nil if nothing.
	Waiting *Waiting
}

// Status is the DataVolume's status for what was seen (now stamps
// changed conditions).
func Status(dv *cdiv1.DataVolume, s Seen, now metav1.Time) cdiv1.DataVolumeStatus {
	st := *dv.Status.DeepCopy()
	st.ClaimName = dv.Name
	set := func(t cdiv1.DataVolumeConditionType, ok bool, reason, msg string) {
		status := corev1.ConditionFalse
		if ok {
			status = corev1.ConditionTrue
		}
		st.Conditions = cdiv1.SetDataVolumeCondition(st.Conditions, cdiv1.DataVolumeCondition{Type: t,
			ConditionState: cdiv1.ConditionState{Status: status, Reason: reason, Message: msg}}, now)
	}
	if st.Progress == "" {
		st.Progress = ProgressNA
	}
	// none is the DataVolume with no claim to follow: all three
	// conditions False for the same reason.
	none := func(phase cdiv1.DataVolumePhase, reason, msg string) cdiv1.DataVolumeStatus {
		st.Phase = phase
		for _, t := range []cdiv1.DataVolumeConditionType{cdiv1.DataVolumeBound, cdiv1.DataVolumeRunning, cdiv1.DataVolumeReady} {
			set(t, false, reason, msg)
		}
		return st
	}
	switch {
	case s.Invalid != "" && s.InvalidReason != "":
		return none(cdiv1.Failed, s.InvalidReason, s.Invalid)
	case s.Invalid != "":
		return none(cdiv1.Failed, "ErrClaimNotValid", s.Invalid)
	case s.Foreign:
		return none(cdiv1.Pending, "ErrResourceExists", "PVC "+dv.Name+" already exists and is not owned by the DataVolume")
	case s.Claim == nil && s.Waiting != nil:
		return none(cdiv1.Pending, s.Waiting.Reason, s.Waiting.Message)
	case s.Claim == nil:
		st.Phase = cdiv1.Pending
		set(cdiv1.DataVolumeBound, false, "NotFound", "PVC "+dv.Name+" not found")
		set(cdiv1.DataVolumeRunning, false, "", "")
		set(cdiv1.DataVolumeReady, false, "", "")
		return st
	}
	pvc := s.Claim
	bound := pvc.Status.Phase == corev1.ClaimBound
	switch pvc.Status.Phase {
	case corev1.ClaimBound:
		set(cdiv1.DataVolumeBound, true, "Bound", "PVC "+pvc.Name+" Bound")
	case corev1.ClaimLost:
		set(cdiv1.DataVolumeBound, false, "ClaimLost", "PVC "+pvc.Name+" Lost")
	default:
		set(cdiv1.DataVolumeBound, false, "Pending", "PVC "+pvc.Name+" Pending")
	}
	ann := pvc.Annotations
	st.Phase = phase(ann, bound)
	switch st.Phase {
	case cdiv1.Succeeded:
		st.Progress = "100.0%"
	case cdiv1.ImportInProgress, cdiv1.CloneInProgress:
		if s.Progress != "" {
			st.Progress = s.Progress
		}
	}
	if st.Phase != cdiv1.ImportInProgress && st.Phase != cdiv1.CloneInProgress && st.Phase != cdiv1.Succeeded {
		st.Progress = ProgressNA
	}
	if n, err := strconv.ParseInt(ann[cdiv1.AnnPodRestarts], 10, 32); err == nil {
		st.RestartCount = int32(n)
	}
	set(cdiv1.DataVolumeRunning, ann[cdiv1.AnnRunningCondition] == "true", ann[cdiv1.AnnRunningConditionReason], ann[cdiv1.AnnRunningConditionMessage])
	if st.Phase == cdiv1.Succeeded {
		set(cdiv1.DataVolumeReady, true, "", "")
	} else {
		set(cdiv1.DataVolumeReady, false, "", "")
	}
	return st
}

// phase is the DataVolume's phase from its PVC's annotations (the
// transfer pod's phase, its readiness for an upload, a clone source
// pod's phase).
func phase(ann map[string]string, bound bool) cdiv1.DataVolumePhase {
	_, upload := ann[cdiv1.AnnUploadRequest]
	_, clone := ann[cdiv1.AnnCloneRequest]
	pod := corev1.PodPhase(ann[cdiv1.AnnPodPhase])
	switch {
	case pod == corev1.PodSucceeded:
		return cdiv1.Succeeded
	case pod == corev1.PodFailed:
		return cdiv1.Failed
	case clone && corev1.PodPhase(ann[cdiv1.AnnCloneSourcePhase]) == corev1.PodRunning:
		return cdiv1.CloneInProgress
	case clone:
		// The target's upload server and the source pod are on their way.
		return cdiv1.CloneScheduled
	case upload && pod == corev1.PodRunning && ann[cdiv1.AnnPodReady] == "true":
		return cdiv1.UploadReady
	case upload && (pod == corev1.PodRunning || pod == corev1.PodPending):
		return cdiv1.UploadScheduled
	case !upload && pod == corev1.PodRunning:
		return cdiv1.ImportInProgress
	case !upload && pod == corev1.PodPending:
		return cdiv1.ImportScheduled
	case bound:
		return cdiv1.PVCBound
	}
	return cdiv1.Pending
}
