package clonecontroller_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/storage/cdi/clone"
	"github.com/kubevmm/kubevmm/storage/cdi/clonecontroller"
	"github.com/kubevmm/kubevmm/storage/cdi/datasource"
	"github.com/kubevmm/kubevmm/storage/cdi/datavolume"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/storage/cdi/upload"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The DataVolume, upload, clone and DataSource controllers against a real
// API server (no kubelet: the test plays the pods' parts). A DataVolume
// cloning a PVC gets a target PVC whose upload
// server accepts only the clone source's certificate; once that server is
// ready the clone source pod runs in the source's namespace with the
// source claim read-only and a client certificate of the upload CA; the
// DataVolume goes CloneScheduled, CloneInProgress, Succeeded, and the
// source pod and Secret are removed. A source used by another pod is not
// cloned (event CloneSourceInUse) until that pod is gone. A sourceRef
// waits for its DataSource to be Ready, then clones its PVC; a clone
// asking no size takes its source's, and a target smaller than its
// source fails naming both. A source in another namespace, authorized by
// the clone token cdi-apiserver issues (the test signs it as the webhook
// does), gets its target claim, its size the source's, and the extended
// token on both. Refused, with no source pod made: a cross-namespace
// DataVolume without a token, one whose DataSource (in its own namespace)
// names a claim elsewhere, a claim annotated as a clone target by its
// user, and one carrying another clone's extended token.
func TestCloneEnvtest(t *testing.T) {
	cfg, k8s := apiserver.StartCDI(t)
	ctx := context.Background()
	s := k8s.Scheme()
	// The claims' namespaces enforce the restricted PodSecurity level: the
	// API server's admission refuses a source or upload pod that breaks it.
	restricted := map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest"}
	for _, ns := range []string{"cdi", "golden", "target"} { // target: clones from golden
		require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: restricted}}))
	}
	ca, err := certs.NewCA("cdi-uploadserver-ca", certs.Config{Duration: 48 * time.Hour, RenewBefore: time.Hour}, time.Now())
	require.NoError(t, err)
	require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: upload.CASecret, Namespace: "cdi"},
		Data: map[string][]byte{corev1.TLSCertKey: ca.Cert, corev1.TLSPrivateKeyKey: ca.Key}}))
	require.NoError(t, k8s.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-csi",
		Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "kubevirt.io.hostpath-provisioner", VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}))
	sp := &cdiv1.StorageProfile{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-csi"}}
	require.NoError(t, k8s.Create(ctx, sp))
	sp.Status.ClaimPropertySets = []cdiv1.ClaimPropertySet{{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		VolumeMode: ptr.To(corev1.PersistentVolumeFilesystem)}}
	require.NoError(t, k8s.Status().Update(ctx, sp))

	signer, verifier, err := token.NewPair()
	require.NoError(t, err)

	mgr := apiserver.NewManager(t, cfg, ctrl.Options{Scheme: s})
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, (&datavolume.Reconciler{Client: mgr.GetClient(), Signer: signer, Tokens: verifier}).SetupWithManager(mgr))
	require.NoError(t, (&upload.Reconciler{Client: mgr.GetClient(), Namespace: "cdi", Image: "registry/cdi-uploadserver:t", Log: discard}).SetupWithManager(mgr))
	rec := apiserver.NewRecorder(mgr.GetClient())
	require.NoError(t, (&clonecontroller.Reconciler{Client: rec, Namespace: "cdi", Image: "registry/cdi-cloner:t",
		Recorder: mgr.GetEventRecorder("cdi-clone"), Log: discard, Tokens: verifier}).SetupWithManager(mgr))
	require.NoError(t, (&datasource.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	// The golden image's claim, 1Gi, and a pod using it.
	golden := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "fedora"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	require.NoError(t, k8s.Create(ctx, golden))
	user := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "virt-launcher-vm"}, Spec: corev1.PodSpec{
		// The namespace's level, as a launcher's.
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "c", Image: "x", SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		Volumes: []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "fedora"}}}}}}
	require.NoError(t, k8s.Create(ctx, user))

	dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "copy"}, Spec: cdiv1.DataVolumeSpec{
		Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "fedora"}}, Storage: &cdiv1.StorageSpec{}}}
	require.NoError(t, k8s.Create(ctx, dv))
	getDV := func(name string) *cdiv1.DataVolume {
		got := &cdiv1.DataVolume{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "golden", Name: name}, got))
		return got
	}
	waitPhase := func(name string, p cdiv1.DataVolumePhase) *cdiv1.DataVolume {
		var got *cdiv1.DataVolume
		apiserver.WaitFor(t, name+" "+string(p), func() (bool, string) {
			got = getDV(name)
			return got.Status.Phase == p, fmt.Sprintf("%s %s %+v", got.Status.Phase, got.Status.Progress, got.Status.Conditions)
		})
		return got
	}
	waitPhase("copy", cdiv1.CloneScheduled)
	target := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "golden", Name: "copy"}, target))
	assert.Equal(t, "golden/fedora", target.Annotations[cdiv1.AnnCloneRequest])
	size := target.Spec.Resources.Requests[corev1.ResourceStorage]
	assert.GreaterOrEqual(t, size.Value(), int64(1<<30), "no size asked: at least the source's")

	// The upload server for the target takes the clone source's
	// certificate alone; the test makes it ready.
	server := &corev1.Pod{}
	apiserver.WaitFor(t, "the upload server", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: "golden", Name: "cdi-upload-copy"}, server)
		return err == nil, fmt.Sprint(err)
	})
	assert.Contains(t, server.Spec.Containers[0].Args, "--client-name="+clone.ClientNameFor(target.UID), "this clone's source, no other")
	server.Status.Phase = corev1.PodRunning
	server.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	require.NoError(t, k8s.Status().Update(ctx, server))

	// The source is in use: an event, no source pod.
	apiserver.WaitFor(t, "event CloneSourceInUse", func() (bool, string) {
		evs := &corev1.EventList{}
		require.NoError(t, k8s.List(ctx, evs, client.InNamespace("golden")))
		for _, e := range evs.Items {
			if e.Reason == clonecontroller.ReasonSourceInUse && e.InvolvedObject.Name == "copy" {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(evs.Items), " events")
	})
	sourcePod := &corev1.Pod{}
	podKey := client.ObjectKey{Namespace: "golden", Name: clonecontroller.PodName(target)}
	require.True(t, apierrors.IsNotFound(k8s.Get(ctx, podKey, sourcePod)), "no clone while the source is in use")
	require.NoError(t, k8s.Delete(ctx, user, client.GracePeriodSeconds(0)))

	apiserver.WaitFor(t, "the clone source pod", func() (bool, string) {
		err := k8s.Get(ctx, podKey, sourcePod)
		return err == nil, fmt.Sprint(err)
	})
	ctr := sourcePod.Spec.Containers[0]
	assert.Equal(t, "registry/cdi-cloner:t", ctr.Image)
	svc := &corev1.Service{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "golden", Name: "cdi-upload-copy"}, svc))
	assert.Contains(t, ctr.Args, "--url=https://"+svc.Spec.ClusterIP+":443", "the Service by address: no cluster DNS")
	assert.Contains(t, ctr.Args, "--server-name=cdi-upload-copy.golden.svc")
	assert.Contains(t, ctr.Args, "--source-dir=/data")
	assert.Equal(t, "fedora", sourcePod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	assert.True(t, sourcePod.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly)
	secret := &corev1.Secret{}
	require.NoError(t, k8s.Get(ctx, podKey, secret))
	block, _ := pem.Decode(secret.Data[corev1.TLSCertKey])
	require.NotNil(t, block)
	cert, err := x509.ParseCertificate(block.Bytes)
	require.NoError(t, err)
	assert.Equal(t, clone.ClientNameFor(target.UID), cert.Subject.CommonName)
	assert.Equal(t, ca.Cert, secret.Data["ca.crt"])

	// The target is written before the source pod exists, and neither
	// claim while the pod waits to be scheduled (the source, never used,
	// is bound by it: kube-scheduler writes it from its own copy, and a
	// write in between fails that with a conflict).
	// seen waits until the controller has read the pod as it is now. A
	// pass over the target begins only once the one before has ended, so
	// it also says that the pass before (and its writes) is done.
	seen := func(what string) {
		apiserver.WaitFor(t, "the controller to read the source pod "+what, func() (bool, string) { return rec.Seen(sourcePod), sourcePod.ResourceVersion })
	}
	seen("as made")
	assert.Equal(t, []string{"patch *v1.PersistentVolumeClaim copy", "create *v1.Secret " + podKey.Name, "create *v1.Pod " + podKey.Name},
		rec.Writes("copy", "fedora", podKey.Name), "the target first")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(target), target))
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(golden), golden))
	versions := []string{target.ResourceVersion, golden.ResourceVersion}
	for i := range 3 { // the last one's read says the pass before it is done
		sourcePod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: fmt.Sprintf("attempt %d: 0/1 nodes are available", i), LastTransitionTime: metav1.Now()}}
		require.NoError(t, k8s.Status().Update(ctx, sourcePod))
		seen(fmt.Sprintf("unschedulable (%d)", i))
	}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(target), target))
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(golden), golden))
	assert.Equal(t, versions, []string{target.ResourceVersion, golden.ResourceVersion}, "a claim was written while the source pod was being scheduled")

	sourcePod.Status.Phase = corev1.PodRunning
	require.NoError(t, k8s.Status().Update(ctx, sourcePod))
	waitPhase("copy", cdiv1.CloneInProgress)

	// The upload server exits once the image is written.
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(server), server))
	server.Status.Phase = corev1.PodSucceeded
	require.NoError(t, k8s.Status().Update(ctx, server))
	got := waitPhase("copy", cdiv1.Succeeded)
	assert.Equal(t, cdiv1.DataVolumeProgress("100.0%"), got.Status.Progress)
	apiserver.WaitFor(t, "the clone source removed", func() (bool, string) {
		errPod, errSecret := k8s.Get(ctx, podKey, &corev1.Pod{}), k8s.Get(ctx, podKey, &corev1.Secret{})
		return apierrors.IsNotFound(errPod) && apierrors.IsNotFound(errSecret), fmt.Sprint(errPod, errSecret)
	})

	// sourceRef: waits for the DataSource, then clones its PVC.
	ref := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "from-ref"}, Spec: cdiv1.DataVolumeSpec{
		SourceRef: &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Namespace: ptr.To("golden"), Name: "fedora"}, Storage: &cdiv1.StorageSpec{}}}
	require.NoError(t, k8s.Create(ctx, ref))
	apiserver.WaitFor(t, "DataSourceNotFound", func() (bool, string) {
		c := cdiv1.FindDataVolumeCondition(getDV("from-ref").Status.Conditions, cdiv1.DataVolumeReady)
		return c != nil && c.Reason == datavolume.ReasonDataSourceNotFound, fmt.Sprintf("%+v", c)
	})
	require.NoError(t, k8s.Create(ctx, &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "fedora"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Name: "fedora"}}}}))
	waitPhase("from-ref", cdiv1.CloneScheduled)
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "golden", Name: "from-ref"}, target))
	assert.Equal(t, "golden/fedora", target.Annotations[cdiv1.AnnCloneRequest])

	// A target smaller than its source fails, naming both.
	small := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "golden", Name: "small"}, Spec: cdiv1.DataVolumeSpec{
		Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "fedora"}},
		PVC: &corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Mi")}}}}}
	require.NoError(t, k8s.Create(ctx, small))
	got = waitPhase("small", cdiv1.Failed)
	c := cdiv1.FindDataVolumeCondition(got.Status.Conditions, cdiv1.DataVolumeReady)
	require.NotNil(t, c)
	assert.Contains(t, c.Message, "target PVC small requests 100Mi, less than the size of the source PVC golden/fedora (1Gi)")
	assert.True(t, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: "golden", Name: "small"}, &corev1.PersistentVolumeClaim{})))

	// A source in another namespace gets its claim, at least the source's
	// size, once its creator's clone token is extended.
	fromGolden := func(name string) *cdiv1.DataVolume {
		return &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "target", Name: name}, Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "fedora"}}, Storage: &cdiv1.StorageSpec{}}}
	}
	issue := func(dv *cdiv1.DataVolume, src cloneauth.Source) { // as cdi-apiserver's webhook
		tok, err := signer.Sign(token.Clone(src, dv.Namespace, dv.Name), time.Now())
		require.NoError(t, err)
		dv.Annotations = map[string]string{cdiv1.AnnCloneToken: tok}
	}
	golden1 := cloneauth.Source{Resource: cloneauth.ResourcePVC, Namespace: "golden", Name: "fedora"}
	other := fromGolden("other")
	issue(other, golden1)
	require.NoError(t, k8s.Create(ctx, other))
	apiserver.WaitFor(t, "target/other's claim", func() (bool, string) {
		pvc := &corev1.PersistentVolumeClaim{}
		err := k8s.Get(ctx, client.ObjectKeyFromObject(other), pvc)
		return err == nil, fmt.Sprint(err)
	})
	pvc := &corev1.PersistentVolumeClaim{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(other), pvc))
	size = pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	assert.GreaterOrEqual(t, size.Cmp(resource.MustParse("1Gi")), 0, "the claim (%s) holds the 1Gi source", size.String())
	assert.NotEmpty(t, pvc.Annotations[cdiv1.AnnExtendedCloneToken], "the clone controller checks the extended token on the claim")
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(other), other))
	assert.Equal(t, pvc.Annotations[cdiv1.AnnExtendedCloneToken], other.Annotations[cdiv1.AnnExtendedCloneToken])

	getTarget := func(name string) *cdiv1.DataVolume {
		got := &cdiv1.DataVolume{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: "target", Name: name}, got))
		return got
	}
	refused := func(name, why string) {
		t.Helper()
		var c *cdiv1.DataVolumeCondition
		apiserver.WaitFor(t, name+" Failed, CloneValidationFailed", func() (bool, string) {
			got := getTarget(name)
			c = cdiv1.FindDataVolumeCondition(got.Status.Conditions, cdiv1.DataVolumeReady)
			return got.Status.Phase == cdiv1.Failed && c != nil && c.Reason == datavolume.ReasonCloneValidationFailed, fmt.Sprintf("%s %+v", got.Status.Phase, c)
		})
		assert.Contains(t, c.Message, why)
		assert.True(t, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: "target", Name: name}, &corev1.PersistentVolumeClaim{})), "no claim for %s", name)
	}
	// No token: what a DataVolume created past cdi-apiserver would be.
	require.NoError(t, k8s.Create(ctx, fromGolden("no-token")))
	refused("no-token", "DataVolume target/no-token may not clone PVC golden/fedora: no clone token")
	// Another DataVolume's token.
	stolen := fromGolden("stolen")
	issue(stolen, golden1)
	stolen.Annotations[cdiv1.AnnCloneToken] = other.Annotations[cdiv1.AnnCloneToken]
	require.NoError(t, k8s.Create(ctx, stolen))
	refused("stolen", "its clone token grants Clone into target/other, not a clone into this DataVolume")
	// A DataSource of the user's own namespace (her token names it) that
	// names a claim elsewhere.
	require.NoError(t, k8s.Create(ctx, &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: "target", Name: "mine"},
		Spec: cdiv1.DataSourceSpec{Source: cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: "golden", Name: "fedora"}}}}))
	viaDS := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "target", Name: "via-ds"}, Spec: cdiv1.DataVolumeSpec{
		SourceRef: &cdiv1.DataVolumeSourceRef{Kind: "DataSource", Name: "mine"}, Storage: &cdiv1.StorageSpec{}}}
	issue(viaDS, cloneauth.Source{Resource: cloneauth.ResourceDataSource, Namespace: "target", Name: "mine"})
	require.NoError(t, k8s.Create(ctx, viaDS))
	refused("via-ds", "token grants a clone of datasources target/mine, not of PVC golden/fedora")

	// Claims annotated as clone targets by their user: never a source pod.
	claim := func(name string, ann map[string]string) *corev1.PersistentVolumeClaim {
		ann[cdiv1.AnnCloneRequest], ann[cdiv1.AnnUploadRequest] = "golden/fedora", ""
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "target", Name: name, Annotations: ann},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		require.NoError(t, k8s.Create(ctx, pvc))
		return pvc
	}
	for _, tc := range []struct {
		name string
		ann  map[string]string
		why  string
	}{
		{"annotated", map[string]string{}, "may not clone PVC golden/fedora: no clone token"},
		{"copied-token", map[string]string{cdiv1.AnnExtendedCloneToken: other.Annotations[cdiv1.AnnExtendedCloneToken]}, "token grants a clone into target/other, not into target/copied-token"},
		{"forged-token", map[string]string{cdiv1.AnnExtendedCloneToken: "eyJhbGciOiJub25lIn0.e30."}, "token:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pvc := claim(tc.name, tc.ann)
			// Its upload server, ready: the clone would start now.
			up := &corev1.Pod{}
			apiserver.WaitFor(t, "the upload server", func() (bool, string) {
				err := k8s.Get(ctx, client.ObjectKey{Namespace: "target", Name: "cdi-upload-" + tc.name}, up)
				return err == nil, fmt.Sprint(err)
			})
			up.Status.Phase = corev1.PodRunning
			up.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			require.NoError(t, k8s.Status().Update(ctx, up))
			// Refused, and still once the upload controller has said the
			// server is ready (the pass that would make the source pod).
			apiserver.WaitFor(t, "the refusal on the ready claim", func() (bool, string) {
				require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pvc), pvc))
				return pvc.Annotations[cdiv1.AnnRunningConditionReason] == clonecontroller.ReasonValidationFailed && pvc.Annotations[cdiv1.AnnPodReady] == "true",
					fmt.Sprint(pvc.Annotations)
			})
			assert.Contains(t, pvc.Annotations[cdiv1.AnnRunningConditionMessage], tc.why)
			apiserver.WaitFor(t, "event CloneValidationFailed", func() (bool, string) {
				evs := &corev1.EventList{}
				require.NoError(t, k8s.List(ctx, evs, client.InNamespace("target")))
				for _, e := range evs.Items {
					if e.Reason == clonecontroller.ReasonValidationFailed && e.InvolvedObject.Name == tc.name {
						return true, ""
					}
				}
				return false, fmt.Sprint(len(evs.Items), " events")
			})
			assert.True(t, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: "golden", Name: clonecontroller.PodName(pvc)}, &corev1.Pod{})),
				"a clone source pod for a claim not authorized")
			assert.True(t, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: "golden", Name: clonecontroller.PodName(pvc)}, &corev1.Secret{})))
		})
	}
}
