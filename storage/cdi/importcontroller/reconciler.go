// Package importcontroller is CDI's import controller, driven by PVC
// annotations as upstream's: a PVC annotated with an import source
// (cdi.kubevirt.io/storage.import.source: http or none, as the DataVolume
// controller writes it) gets an importer pod, importer-<pvc>, running
// cmd/cdi-importer, and for http a scratch PVC <pvc>-scratch to download
// into (a qcow2 image is read at random). The pod's state goes back onto
// the PVC as annotations (Annotations): its phase, its restarts and the
// Running condition with the importer's error.
//
// States of a PVC:
//
//	no pod        -> the scratch PVC (http) and the pod are made
//	pod running   -> annotations follow the pod (a failing importer is
//	                 restarted by the kubelet: restartPolicy OnFailure)
//	pod succeeded -> phase Succeeded recorded; the pod and the scratch
//	                 PVC are deleted
//	PVC deleted   -> the pod and the scratch PVC are deleted (the pod
//	                 would otherwise hold the PVC, and so itself, forever)
package importcontroller

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/datavolume"
)

// Reconciler reconciles the PVCs to import into.
type Reconciler struct {
	Client     client.Client
	Image      string
	PullPolicy corev1.PullPolicy
}

func importing(pvc *corev1.PersistentVolumeClaim) bool {
	_, upload := pvc.Annotations[cdiv1.AnnUploadRequest]
	src := pvc.Annotations[cdiv1.AnnSource]
	return !upload && (src == cdiv1.SourceHTTP || src == cdiv1.SourceNone || src == cdiv1.SourceRegistry)
}

// Reconcile is one pass over a PVC.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !importing(pvc) {
		return reconcile.Result{}, nil
	}
	pod := &corev1.Pod{}
	podKey := client.ObjectKey{Namespace: pvc.Namespace, Name: PodName(pvc.Name)}
	err := r.Client.Get(ctx, podKey, pod)
	if client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, fmt.Errorf("reading pod %s: %w", podKey.Name, err)
	}
	havePod := err == nil && metav1.IsControlledBy(pod, pvc)
	done := pvc.Annotations[cdiv1.AnnPodPhase] == string(corev1.PodSucceeded)
	if pvc.DeletionTimestamp != nil || done {
		if havePod {
			log.Info("deleting the importer pod", "pod", pod.Name, "succeeded", done)
			if err := r.Client.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, fmt.Errorf("deleting pod %s: %w", pod.Name, err)
			}
		}
		return reconcile.Result{}, r.deleteScratch(ctx, pvc)
	}
	if err == nil && !havePod {
		return reconcile.Result{}, fmt.Errorf("pod %s exists and is not PVC %s's importer", pod.Name, pvc.Name)
	}
	if !havePod {
		return reconcile.Result{}, r.start(ctx, pvc)
	}
	want := Annotations(pod)
	if pod.Status.Phase == corev1.PodSucceeded {
		want[cdiv1.AnnRunningConditionReason], want[cdiv1.AnnRunningCondition] = "Completed", "false"
	}
	changed := false
	for k, v := range want {
		if cur, ok := pvc.Annotations[k]; !ok || cur != v {
			changed = true
		}
	}
	if changed {
		if pvc.Annotations[cdiv1.AnnPodPhase] != want[cdiv1.AnnPodPhase] {
			log.Info("state", "pvc", pvc.Name, "from", pvc.Annotations[cdiv1.AnnPodPhase], "to", want[cdiv1.AnnPodPhase])
		}
		orig := pvc.DeepCopy()
		maps.Copy(pvc.Annotations, want)
		if err := r.Client.Patch(ctx, pvc, client.MergeFrom(orig)); err != nil {
			return reconcile.Result{}, fmt.Errorf("annotating PVC %s: %w", pvc.Name, err)
		}
	}
	return reconcile.Result{}, nil
}

// start makes the scratch PVC (for http) and the importer pod.
func (r *Reconciler) start(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	cfg := &cdiv1.CDIConfig{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: cdiv1.CDIConfigName}, cfg); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading CDIConfig %s: %w", cdiv1.CDIConfigName, err)
	}
	if needsScratch(pvc) {
		s := Scratch(pvc, cfg.Status.ScratchSpaceStorageClass)
		if err := r.Client.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating scratch PVC %s: %w", s.Name, err)
		}
	}
	pc := PodConfig{Image: r.Image, PullPolicy: r.PullPolicy, Overhead: datavolume.Overhead(cfg.Status, ptr.Deref(pvc.Spec.StorageClassName, ""))}
	if rr := cfg.Status.DefaultPodResourceRequirements; rr != nil {
		pc.Resources = *rr
	}
	pod, err := Pod(pvc, pc)
	if err != nil {
		return err
	}
	if err := r.Client.Create(ctx, pod); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	orig := pvc.DeepCopy()
	ann := maps.Clone(pvc.Annotations)
	ann[cdiv1.AnnImportPod], ann[cdiv1.AnnPodPhase] = pod.Name, string(corev1.PodPending)
	pvc.Annotations = ann
	if err := r.Client.Patch(ctx, pvc, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("annotating PVC %s: %w", pvc.Name, err)
	}
	return nil
}

func (r *Reconciler) deleteScratch(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	s := &corev1.PersistentVolumeClaim{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: pvc.Namespace, Name: ScratchName(pvc.Name)}, s)
	if apierrors.IsNotFound(err) || (err == nil && (!metav1.IsControlledBy(s, pvc) || s.DeletionTimestamp != nil)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading scratch PVC: %w", err)
	}
	if err := r.Client.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting scratch PVC %s: %w", s.Name, err)
	}
	return nil
}

// SetupWithManager registers the reconciler: PVCs with an import source,
// and their pods.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	withSource := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[cdiv1.AnnSource]
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).Named("import").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(withSource)).
		Owns(&corev1.Pod{}).Complete(r)
}
