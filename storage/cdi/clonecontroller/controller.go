// Package clonecontroller is the controller side of CDI's host-assisted
// clone (run by cdi-controller). A clone target is a PVC the DataVolume
// controller made for a DataVolume with source.pvc (or a sourceRef to a
// DataSource): annotated k8s.io/CloneRequest ("namespace/name" of the
// source) and an upload target, so the upload controller runs its
// upload server, which accepts only the clone source's client
// certificate. This controller runs the clone source pod
// (cdi-clone-source-<target UID>, in the source's namespace, with the
// source claim mounted read-only) once that server is ready: cdi-cloner
// streams the image to it. The pod and its client certificate Secret live
// in another namespace than the target, so they cannot be owned by it:
// they are labelled with the target and removed when the clone is done or
// the target is gone.
//
// A target is any PVC so annotated, and users can annotate their own
// claims: the source pod runs with cdi-controller's authority in the
// source's namespace. So a target whose source is in another namespace
// must carry cdiv1.AnnExtendedCloneToken, the DataVolume controller's
// extension of the token cdi-apiserver issued to the DataVolume's creator
// once it authorized the clone (storage/cdi/token), and must be the claim
// of that very DataVolume (its name, the token's UID). A claim in the
// source's own namespace needs none: whoever can make it can mount that
// namespace's claims in a pod.
//
// States of a target (one reconcile reads the target, its source claim,
// its DataVolume when the source is elsewhere and the source pod, decides
// with decide, a pure function, and writes):
//
//	not authorized              -> no source pod (one there is removed),
//	                               event CloneValidationFailed and the
//	                               Running condition False with that
//	                               reason and why on the target
//	source claim missing        -> wait (the DataVolume stays CloneScheduled)
//	source claim used by a pod  -> wait, event CloneSourceInUse on the
//	                               target (a running VM's disk is not
//	                               copied under it)
//	upload server not ready     -> wait
//	ready, no source pod, target not annotated for one
//	                            -> the pod's name and phase Pending on
//	                               the target, nothing else
//	ready, no source pod, target so annotated
//	                            -> Secret and pod made (on the pass the
//	                               write brings)
//	source pod                  -> its phase and name on the target
//	                               (CloneScheduled/CloneInProgress); a
//	                               new pod, and one still being
//	                               scheduled, changes neither
//	target upload Succeeded     -> source pod and Secret deleted
//	target gone                 -> source pod and Secret deleted
//
// WaitForFirstConsumer: the target binds where its upload server pod is
// scheduled (its first consumer), the source where it is already used or,
// if never used, where the clone source pod is scheduled. The scheduler
// writes such a claim (the selected node) from its own copy while it
// places the pod, and any other write in between fails that with a
// conflict and leaves the pod in its backoff for minutes: so the target
// is annotated before the source pod exists (it is bound by then, but
// the rule is the upload and import controllers' too), and the source
// claim is never written here.
package clonecontroller

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/storage/cdi/clone"
	"github.com/kubevmm/kubevmm/storage/cdi/podsecurity"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/storage/cdi/upload"
	"github.com/kubevmm/kubevmm/storage/cdi/uploadproxy"
)

// TargetLabel marks a clone source pod and its Secret; its value is the
// target PVC's UID. TargetAnnotation is the target's "namespace/name".
const (
	TargetLabel      = cdiv1.LabelCloneTarget
	TargetAnnotation = "cdi.kubevirt.io/cloneTargetClaim"
)

// ReasonSourceInUse is the event on a target whose source claim a pod
// uses (CDI's). ReasonValidationFailed is the event and Running condition
// reason on a target not authorized to clone its source (CDI's).
const (
	ReasonSourceInUse      = "CloneSourceInUse"
	ReasonValidationFailed = "CloneValidationFailed"
)

// waitInterval is how often a clone waiting on its source looks again.
const waitInterval = 5 * time.Second

// Paths in the clone source pod.
const (
	sourceDir    = "/data"
	sourceDevice = "/dev/cdi-clone-source"
	certDir      = "/etc/cdi-clone/certs"
)

var clientCert = certs.Config{Duration: 7 * 24 * time.Hour, RenewBefore: time.Hour}

// Reconciler runs clone source pods.
type Reconciler struct {
	Client client.Client
	// Namespace is CDI's, where upload.CASecret is.
	Namespace  string
	Image      string
	PullPolicy corev1.PullPolicy
	Recorder   events.EventRecorder
	Log        *slog.Logger
	// Tokens checks extended clone tokens; without it no clone from
	// another namespace is authorized.
	Tokens *token.Verifier
}

// SetupWithManager registers the controller: clone targets, and the
// source pods (mapped to their target by annotation).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	isTarget := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[cdiv1.AnnCloneRequest]
		return ok
	})
	toTarget := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if key, ok := splitKey(o.GetAnnotations()[TargetAnnotation]); ok {
			return []reconcile.Request{{NamespacedName: key}}
		}
		return nil
	})
	return ctrl.NewControllerManagedBy(mgr).Named("cdi-clone").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(isTarget)).
		Watches(&corev1.Pod{}, toTarget, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			_, ok := o.GetLabels()[TargetLabel]
			return ok
		}))).
		Complete(r)
}

func splitKey(s string) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// PodName is the clone source pod's (and its Secret's) name for a target.
func PodName(target *corev1.PersistentVolumeClaim) string {
	return "cdi-clone-source-" + string(target.UID)
}

// seen is what a reconcile read.
type seen struct {
	target *corev1.PersistentVolumeClaim
	// source is the source claim, nil if missing.
	source *corev1.PersistentVolumeClaim
	// users are the pods other than the clone's own using the source.
	users []string
	// pod is the clone source pod, nil if none.
	pod *corev1.Pod
	// unauthorized is why the target may not clone its source ("" if it
	// may).
	unauthorized string
}

// action is what a reconcile does.
type action struct {
	create, cleanup bool
	// refuse is why the clone is not authorized (an event and the
	// target's Running condition).
	refuse string
	// inUse names the pods using the source (an event, and a wait).
	inUse []string
	// wait: look again later (the source claim is not there yet).
	wait        bool
	annotations map[string]string
}

// decide is the state machine above.
func decide(s seen) action {
	ann := s.target.Annotations
	if s.target.DeletionTimestamp != nil || corev1.PodPhase(ann[cdiv1.AnnPodPhase]) == corev1.PodSucceeded {
		return action{cleanup: s.pod != nil}
	}
	if s.unauthorized != "" {
		a := action{cleanup: s.pod != nil}
		want := map[string]string{cdiv1.AnnRunningCondition: "false", cdiv1.AnnRunningConditionReason: ReasonValidationFailed,
			cdiv1.AnnRunningConditionMessage: s.unauthorized}
		if changes(ann, want) {
			a.refuse, a.annotations = s.unauthorized, want
		}
		return a
	}
	if s.pod != nil {
		phase := string(s.pod.Status.Phase)
		if phase == "" {
			phase = string(corev1.PodPending)
		}
		want := map[string]string{cdiv1.AnnCloneSourcePod: s.pod.Namespace + "/" + s.pod.Name, cdiv1.AnnCloneSourcePhase: phase}
		if changes(ann, want) {
			return action{annotations: want}
		}
		return action{}
	}
	switch {
	case s.source == nil:
		return action{wait: true}
	case len(s.users) > 0:
		return action{inUse: s.users, wait: true}
	case ann[cdiv1.AnnPodReady] != "true":
		return action{}
	}
	// What the new pod will say.
	want := map[string]string{cdiv1.AnnCloneSourcePod: s.source.Namespace + "/" + PodName(s.target), cdiv1.AnnCloneSourcePhase: string(corev1.PodPending)}
	if changes(ann, want) {
		return action{annotations: want}
	}
	return action{create: true}
}

func changes(ann, want map[string]string) bool {
	for k, v := range want {
		if cur, ok := ann[k]; !ok || cur != v {
			return true
		}
	}
	return false
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	target := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, target); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, r.cleanupGone(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, fmt.Errorf("reading PVC %s: %w", req, err)
	}
	srcKey, ok := splitKey(target.Annotations[cdiv1.AnnCloneRequest])
	if !ok {
		return reconcile.Result{}, nil
	}
	s := seen{target: target}
	unauthorized, err := r.authorize(ctx, target, srcKey)
	if err != nil {
		return reconcile.Result{}, err
	}
	s.unauthorized = unauthorized
	pod := &corev1.Pod{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: srcKey.Namespace, Name: PodName(target)}, pod); {
	case err == nil:
		s.pod = pod
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading the clone source pod: %w", err)
	}
	src := &corev1.PersistentVolumeClaim{}
	switch err := r.Client.Get(ctx, srcKey, src); {
	case err == nil:
		s.source = src
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading the clone source PVC %s: %w", srcKey, err)
	}
	if s.source != nil && s.pod == nil {
		users, err := r.users(ctx, srcKey)
		if err != nil {
			return reconcile.Result{}, err
		}
		s.users = users
	}
	a := decide(s)
	if a.refuse != "" {
		r.Recorder.Eventf(target, nil, corev1.EventTypeWarning, ReasonValidationFailed, "CloneSource", "%s", a.refuse)
		r.Log.Info("clone refused", "target", req.String(), "source", srcKey.String(), "why", a.refuse)
	}
	if len(a.inUse) > 0 {
		r.Recorder.Eventf(target, nil, corev1.EventTypeNormal, ReasonSourceInUse, "CloneSource", "pod %s/%s using PersistentVolumeClaim %s", srcKey.Namespace, strings.Join(a.inUse, ","), srcKey.Name)
	}
	if a.create {
		if err := r.create(ctx, target, src); err != nil {
			return reconcile.Result{}, err
		}
		r.Log.Info("clone source started", "target", req.String(), "source", srcKey.String())
	}
	if a.annotations != nil {
		patch := client.MergeFrom(target.DeepCopy())
		if target.Annotations == nil {
			target.Annotations = map[string]string{}
		}
		old := target.Annotations[cdiv1.AnnCloneSourcePhase]
		maps.Copy(target.Annotations, a.annotations)
		if err := r.Client.Patch(ctx, target, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("annotating PVC %s: %w", req, err)
		}
		if now := a.annotations[cdiv1.AnnCloneSourcePhase]; now != old {
			r.Log.Info("clone source", "target", req.String(), "phase", now)
		}
	}
	if a.cleanup {
		if err := r.remove(ctx, srcKey.Namespace, PodName(target)); err != nil {
			return reconcile.Result{}, err
		}
		r.Log.Info("clone source removed", "target", req.String())
	}
	if a.wait {
		return reconcile.Result{RequeueAfter: waitInterval}, nil
	}
	return reconcile.Result{}, nil
}

// authorize says why target may not clone the claim src ("" if it may):
// a source in another namespace needs a valid extended clone token that
// grants src to the target (token.Payload.GrantsClone), and the target's
// DataVolume must be the one the token was extended for.
func (r *Reconciler) authorize(ctx context.Context, target *corev1.PersistentVolumeClaim, src types.NamespacedName) (string, error) {
	if src.Namespace == target.Namespace {
		return "", nil
	}
	why := func(msg string) string {
		return fmt.Sprintf("PVC %s/%s may not clone PVC %s: %s", target.Namespace, target.Name, src, msg)
	}
	tok, ok := target.Annotations[cdiv1.AnnExtendedCloneToken]
	switch {
	case !ok:
		return why("no clone token (a clone from another namespace is made by a DataVolume whose creator may create datavolumes/source there)"), nil
	case r.Tokens == nil:
		return why("cdi-controller has no token key to check its clone token"), nil
	}
	p, err := r.Tokens.VerifyExtended(tok, time.Now())
	if err != nil {
		return why(err.Error()), nil
	}
	if err := p.GrantsClone(src, target.Namespace, target.Name); err != nil {
		return why(err.Error()), nil
	}
	dv := &cdiv1.DataVolume{}
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(target), dv); {
	case apierrors.IsNotFound(err):
		return why("its DataVolume is gone"), nil
	case err != nil:
		return "", fmt.Errorf("reading the DataVolume of the clone target %s/%s: %w", target.Namespace, target.Name, err)
	case string(dv.UID) != p.Params[token.ParamTargetUID] || !metav1.IsControlledBy(target, dv):
		return why("the clone token was issued to another DataVolume"), nil
	}
	return "", nil
}

// users are the pods, other than clone source pods, that use the claim
// and have not finished.
func (r *Reconciler) users(ctx context.Context, claim types.NamespacedName) ([]string, error) {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(claim.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the pods of %s: %w", claim.Namespace, err)
	}
	var out []string
	for _, p := range pods.Items {
		if _, ours := p.Labels[TargetLabel]; ours || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim.Name {
				out = append(out, p.Name)
				break
			}
		}
	}
	return out, nil
}

// cleanupGone removes the source pods and Secrets of a target that is
// gone.
func (r *Reconciler) cleanupGone(ctx context.Context, target types.NamespacedName) error {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.HasLabels{TargetLabel}); err != nil {
		return fmt.Errorf("listing clone source pods: %w", err)
	}
	for _, p := range pods.Items {
		if p.Annotations[TargetAnnotation] == target.String() {
			if err := r.remove(ctx, p.Namespace, p.Name); err != nil {
				return err
			}
			r.Log.Info("clone source removed: target gone", "target", target.String())
		}
	}
	return nil
}

func (r *Reconciler) remove(ctx context.Context, ns, name string) error {
	for _, o := range []client.Object{&corev1.Pod{}, &corev1.Secret{}} {
		o.SetNamespace(ns)
		o.SetName(name)
		if err := r.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing the clone source %T %s/%s: %w", o, ns, name, err)
		}
	}
	return nil
}

// create makes the client certificate's Secret and the source pod.
func (r *Reconciler) create(ctx context.Context, target, src *corev1.PersistentVolumeClaim) error {
	caSecret := &corev1.Secret{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: upload.CASecret}, caSecret); err != nil {
		return fmt.Errorf("the upload CA (Secret %s/%s): %w", r.Namespace, upload.CASecret, err)
	}
	// The upload server's Service by its address: the dev cluster has no
	// cluster DNS (the certificate is checked against the Service's name).
	svc := &corev1.Service{}
	svcKey := types.NamespacedName{Namespace: target.Namespace, Name: uploadproxy.ServerName(target.Name)}
	if err := r.Client.Get(ctx, svcKey, svc); err != nil {
		return fmt.Errorf("the upload server's Service %s: %w", svcKey, err)
	}
	if svc.Spec.ClusterIP == "" || svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return fmt.Errorf("the upload server's Service %s has no cluster IP", svcKey)
	}
	ca := certs.KeyPair{Cert: caSecret.Data[corev1.TLSCertKey], Key: caSecret.Data[corev1.TLSPrivateKeyKey]}
	leaf, err := certs.NewLeaf(ca, certs.Leaf{CommonName: clone.ClientNameFor(target.UID), Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, clientCert, time.Now())
	if err != nil {
		return fmt.Errorf("clone client certificate: %w", err)
	}
	meta := metav1.ObjectMeta{Name: PodName(target), Namespace: src.Namespace, Labels: map[string]string{TargetLabel: string(target.UID)},
		Annotations: map[string]string{TargetAnnotation: target.Namespace + "/" + target.Name, cdiv1.AnnCreatedBy: "yes"}}
	secret := &corev1.Secret{ObjectMeta: *meta.DeepCopy(), Type: corev1.SecretTypeTLS, Data: map[string][]byte{
		corev1.TLSCertKey: leaf.Cert, corev1.TLSPrivateKeyKey: leaf.Key, upload.CABundleKey: upload.CABundle(caSecret)}}
	pod := Pod(target, src, svc.Spec.ClusterIP, *meta.DeepCopy(), r.Image, r.PullPolicy)
	for _, o := range []client.Object{secret, pod} {
		if err := r.Client.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating the clone source %T %s/%s: %w", o, meta.Namespace, meta.Name, err)
		}
	}
	return nil
}

// Pod is the clone source pod: cdi-cloner with the source claim
// (read-only) and the client certificate, sending to the target's upload
// server at its Service's address ip.
func Pod(target, src *corev1.PersistentVolumeClaim, ip string, meta metav1.ObjectMeta, image string, pull corev1.PullPolicy) *corev1.Pod {
	args := []string{"--url=https://" + net.JoinHostPort(ip, "443"), fmt.Sprintf("--server-name=%s.%s.svc", uploadproxy.ServerName(target.Name), target.Namespace),
		"--cert-dir=" + certDir, "--owner-uid=" + string(target.UID)}
	ctr := corev1.Container{Name: "cdi-clone-source", Image: image, ImagePullPolicy: pull,
		VolumeMounts:    []corev1.VolumeMount{{Name: "certs", MountPath: certDir, ReadOnly: true}},
		SecurityContext: podsecurity.Container(),
		Resources:       corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")}},
	}
	if src.Spec.VolumeMode != nil && *src.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		args = append(args, "--block-device="+sourceDevice)
		ctr.VolumeDevices = []corev1.VolumeDevice{{Name: "source", DevicePath: sourceDevice}}
	} else {
		args = append(args, "--source-dir="+sourceDir)
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "source", MountPath: sourceDir, ReadOnly: true})
	}
	ctr.Args = args
	return &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{
		SecurityContext:               podsecurity.Pod(),
		RestartPolicy:                 corev1.RestartPolicyOnFailure,
		TerminationGracePeriodSeconds: ptr.To(int64(5)),
		Containers:                    []corev1.Container{ctr},
		Volumes: []corev1.Volume{
			{Name: "source", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: src.Name, ReadOnly: true}}},
			{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: meta.Name}}},
		},
	}}
}
