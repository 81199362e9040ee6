// Package datavolume is CDI's DataVolume controller: a DataVolume
// (cdi.kubevirt.io/v1beta1) gets its PVC, of the same name and owned by
// it (Claim: `pvc` as written, or `storage` completed from the
// StorageProfile and grown by CDIConfig's filesystem overhead), annotated
// with its source for the transfer controller that fills it (the import
// controller, storage/cdi/importer, for http and blank; the upload
// controller for upload). The DataVolume's status follows the PVC and
// the annotations that controller writes back (Status, a pure function).
//
// States (status.phase):
//
//	Pending           no PVC yet, or the PVC is neither bound nor being
//	                  filled
//	PVCBound          the PVC is bound and nothing fills it yet
//	ImportScheduled   the importer pod is pending
//	ImportInProgress  the importer pod runs: status.progress is its
//	                  kubevirt_cdi_import_progress_total, read every 2 s
//	UploadScheduled   the upload server pod is pending or not ready
//	UploadReady       the upload server pod is ready for an upload
//	Succeeded         the transfer pod succeeded (progress 100.0%)
//	Failed            the spec cannot make a PVC (a size not positive, no
//	                  access modes to be had) or the API server refused
//	                  the PVC: the Ready condition says why (a class or
//	                  StorageProfile that appears brings it back)
//
// A failing importer is restarted by its kubelet (restartPolicy
// OnFailure): the DataVolume stays ImportInProgress, restartCount counts
// the restarts and the Running condition carries the importer's last
// error. WaitForFirstConsumer classes (hostpath-csi) are honoured as
// upstream does with its HonorWaitForFirstConsumer gate off: the transfer
// pod is the claim's first consumer, so the phase WaitForFirstConsumer is
// never entered and the claim binds on the node the pod is scheduled to.
package datavolume

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/patch"
	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
)

// progressInterval is how often a running import's progress is read.
const progressInterval = 2 * time.Second

// Reconciler reconciles DataVolumes.
type Reconciler struct {
	Client client.Client
	// Signer and Tokens extend and check clone tokens (the token key
	// pair cdi-apiserver signs with); without them no clone from another
	// namespace is authorized.
	Signer *token.Signer
	Tokens *token.Verifier
	// MetricsPort overrides importer.MetricsPort (tests).
	MetricsPort int
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := logf.FromContext(ctx)
	dv := &cdiv1.DataVolume{}
	if err := r.Client.Get(ctx, req.NamespacedName, dv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if dv.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	if ext, ok := r.extendCloneToken(dv, time.Now()); ok {
		// The token's few minutes may end long before the source is
		// there: extended now, it is checked when the claim is made.
		orig := dv.DeepCopy()
		dv.Annotations[cdiv1.AnnExtendedCloneToken] = ext
		if err := r.Client.Patch(ctx, dv, client.MergeFrom(orig)); err != nil {
			return reconcile.Result{}, fmt.Errorf("writing the extended clone token: %w", err)
		}
		log.Info("clone token extended")
		return reconcile.Result{}, nil
	}
	var s Seen
	pvc := &corev1.PersistentVolumeClaim{}
	switch err := r.Client.Get(ctx, req.NamespacedName, pvc); {
	case apierrors.IsNotFound(err):
		if err := r.createClaim(ctx, dv, &s); err != nil {
			return reconcile.Result{}, err
		}
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("reading PVC %s: %w", req.NamespacedName, err)
	default:
		s.Claim = pvc
		s.Foreign = !metav1.IsControlledBy(pvc, dv)
	}
	if s.Claim != nil && !s.Foreign && (s.Claim.Annotations[cdiv1.AnnPodPhase] == string(corev1.PodRunning) ||
		s.Claim.Annotations[cdiv1.AnnCloneSourcePhase] == string(corev1.PodRunning)) {
		// A progress that cannot be read is no error: the last one stays.
		s.Progress, _ = r.progress(ctx, s.Claim)
	}
	st := Status(dv, s, metav1.Now())
	if dv.Status.Phase != st.Phase {
		log.Info("state", "from", dv.Status.Phase, "to", st.Phase)
	}
	if err := patch.Status(ctx, r.Client, dv, &dv.Status, st); err != nil {
		return reconcile.Result{}, err
	}
	if st.Phase == cdiv1.ImportInProgress || st.Phase == cdiv1.CloneInProgress || s.Waiting != nil {
		return reconcile.Result{RequeueAfter: progressInterval}, nil
	}
	return reconcile.Result{}, nil
}

// createClaim makes the DataVolume's PVC, or says in s why it cannot.
func (r *Reconciler) createClaim(ctx context.Context, dv *cdiv1.DataVolume, s *Seen) error {
	env := Env{Profiles: map[string]*cdiv1.StorageProfile{}}
	scs := &storagev1.StorageClassList{}
	if err := r.Client.List(ctx, scs); err != nil {
		return fmt.Errorf("listing StorageClasses: %w", err)
	}
	env.Classes = scs.Items
	sps := &cdiv1.StorageProfileList{}
	if err := r.Client.List(ctx, sps); err != nil {
		return fmt.Errorf("listing StorageProfiles: %w", err)
	}
	for i := range sps.Items {
		env.Profiles[sps.Items[i].Name] = &sps.Items[i]
	}
	cfg := &cdiv1.CDIConfig{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: cdiv1.CDIConfigName}, cfg); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("reading CDIConfig %s: %w", cdiv1.CDIConfigName, err)
	}
	env.Config = cfg.Status
	dv, wait, err := r.resolveSource(ctx, dv)
	if err != nil || wait != nil {
		s.Waiting = wait
		return err
	}
	asked, _ := Size(dv)
	dv, src, wait, err := r.cloneSource(ctx, dv)
	if inv, ok := err.(invalidError); ok {
		s.Invalid = inv.msg
		return nil
	}
	if err != nil || wait != nil {
		s.Waiting = wait
		return err
	}
	pvc, err := Claim(dv, env)
	if inv, ok := err.(invalidError); ok {
		s.Invalid = inv.msg
		return nil
	}
	if err != nil {
		return err
	}
	if src != nil {
		if asked.IsZero() {
			sizeAsSource(pvc, src)
		}
		if s.Invalid = tooSmall(pvc, src); s.Invalid != "" {
			return nil
		}
		if src.Namespace != dv.Namespace {
			if why := r.cloneAuthorized(dv, client.ObjectKeyFromObject(src), time.Now()); why != "" {
				s.Invalid, s.InvalidReason = why, ReasonCloneValidationFailed
				return nil
			}
			// The clone controller checks it again on the claim.
			pvc.Annotations[cdiv1.AnnExtendedCloneToken] = dv.Annotations[cdiv1.AnnExtendedCloneToken]
		}
	}
	switch err := r.Client.Create(ctx, pvc); {
	case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		s.Invalid = "the API server refused PVC " + pvc.Name + ": " + err.Error()
	case err != nil:
		return fmt.Errorf("creating PVC %s: %w", pvc.Name, err)
	default:
		s.Claim = pvc
	}
	return nil
}

// progress reads the running importer's progress metric.
func (r *Reconciler) progress(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (cdiv1.DataVolumeProgress, error) {
	key := client.ObjectKey{Namespace: pvc.Namespace, Name: pvc.Annotations[cdiv1.AnnImportPod]}
	if ns, name, ok := strings.Cut(pvc.Annotations[cdiv1.AnnCloneSourcePod], "/"); ok {
		// A clone's progress is its source pod's (cdi-cloner serves it
		// as the importer does).
		key = client.ObjectKey{Namespace: ns, Name: name}
	}
	if key.Name == "" {
		return "", nil
	}
	name := key.String()
	pod := &corev1.Pod{}
	if err := r.Client.Get(ctx, key, pod); err != nil {
		return "", fmt.Errorf("reading pod %s: %w", name, err)
	}
	// The claim's user can write its annotations: only this claim's own
	// clone source pod is asked, no pod of another namespace they name.
	if key.Namespace != pvc.Namespace && pod.Labels[cdiv1.LabelCloneTarget] != string(pvc.UID) {
		return "", fmt.Errorf("pod %s is not the clone source of PVC %s/%s", name, pvc.Namespace, pvc.Name)
	}
	if pod.Status.PodIP == "" {
		return "", nil
	}
	port := r.MetricsPort
	if port == 0 {
		port = importer.MetricsPort
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port))+"/metrics", nil)
	if err != nil {
		return "", fmt.Errorf("importer metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("importer metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("importer metrics: %s", resp.Status)
	}
	return ParseProgress(bufio.NewScanner(resp.Body))
}

// ParseProgress finds the progress metric in a Prometheus text
// exposition: "45.50%"; "" if it is not there.
func ParseProgress(sc *bufio.Scanner) (cdiv1.DataVolumeProgress, error) {
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, cdiv1.ProgressMetric) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil || v < 0 || v > 100 {
			return "", fmt.Errorf("importer metrics: bad %s sample %q", cdiv1.ProgressMetric, line)
		}
		return cdiv1.DataVolumeProgress(strconv.FormatFloat(v, 'f', 2, 64) + "%"), nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("importer metrics: %w", err)
	}
	return "", nil
}

// SetupWithManager registers the reconciler: DataVolumes and their PVCs,
// and the StorageClasses and StorageProfiles a `storage` DataVolume's
// claim is completed from.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	// A DataVolume and its class are often created together (one
	// manifest), and a class's StorageProfile comes later still (the CDI
	// operator makes it): a DataVolume that failed for want of either is
	// brought back when it appears.
	toDataVolumes := handler.EnqueueRequestsFromMapFunc(r.storageDataVolumes)
	return ctrl.NewControllerManagedBy(mgr).Named("datavolume").For(&cdiv1.DataVolume{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		Watches(&storagev1.StorageClass{}, toDataVolumes).
		Watches(&cdiv1.StorageProfile{}, toDataVolumes).
		Complete(r)
}

// storageDataVolumes are the `storage` DataVolumes of the class named
// like o (a StorageClass or its StorageProfile), or of the default class.
func (r *Reconciler) storageDataVolumes(ctx context.Context, o client.Object) []reconcile.Request {
	var dvs cdiv1.DataVolumeList
	if err := r.Client.List(ctx, &dvs); err != nil {
		logf.FromContext(ctx).Error(err, "listing the DataVolumes of a storage class", "class", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range dvs.Items {
		s := dvs.Items[i].Spec.Storage
		if s == nil {
			continue
		}
		if class := ptr.Deref(s.StorageClassName, ""); class == "" || class == o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&dvs.Items[i])})
		}
	}
	return reqs
}
