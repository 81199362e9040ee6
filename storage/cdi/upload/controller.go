// Package upload is CDI's upload controller (run by cdi-controller): for
// each PVC annotated cdi.kubevirt.io/storage.upload.target (made so by
// the DataVolume controller for a DataVolume with source.upload, or by
// `virtctl image-upload pvc`) it runs the upload server: pod and Service
// cdi-upload-<pvc>, and Secret cdi-upload-<pvc> with the server's
// certificate (signed by the CA in Secret cdi-uploadserver-ca of CDI's
// namespace, which cdi-uploadproxy's client certificate also comes from).
// It keeps on the PVC how the pod goes, which the DataVolume controller
// turns into UploadScheduled/UploadReady/Succeeded and cdi-uploadproxy
// reads before proxying: cdi.kubevirt.io/storage.pod.phase (the pod's
// phase) and cdi.kubevirt.io/storage.pod.ready ("true"/"false").
//
// States of a PVC (one reconcile reads the PVC and its pod, decides with
// decide, a pure function, and writes):
//
//	no pod, PVC not phase Pending, ready false, restarts 0
//	                  -> those annotations written, nothing else
//	no pod, PVC so    -> Secret, Service, pod made (on the pass the
//	                     write brings)
//	pod Pending/Running -> phase and ready copied from the pod
//	pod Succeeded     -> phase Succeeded (the image is on the PVC), the
//	                     pod, Service and Secret deleted: the volume is
//	                     free for its consumer
//	pod Failed        -> phase Failed (the server restarts in place on
//	                     errors: restartPolicy OnFailure)
//	phase Succeeded   -> nothing more, ever: a PVC is uploaded once
//
// The PVC is written before its pod exists, never just after: with a
// WaitForFirstConsumer class the scheduler writes the PVC (the selected
// node) from its own copy while it places the pod, and a write of ours in
// between fails that with a conflict, leaving the pod in the scheduler's
// backoff for minutes. So the annotations a new pod gives are on the PVC
// before the pod is made, and a pod waiting to be scheduled changes none
// of them.
package upload

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/storage/cdi/clone"
	"github.com/kubevmm/kubevmm/storage/cdi/datavolume"
	"github.com/kubevmm/kubevmm/storage/cdi/podsecurity"
	"github.com/kubevmm/kubevmm/storage/cdi/uploadproxy"
)

// Names shared with cdi-uploadproxy and the operator.
const (
	// CASecret (in CDI's namespace) holds the CA (tls.crt, tls.key) that
	// signs the upload servers' certificates and the proxy's client one.
	CASecret = "cdi-uploadserver-ca"
	// CABundleKey, in CASecret and in every certificate's Secret made
	// from it, holds the CAs to trust: the current one and, through a
	// rotation, the previous (the operator's certs.MakePlan).
	CABundleKey = "ca.crt"
	// ProxyClientName is the common name of cdi-uploadproxy's client
	// certificate, the only client upload servers accept.
	ProxyClientName = "cdi-uploadproxy"
	// Port is the upload server's HTTPS port (its Service's is 443).
	Port = 8443
	// PodLabel marks upload server pods; its value is the PVC's UID.
	PodLabel = "cdi.kubevirt.io/uploadTarget"
)

// Paths in the upload server's container.
const (
	dataDir     = "/data"
	blockDevice = "/dev/cdi-block-volume"
	scratchDir  = "/scratch"
	certDir     = "/etc/cdi-upload/certs"
)

// serverCert is how long an upload server's certificate is valid: it
// outlives any wait for an upload; a pod restarted later gets a new one.
var serverCert = certs.Config{Duration: 30 * 24 * time.Hour, RenewBefore: 24 * time.Hour}

// Reconciler runs the upload servers.
type Reconciler struct {
	Client client.Client
	// Namespace is CDI's, where CASecret is.
	Namespace  string
	Image      string
	PullPolicy corev1.PullPolicy
	Log        *slog.Logger
}

// SetupWithManager registers the controller: PVCs that are upload
// targets, and the pods they own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	isTarget := predicate.NewPredicateFuncs(func(o client.Object) bool {
		_, ok := o.GetAnnotations()[cdiv1.AnnUploadRequest]
		return ok
	})
	return ctrl.NewControllerManagedBy(mgr).Named("cdi-upload").
		For(&corev1.PersistentVolumeClaim{}, builder.WithPredicates(isTarget)).
		Owns(&corev1.Pod{}).
		Complete(r)
}

// action is what a reconcile does.
type action struct {
	// create the Secret, Service and pod.
	create bool
	// cleanup deletes them.
	cleanup bool
	// annotations to set on the PVC (nil: none change).
	annotations map[string]string
}

// decide is the state machine above: from the PVC and its pod (nil when
// there is none).
func decide(pvc *corev1.PersistentVolumeClaim, pod *corev1.Pod) action {
	ann := pvc.Annotations
	if _, ok := ann[cdiv1.AnnUploadRequest]; !ok || pvc.DeletionTimestamp != nil {
		return action{}
	}
	if corev1.PodPhase(ann[cdiv1.AnnPodPhase]) == corev1.PodSucceeded {
		return action{cleanup: pod != nil}
	}
	if pod == nil {
		// What the new pod will say while it waits to be scheduled.
		want := map[string]string{cdiv1.AnnPodPhase: string(corev1.PodPending), cdiv1.AnnPodReady: "false", cdiv1.AnnPodRestarts: "0"}
		if changes(ann, want) {
			return action{annotations: want}
		}
		return action{create: true}
	}
	want := map[string]string{cdiv1.AnnPodPhase: string(pod.Status.Phase), cdiv1.AnnPodReady: strconv.FormatBool(podReady(pod))}
	if want[cdiv1.AnnPodPhase] == "" {
		want[cdiv1.AnnPodPhase] = string(corev1.PodPending)
	}
	restarts := int32(0)
	for _, cs := range pod.Status.ContainerStatuses {
		restarts += cs.RestartCount
	}
	want[cdiv1.AnnPodRestarts] = strconv.Itoa(int(restarts))
	a := action{cleanup: pod.Status.Phase == corev1.PodSucceeded}
	if changes(ann, want) {
		a.annotations = want
	}
	return a
}

func changes(ann, want map[string]string) bool {
	for k, v := range want {
		if cur, ok := ann[k]; !ok || cur != v {
			return true
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.Client.Get(ctx, req.NamespacedName, pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	name := uploadproxy.ServerName(pvc.Name)
	var pod *corev1.Pod
	p := &corev1.Pod{}
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: pvc.Namespace, Name: name}, p); {
	case err == nil && metav1.IsControlledBy(p, pvc):
		pod = p
	case err == nil:
		return reconcile.Result{}, fmt.Errorf("pod %s/%s exists and is not this PVC's upload server", pvc.Namespace, name)
	case !apierrors.IsNotFound(err):
		return reconcile.Result{}, fmt.Errorf("reading the upload pod: %w", err)
	}
	a := decide(pvc, pod)
	if a.create {
		if err := r.create(ctx, pvc); err != nil {
			return reconcile.Result{}, err
		}
	}
	if a.annotations != nil {
		patch := client.MergeFrom(pvc.DeepCopy())
		if pvc.Annotations == nil {
			pvc.Annotations = map[string]string{}
		}
		old := pvc.Annotations[cdiv1.AnnPodPhase] + "/" + pvc.Annotations[cdiv1.AnnPodReady]
		maps.Copy(pvc.Annotations, a.annotations)
		if err := r.Client.Patch(ctx, pvc, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("annotating PVC %s/%s: %w", pvc.Namespace, pvc.Name, err)
		}
		if now := a.annotations[cdiv1.AnnPodPhase] + "/" + a.annotations[cdiv1.AnnPodReady]; now != old {
			r.Log.Info("upload server", "pvc", req.String(), "phase", a.annotations[cdiv1.AnnPodPhase], "ready", a.annotations[cdiv1.AnnPodReady])
		}
	}
	if a.cleanup {
		for _, o := range []client.Object{&corev1.Pod{}, &corev1.Service{}, &corev1.Secret{}} {
			o.SetNamespace(pvc.Namespace)
			o.SetName(name)
			if err := r.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, fmt.Errorf("removing the upload server %T: %w", o, err)
			}
		}
	}
	return reconcile.Result{}, nil
}

// create makes the Secret, Service and pod, each owned by the PVC; those
// that exist are kept.
func (r *Reconciler) create(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	caSecret := &corev1.Secret{}
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: CASecret}, caSecret); err != nil {
		return fmt.Errorf("the upload CA (Secret %s/%s): %w", r.Namespace, CASecret, err)
	}
	ca := certs.KeyPair{Cert: caSecret.Data[corev1.TLSCertKey], Key: caSecret.Data[corev1.TLSPrivateKeyKey]}
	name := uploadproxy.ServerName(pvc.Name)
	host := fmt.Sprintf("%s.%s.svc", name, pvc.Namespace)
	leaf, err := certs.NewLeaf(ca, certs.Leaf{CommonName: host, DNSNames: []string{host},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, serverCert, time.Now())
	if err != nil {
		return fmt.Errorf("upload server certificate: %w", err)
	}
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: pvc.Namespace, Labels: map[string]string{PodLabel: string(pvc.UID)},
			Annotations: map[string]string{cdiv1.AnnCreatedBy: "yes"}}
	}
	secret := &corev1.Secret{ObjectMeta: meta(), Type: corev1.SecretTypeTLS, Data: map[string][]byte{
		corev1.TLSCertKey: leaf.Cert, corev1.TLSPrivateKeyKey: leaf.Key, CABundleKey: CABundle(caSecret)}}
	svc := &corev1.Service{ObjectMeta: meta(), Spec: corev1.ServiceSpec{
		Selector: map[string]string{PodLabel: string(pvc.UID)},
		Ports:    []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt(Port)}}}}
	// The filesystem overhead CDIConfig says for the claim's class
	// (CDI's default without one), as the DataVolume controller sized it.
	cfg := &cdiv1.CDIConfig{}
	if err := r.Client.Get(ctx, types.NamespacedName{Name: cdiv1.CDIConfigName}, cfg); client.IgnoreNotFound(err) != nil && !apimeta.IsNoMatchError(err) {
		return fmt.Errorf("reading CDIConfig %s: %w", cdiv1.CDIConfigName, err)
	}
	pod, err := r.pod(pvc, meta(), datavolume.Overhead(cfg.Status, ptr.Deref(pvc.Spec.StorageClassName, "")))
	if err != nil {
		return err
	}
	for _, o := range []client.Object{secret, svc, pod} {
		if err := controllerutil.SetControllerReference(pvc, o, r.Client.Scheme()); err != nil {
			return fmt.Errorf("owner of %s: %w", name, err)
		}
		if err := r.Client.Create(ctx, o); client.IgnoreAlreadyExists(err) != nil {
			return fmt.Errorf("creating the upload server %T %s: %w", o, name, err)
		}
	}
	return nil
}

// UsableSize is how large an image a Filesystem PVC of size bytes holds:
// size less the overhead, in whole sectors, as the importer counts (a
// Block volume's is its device's size, which the server reads).
func UsableSize(size int64, overhead float64) int64 {
	return int64(float64(size)*(1-overhead)) / 512 * 512
}

func (r *Reconciler) pod(pvc *corev1.PersistentVolumeClaim, meta metav1.ObjectMeta, overhead float64) (*corev1.Pod, error) {
	// A clone target takes its image from the clone source only, never
	// through the proxy.
	clientName := ProxyClientName
	if _, ok := pvc.Annotations[cdiv1.AnnCloneRequest]; ok {
		clientName = clone.ClientNameFor(pvc.UID)
	}
	args := []string{fmt.Sprintf("--listen=:%d", Port), "--cert-dir=" + certDir, "--client-name=" + clientName, "--scratch=" + scratchDir}
	ctr := corev1.Container{Name: "cdi-upload-server", Image: r.Image, ImagePullPolicy: r.PullPolicy,
		Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: Port}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromInt(Port), Scheme: corev1.URISchemeHTTPS}}, PeriodSeconds: 2},
		VolumeMounts:    []corev1.VolumeMount{{Name: "scratch", MountPath: scratchDir}, {Name: "certs", MountPath: certDir, ReadOnly: true}},
		SecurityContext: podsecurity.Container(),
		Resources:       corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		args = append(args, "--block-device="+blockDevice)
		ctr.VolumeDevices = []corev1.VolumeDevice{{Name: "data", DevicePath: blockDevice}}
	} else {
		size, ok := pvc.Status.Capacity[corev1.ResourceStorage]
		if !ok {
			size, ok = pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		}
		if !ok {
			return nil, fmt.Errorf("PVC %s/%s requests no storage", pvc.Namespace, pvc.Name)
		}
		args = append(args, "--dest="+dataDir, fmt.Sprintf("--size=%d", UsableSize(size.Value(), overhead)))
		ctr.VolumeMounts = append(ctr.VolumeMounts, corev1.VolumeMount{Name: "data", MountPath: dataDir})
	}
	ctr.Args = args
	return &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{
		SecurityContext:               podsecurity.Pod(),
		RestartPolicy:                 corev1.RestartPolicyOnFailure,
		TerminationGracePeriodSeconds: ptr.To(int64(5)),
		Containers:                    []corev1.Container{ctr},
		Volumes: []corev1.Volume{
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: pvc.Name}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: meta.Name}}},
		},
	}}, nil
}

// CABundle is what a certificate made from the upload CA Secret s is to
// trust: its bundle, or the CA alone in a Secret written before bundles.
func CABundle(s *corev1.Secret) []byte {
	if b := s.Data[CABundleKey]; len(b) > 0 {
		return b
	}
	return s.Data[corev1.TLSCertKey]
}
