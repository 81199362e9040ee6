// Package importcontroller is CDI's import controller, driven by PVC
// annotations as upstream's: a PVC annotated with an import source
// (cdi.kubevirt.io/storage.import.source: http or none, as the DataVolume
// controller writes it) gets an importer pod, importer-<pvc>, running
// cmd/cdi-importer. Scratch space only where it is needed, by upstream's
// handshake: the first pod has none; an importer that meets an image it
// must convert through scratch space (a qcow2 one, read at random, that
// it cannot read in place with range requests) ends with
// importer.ScratchRequiredMessage, and the controller marks the PVC
// (cdi.kubevirt.io/storage.import.requiresScratch), deletes the pod and
// makes it again with a scratch PVC <pvc>-scratch. The pod's state goes
// back onto the PVC as annotations (Annotations): its phase, its
// restarts and the Running condition with the importer's error.
//
// The PVC is written before its pod exists, never just after: with a
// WaitForFirstConsumer class the scheduler writes the PVC (the selected
// node) from its own copy while it places the pod, and a write of ours in
// between fails that with a conflict, leaving the pod in the scheduler's
// backoff for minutes. A pod that waits to be scheduled says nothing new
// (Annotations reads no pod conditions), so the PVC is left alone until
// the kubelet runs the pod.
//
// States of a PVC:
//
//	no pod, PVC not yet annotated for one -> the PVC annotated as for a
//	                 new pod (Pending, its name), nothing else: the pod
//	                 comes on the pass that write brings
//	no pod, PVC annotated -> the pod is made (and the scratch PVC, once
//	                 asked for)
//	pod deleting  -> wait for it to go
//	pod running   -> annotations follow the pod (a failing importer is
//	                 restarted by the kubelet: restartPolicy OnFailure)
//	pod asked for scratch space -> the PVC marked, the pod deleted (its
//	                 phase, Succeeded, is not recorded)
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
		if want := starting(pvc.Name); changes(pvc, want) {
			return reconcile.Result{}, r.annotate(ctx, pvc, want)
		}
		return reconcile.Result{}, r.start(ctx, pvc)
	}
	if pod.DeletionTimestamp != nil {
		return reconcile.Result{}, nil // its deletion brings us back
	}
	if ScratchRequired(pod) {
		if hasScratch(pod) {
			// Never recorded as a success: nothing was imported.
			return reconcile.Result{}, fmt.Errorf("pod %s asked for scratch space and has some", pod.Name)
		}
		return reconcile.Result{}, r.restartWithScratch(ctx, pvc, pod)
	}
	want := Annotations(pod)
	if pod.Status.Phase == corev1.PodSucceeded {
		want[cdiv1.AnnRunningConditionReason], want[cdiv1.AnnRunningCondition] = "Completed", "false"
	}
	if changes(pvc, want) {
		return reconcile.Result{}, r.annotate(ctx, pvc, want)
	}
	return reconcile.Result{}, nil
}

// starting is what the PVC says before its importer pod is made: what
// Annotations says of the new pod, so that the pod's first passes, while
// it waits to be scheduled, write nothing.
func starting(pvc string) map[string]string {
	want := Annotations(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}})
	want[cdiv1.AnnImportPod] = PodName(pvc)
	return want
}

func changes(pvc *corev1.PersistentVolumeClaim, want map[string]string) bool {
	for k, v := range want {
		if cur, ok := pvc.Annotations[k]; !ok || cur != v {
			return true
		}
	}
	return false
}

func (r *Reconciler) annotate(ctx context.Context, pvc *corev1.PersistentVolumeClaim, want map[string]string) error {
	if pvc.Annotations[cdiv1.AnnPodPhase] != want[cdiv1.AnnPodPhase] {
		logf.FromContext(ctx).Info("state", "pvc", pvc.Name, "from", pvc.Annotations[cdiv1.AnnPodPhase], "to", want[cdiv1.AnnPodPhase])
	}
	orig := pvc.DeepCopy()
	pvc.Annotations = maps.Clone(pvc.Annotations)
	maps.Copy(pvc.Annotations, want)
	if err := r.Client.Patch(ctx, pvc, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("annotating PVC %s: %w", pvc.Name, err)
	}
	return nil
}

// start makes the scratch PVC (once asked for) and the importer pod; the
// PVC already says so (starting).
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
	pc := PodConfig{Image: r.Image, PullPolicy: r.PullPolicy, Overhead: datavolume.Overhead(cfg.Status, ptr.Deref(pvc.Spec.StorageClassName, "")),
		InsecureRegistries: cfg.Spec.InsecureRegistries}
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
	return nil
}

// restartWithScratch marks pvc as needing scratch space, then (on the
// pass the mark brings, so that the pass the pod's deletion brings sees
// it) deletes pod, whose importer asked for it: the passes after annotate
// the PVC for a new pod, then make the scratch PVC and the pod again.
func (r *Reconciler) restartWithScratch(ctx context.Context, pvc *corev1.PersistentVolumeClaim, pod *corev1.Pod) error {
	if pvc.Annotations[cdiv1.AnnRequiresScratch] != "true" {
		logf.FromContext(ctx).Info("the importer asked for scratch space", "pvc", pvc.Name, "pod", pod.Name)
		orig := pvc.DeepCopy()
		pvc.Annotations = maps.Clone(pvc.Annotations)
		pvc.Annotations[cdiv1.AnnRequiresScratch] = "true"
		if err := r.Client.Patch(ctx, pvc, client.MergeFrom(orig)); err != nil {
			return fmt.Errorf("annotating PVC %s: %w", pvc.Name, err)
		}
		return nil
	}
	logf.FromContext(ctx).Info("restarting the importer with scratch space", "pvc", pvc.Name, "pod", pod.Name)
	if err := r.Client.Delete(ctx, pod); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting pod %s: %w", pod.Name, err)
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
