package cdi_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/operator/cdi"
	"github.com/kubevmm/kubevmm/operator/cdi/install"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The operator against a real API server (no kubelet: the test reports
// cdi-deployment ready itself): the CDI as HCO writes it deploys
// cdi-controller, CDIConfig config and a StorageProfile per class; edits
// are reverted; unknown fields and a second CDI are refused by name;
// deleting the CDI waits for the DataVolumes to go.
func TestCDIOperatorEnvtest(t *testing.T) {
	cfg, k8s := apiserver.StartCDI(t)
	ctx := context.Background()
	s := k8s.Scheme()
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: install.Namespace}}))
	require.NoError(t, k8s.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-csi",
		Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner: "kubevirt.io.hostpath-provisioner", VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}))

	// The operator runs as its service account, with the RBAC it is
	// deployed with.
	ops, err := install.OperatorObjects(install.OperatorConfig{ImageRegistry: "localhost/kubevmm", ImageTag: "envtest"})
	require.NoError(t, err)
	for _, o := range ops {
		if k := o.GetObjectKind().GroupVersionKind().Kind; k != "CustomResourceDefinition" && k != "Namespace" { // StartCDI installed them, the test made it
			require.NoError(t, k8s.Create(ctx, o))
		}
	}
	mgr := apiserver.NewManager(t, apiserver.AsServiceAccount(cfg, install.Namespace, install.OperatorName), ctrl.Options{Scheme: s, Cache: kit.OwnNamespaceCache(install.Namespace)})
	r := &cdi.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Options: cdi.Options{
		Config: install.Config{ImageRegistry: "localhost/kubevmm", ImageTag: "envtest", PullPolicy: corev1.PullNever}, Version: "envtest"}}
	require.NoError(t, r.SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	const name = "cdi-kubevirt-hyperconverged"
	get := func(n string) *cdiv1.CDI {
		out := &cdiv1.CDI{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: n}, out))
		return out
	}
	waitCond := func(n string, ct cdiv1.ConditionType, prefix string) *cdiv1.CDI {
		var cur *cdiv1.CDI
		apiserver.WaitFor(t, fmt.Sprintf("%s %s %s", n, ct, prefix), func() (bool, string) {
			cur = get(n)
			c := "none"
			if cond := cdiv1.FindCondition(cur.Status.Conditions, ct); cond != nil {
				c = string(cond.Status) + "/" + cond.Reason + ": " + cond.Message
			}
			return strings.HasPrefix(c, prefix), c
		})
		return cur
	}
	patch := func(p string) {
		require.NoError(t, k8s.Patch(ctx, &cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: name}},
			client.RawPatch("application/merge-patch+json", []byte(p))))
	}

	// As HCO writes it.
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"uninstallStrategy": "BlockUninstallIfWorkloadsExist"}}}
	u.SetGroupVersionKind(cdiv1.GroupVersion.WithKind("CDI"))
	u.SetName(name)
	require.NoError(t, k8s.Create(ctx, u))
	c := waitCond(name, cdiv1.ConditionProgressing, "True/DeployStarted: not ready yet: Deployment cdi/cdi-deployment, Deployment cdi/cdi-apiserver, Deployment cdi/cdi-uploadproxy")
	assert.Equal(t, cdiv1.CDIPhaseDeploying, c.Status.Phase)
	assert.Contains(t, c.Finalizers, cdi.Finalizer)
	dep := &appsv1.Deployment{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.Controller}, dep))
	require.Len(t, dep.OwnerReferences, 1)
	assert.Equal(t, c.UID, dep.OwnerReferences[0].UID)
	assert.Equal(t, "localhost/kubevmm/cdi-controller:envtest", dep.Spec.Template.Spec.Containers[0].Image)
	assert.Contains(t, dep.Spec.Template.Spec.Containers[0].Args, "--importer-image=localhost/kubevmm/cdi-importer:envtest")
	// The token key pair, which the DataVolume and clone controllers check
	// and extend clone tokens with.
	assert.Contains(t, dep.Spec.Template.Spec.Containers[0].VolumeMounts,
		corev1.VolumeMount{Name: install.SecretTokenKey, MountPath: install.ControllerTokenDir, ReadOnly: true})
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	require.NoError(t, k8s.Status().Update(ctx, dep))
	for _, n := range []string{install.APIServer, install.UploadProxy} {
		d := &appsv1.Deployment{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: n}, d))
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
		require.NoError(t, k8s.Status().Update(ctx, d))
	}
	c = waitCond(name, cdiv1.ConditionAvailable, "True/DeployCompleted")
	assert.Equal(t, cdiv1.CDIPhaseDeployed, c.Status.Phase)
	assert.Equal(t, "envtest", c.Status.ObservedVersion)

	t.Run("upload certificates", func(t *testing.T) {
		secret := func(n string) *corev1.Secret {
			s := &corev1.Secret{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: n}, s))
			return s
		}
		ca := secret(install.SecretUploadCA).Data[corev1.TLSCertKey]
		require.NotEmpty(t, ca)
		roots := x509.NewCertPool()
		require.True(t, roots.AppendCertsFromPEM(ca))
		for n, want := range map[string]x509.VerifyOptions{
			install.SecretAPIServerCert:     {DNSName: "cdi-api.cdi.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
			install.SecretUploadProxyCert:   {DNSName: "cdi-uploadproxy.cdi.svc", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}},
			install.SecretUploadProxyClient: {KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
		} {
			s := secret(n)
			cert, _, err := certs.Parse(certs.KeyPair{Cert: s.Data[corev1.TLSCertKey], Key: s.Data[corev1.TLSPrivateKeyKey]})
			require.NoError(t, err, n)
			want.Roots = roots
			_, err = cert.Verify(want)
			require.NoError(t, err, n)
			assert.Equal(t, ca, s.Data["ca.crt"], n)
		}
		assert.Equal(t, "cdi-uploadproxy", func() string {
			s := secret(install.SecretUploadProxyClient)
			cert, _, err := certs.Parse(certs.KeyPair{Cert: s.Data[corev1.TLSCertKey], Key: s.Data[corev1.TLSPrivateKeyKey]})
			require.NoError(t, err)
			return cert.Subject.CommonName
		}())
		keys := secret(install.SecretTokenKey).Data
		signer, err := token.NewSigner(keys[token.PrivateKeyKey])
		require.NoError(t, err)
		verifier, err := token.NewVerifier(keys[token.PublicKeyKey])
		require.NoError(t, err)
		tok, err := signer.Sign(token.Upload("ns", "pvc"), time.Now())
		require.NoError(t, err)
		_, err = verifier.Verify(tok, time.Now())
		require.NoError(t, err, "the key pair's halves belong together")
		svc := &unstructured.Unstructured{}
		svc.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"})
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.APIServiceName}, svc))
		bundle, _, _ := unstructured.NestedString(svc.Object, "spec", "caBundle")
		assert.Equal(t, base64.StdEncoding.EncodeToString(ca), bundle, "the API server trusts cdi-apiserver by the upload CA")
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.DataVolumeWebhook}, vwc))
		require.Len(t, vwc.Webhooks, 1)
		assert.Equal(t, ca, vwc.Webhooks[0].ClientConfig.CABundle, "the DataVolume webhook is cdi-apiserver, trusted by the upload CA")
		assert.Equal(t, admissionregistrationv1.Fail, *vwc.Webhooks[0].FailurePolicy, "no clone slips past a cdi-apiserver that is down")
		mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.DataVolumeMutatingWebhook}, mwc))
		require.Len(t, mwc.Webhooks, 1)
		assert.Equal(t, ca, mwc.Webhooks[0].ClientConfig.CABundle, "the clone token webhook is cdi-apiserver, trusted by the upload CA")
		assert.Equal(t, admissionregistrationv1.Fail, *mwc.Webhooks[0].FailurePolicy, "no clone goes without its token")
	})

	t.Run("CDIConfig", func(t *testing.T) {
		cc := &cdiv1.CDIConfig{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: cdiv1.CDIConfigName}, cc))
		assert.Nil(t, cc.Status.UploadProxyURL)
		assert.Equal(t, "hostpath-csi", cc.Status.ScratchSpaceStorageClass)
		assert.Equal(t, &cdiv1.FilesystemOverhead{Global: "0.06", StorageClass: map[string]cdiv1.Percent{"hostpath-csi": "0.06"}}, cc.Status.FilesystemOverhead)
		require.NotNil(t, cc.Status.DefaultPodResourceRequirements)
		assert.Equal(t, "600M", ptr.To(cc.Status.DefaultPodResourceRequirements.Limits[corev1.ResourceMemory]).String())
		patch(`{"spec":{"config":{"uploadProxyURLOverride":"https://upload.example.org","filesystemOverhead":{"global":"0.1"}}}}`)
		apiserver.WaitFor(t, "the config's status", func() (bool, string) {
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: cdiv1.CDIConfigName}, cc))
			url := ptr.Deref(cc.Status.UploadProxyURL, "")
			return url == "https://upload.example.org" && cc.Status.FilesystemOverhead.StorageClass["hostpath-csi"] == "0.1",
				fmt.Sprintf("%s %+v", url, cc.Status.FilesystemOverhead)
		})
	})

	t.Run("StorageProfile", func(t *testing.T) {
		sp := &cdiv1.StorageProfile{}
		apiserver.WaitFor(t, "the profile's status", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Name: "hostpath-csi"}, sp)
			return err == nil && len(sp.Status.ClaimPropertySets) == 2, fmt.Sprintf("%v %+v", err, sp.Status)
		})
		assert.Equal(t, "kubevirt.io.hostpath-provisioner", ptr.Deref(sp.Status.Provisioner, ""))
		assert.Equal(t, corev1.PersistentVolumeFilesystem, *sp.Status.ClaimPropertySets[0].VolumeMode)
		assert.Equal(t, corev1.PersistentVolumeBlock, *sp.Status.ClaimPropertySets[1].VolumeMode)
		// The user's spec wins.
		require.NoError(t, k8s.Patch(ctx, sp, client.RawPatch("application/merge-patch+json",
			[]byte(`{"spec":{"claimPropertySets":[{"accessModes":["ReadWriteOnce"],"volumeMode":"Block"}]}}`))))
		apiserver.WaitFor(t, "the user's property sets", func() (bool, string) {
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: "hostpath-csi"}, sp))
			return len(sp.Status.ClaimPropertySets) == 1, fmt.Sprintf("%+v", sp.Status.ClaimPropertySets)
		})
		// A new class gets its profile.
		require.NoError(t, k8s.Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Provisioner: "example.org/other"}))
		apiserver.WaitFor(t, "the new class's profile", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Name: "other"}, sp)
			return err == nil && ptr.Deref(sp.Status.Provisioner, "") == "example.org/other", fmt.Sprint(err)
		})
	})

	t.Run("drift is reverted", func(t *testing.T) {
		require.NoError(t, k8s.Patch(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: install.Namespace, Name: install.Controller}},
			client.RawPatch("application/strategic-merge-patch+json",
				[]byte(`{"spec":{"template":{"spec":{"containers":[{"name":"cdi-controller","image":"elsewhere/cdi-controller:old"}]}}}}`)),
			client.FieldOwner("someone")))
		apiserver.WaitFor(t, "the image back", func() (bool, string) {
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: install.Namespace, Name: install.Controller}, dep))
			img := dep.Spec.Template.Spec.Containers[0].Image
			return img == "localhost/kubevmm/cdi-controller:envtest", img
		})
		require.NoError(t, k8s.Patch(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: install.DataVolumeWebhook}},
			client.RawPatch(types.JSONPatchType, []byte(`[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Ignore"}]`))))
		apiserver.WaitFor(t, "the DataVolume webhook's failurePolicy back", func() (bool, string) {
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKey{Name: install.DataVolumeWebhook}, vwc))
			p := *vwc.Webhooks[0].FailurePolicy
			return p == admissionregistrationv1.Fail, string(p)
		})
		// A new generation: no kube-controller-manager here to roll it.
		waitCond(name, cdiv1.ConditionProgressing, "True/DeployStarted")
		dep.Status.ObservedGeneration = dep.Generation
		require.NoError(t, k8s.Status().Update(ctx, dep))
		waitCond(name, cdiv1.ConditionAvailable, "True/DeployCompleted")
	})

	t.Run("unknown fields are refused by name", func(t *testing.T) {
		patch(`{"spec":{"cloneStrategyOverride":"copy","config":{"featureGates":["HonorWaitForFirstConsumer"]}}}`)
		waitCond(name, cdiv1.ConditionDegraded, "True/InvalidConfiguration: not supported by kubevmm: spec.cloneStrategyOverride, spec.config.featureGates")
		patch(`{"spec":{"cloneStrategyOverride":null,"config":{"featureGates":null}}}`)
		waitCond(name, cdiv1.ConditionAvailable, "True/DeployCompleted")
	})

	t.Run("a second CDI is refused", func(t *testing.T) {
		time.Sleep(1100 * time.Millisecond) // creation timestamps have a resolution of a second
		require.NoError(t, k8s.Create(ctx, &cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "second"}}))
		waitCond("second", cdiv1.ConditionDegraded, "True/ConflictingCDI: there is one CDI per cluster: CDI "+name+" is it")
		require.NoError(t, k8s.Delete(ctx, &cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: "second"}}))
		apiserver.WaitFor(t, "the second CDI gone", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Name: "second"}, &cdiv1.CDI{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})

	t.Run("deleting waits for the DataVolumes", func(t *testing.T) {
		dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "blank"}, Spec: cdiv1.DataVolumeSpec{
			Source: &cdiv1.DataVolumeSource{Blank: &cdiv1.DataVolumeBlankImage{}},
			PVC: &corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: *resourceOf("1Gi")}}}}}
		require.NoError(t, k8s.Create(ctx, dv))
		require.NoError(t, k8s.Delete(ctx, &cdiv1.CDI{ObjectMeta: metav1.ObjectMeta{Name: name}}))
		c := waitCond(name, cdiv1.ConditionDegraded, "True/UninstallBlocked: 1 DataVolumes exist")
		assert.Equal(t, cdiv1.CDIPhaseDeleting, c.Status.Phase)
		require.NoError(t, k8s.Delete(ctx, dv))
		apiserver.WaitFor(t, "the CDI gone", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Name: name}, &cdiv1.CDI{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})
}

func resourceOf(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
