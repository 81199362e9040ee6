package dataimportcron_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/dataimportcron"
	"github.com/kubevmm/kubevmm/storage/cdi/registry"
	"github.com/kubevmm/kubevmm/test/apiserver"
	"github.com/kubevmm/kubevmm/test/registrytest"
)

// The controller against a real API server and a real registry (TLS, its
// CA from the cron's certConfigMap): the first digest is imported into a
// pinned DataVolume, the DataSource follows the import once it succeeds,
// a new push is imported at the next tick and the outdated import
// collected, an unreachable registry is a condition, and deleting with
// retentionPolicy None removes the DataSource and the imports. No
// DataVolume controller runs: the test reports the imports done itself.
func TestDataImportCronEnvtest(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	cfg, k8s := apiserver.StartCDI(t)
	ctx := context.Background()

	rc, err := registry.New(registry.Options{CAs: [][]byte{reg.CA}})
	require.NoError(t, err)
	image := "docker://" + reg.Addr + "/kubevmm/fedora:latest"
	ref, err := registry.ParseURL(image)
	require.NoError(t, err)
	// pushTo pushes content as the containerDisk ref names, through c,
	// and returns its digest.
	pushTo := func(c *registry.Client, ref registry.Ref, content string) string {
		p := filepath.Join(t.TempDir(), "disk.img")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		f, err := os.Open(p)
		require.NoError(t, err)
		defer f.Close()
		_, err = c.PushContainerDisk(ctx, ref, "disk.img", f)
		require.NoError(t, err)
		d, err := c.Digest(ctx, ref)
		require.NoError(t, err)
		return d
	}
	push := func(content string) string { return pushTo(rc, ref, content) }
	d1 := push("v1")

	// The clock moves on when the test says: the next tick comes at once.
	var skew atomic.Int64
	mgr := apiserver.NewManager(t, cfg, ctrl.Options{Scheme: k8s.Scheme()})
	r := &dataimportcron.Reconciler{Client: mgr.GetClient(), Digest: dataimportcron.RegistryDigest(mgr.GetAPIReader()),
		Log: slog.Default(), Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }}
	require.NoError(t, r.SetupWithManager(mgr))
	apiserver.Run(t, mgr)

	ns := "os-images"
	require.NoError(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	require.NoError(t, k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry-ca"},
		Data: map[string]string{"ca.pem": string(reg.CA)}}))
	newCron := func(name, url string) *cdiv1.DataImportCron {
		return &cdiv1.DataImportCron{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: cdiv1.DataImportCronSpec{
			Schedule: "0 0 * * *", ManagedDataSource: name, ImportsToKeep: ptr.To[int32](1),
			RetentionPolicy: ptr.To(cdiv1.DataImportCronRetainNone),
			Template: cdiv1.DataVolume{Spec: cdiv1.DataVolumeSpec{
				Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{URL: ptr.To(url), CertConfigMap: ptr.To("registry-ca")}},
				Storage: &cdiv1.StorageSpec{Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse("64Mi")}}}}}}}
	}
	cron := newCron("fedora", image)
	require.NoError(t, k8s.Create(ctx, cron))

	getCron := func() *cdiv1.DataImportCron {
		c := &cdiv1.DataImportCron{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(cron), c))
		return c
	}
	upToDate := func(c *cdiv1.DataImportCron) string {
		if u := cdiv1.FindDataImportCronCondition(c.Status.Conditions, cdiv1.DataImportCronUpToDate); u != nil {
			return string(u.Status) + "/" + u.Reason + ": " + u.Message
		}
		return "none"
	}
	// imported waits for the import of digest, reports it Succeeded, and
	// waits for the DataSource to point at it.
	imported := func(digest string) {
		t.Helper()
		name := dataimportcron.ImportName("fedora", digest)
		dv := &cdiv1.DataVolume{}
		// The controller creates the DataVolume, then writes the cron's
		// status: wait for both.
		apiserver.WaitFor(t, "DataVolume "+name+" and the cron ImportRunning", func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, dv)
			u := upToDate(getCron())
			return err == nil && strings.HasPrefix(u, "False/"+dataimportcron.ReasonImportRunning), fmt.Sprint(err, " ", u)
		})
		assert.Equal(t, "docker://"+reg.Addr+"/kubevmm/fedora@"+digest, *dv.Spec.Source.Registry.URL, "pinned to the digest")
		assert.Equal(t, "registry-ca", *dv.Spec.Source.Registry.CertConfigMap)
		assert.Equal(t, "fedora", dv.Labels[dataimportcron.CronLabel])
		dv.Status.Phase = cdiv1.Succeeded
		require.NoError(t, k8s.Status().Update(ctx, dv))
		apiserver.WaitFor(t, "the DataSource on "+name, func() (bool, string) {
			ds := &cdiv1.DataSource{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fedora"}, ds); err != nil {
				return false, err.Error()
			}
			c := getCron()
			return ds.Spec.Source.PVC != nil && ds.Spec.Source.PVC.Name == name && c.Status.LastImportedPVC != nil &&
					c.Status.LastImportedPVC.Name == name && upToDate(c) == "True/UpToDate: the newest digest is imported in PVC "+name,
				fmt.Sprintf("source %+v, %s", ds.Spec.Source.PVC, upToDate(c))
		})
	}
	imported(d1)
	c := getCron()
	assert.Equal(t, []cdiv1.ImportStatus{{DataVolumeName: dataimportcron.ImportName("fedora", d1), Digest: d1}}, c.Status.CurrentImports)
	assert.NotNil(t, c.Status.LastImportTimestamp)
	assert.Contains(t, c.Finalizers, dataimportcron.Finalizer)

	// A new push under the same tag: the next tick imports it, and the
	// first import goes (importsToKeep 1).
	d2 := push("v2")
	require.NotEqual(t, d1, d2)
	skew.Add(int64(25 * time.Hour))
	require.NoError(t, k8s.Patch(ctx, getCron(), client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"tick":"1"}}}`))))
	imported(d2)
	apiserver.WaitFor(t, "the first import collected", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: dataimportcron.ImportName("fedora", d1)}, &cdiv1.DataVolume{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	t.Run("unreachable registry", func(t *testing.T) {
		bad := newCron("nowhere", "docker://127.0.0.1:1/kubevmm/fedora:latest")
		require.NoError(t, k8s.Create(ctx, bad))
		apiserver.WaitFor(t, "UpToDate False naming the registry", func() (bool, string) {
			c := &cdiv1.DataImportCron{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(bad), c))
			u := upToDate(c)
			return strings.HasPrefix(u, "False/"+dataimportcron.ReasonDigestError) && strings.Contains(u, "127.0.0.1:1"), u
		})
		require.NoError(t, k8s.Delete(ctx, bad))
	})

	t.Run("an insecure registry once CDIConfig lists it", func(t *testing.T) {
		plain := registrytest.Start(t, registrytest.Options{PlainHTTP: true})
		prc, err := registry.New(registry.Options{Insecure: true})
		require.NoError(t, err)
		url := "docker://" + plain.Addr + "/kubevmm/plain:latest"
		pref, err := registry.ParseURL(url)
		require.NoError(t, err)
		digest := pushTo(prc, pref, "plain")

		pc := newCron("plain", url)
		require.NoError(t, k8s.Create(ctx, pc))
		defer func() { _ = k8s.Delete(ctx, pc) }()
		state := func() string {
			c := &cdiv1.DataImportCron{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(pc), c))
			return upToDate(c)
		}
		apiserver.WaitFor(t, "UpToDate False: TLS to a plain registry", func() (bool, string) {
			u := state()
			return strings.HasPrefix(u, "False/"+dataimportcron.ReasonDigestError), u
		})
		conf := &cdiv1.CDIConfig{ObjectMeta: metav1.ObjectMeta{Name: cdiv1.CDIConfigName}, Spec: cdiv1.CDIConfigSpec{InsecureRegistries: []string{plain.Addr}}}
		require.NoError(t, k8s.Create(ctx, conf))
		defer func() { _ = k8s.Delete(ctx, conf) }()
		skew.Add(int64(25 * time.Hour))
		require.NoError(t, k8s.Patch(ctx, pc, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"tick":"1"}}}`))))
		name := dataimportcron.ImportName("plain", digest)
		apiserver.WaitFor(t, "DataVolume "+name, func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cdiv1.DataVolume{})
			return err == nil, fmt.Sprint(err, " ", state())
		})
	})

	t.Run("deletion with retentionPolicy None", func(t *testing.T) {
		require.NoError(t, k8s.Delete(ctx, getCron()))
		apiserver.WaitFor(t, "the cron, its DataSource and imports gone", func() (bool, string) {
			cerr := k8s.Get(ctx, client.ObjectKeyFromObject(cron), &cdiv1.DataImportCron{})
			derr := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fedora"}, &cdiv1.DataSource{})
			dvs := &cdiv1.DataVolumeList{}
			require.NoError(t, k8s.List(ctx, dvs, client.InNamespace(ns), client.MatchingLabels{dataimportcron.CronLabel: "fedora"}))
			return apierrors.IsNotFound(cerr) && apierrors.IsNotFound(derr) && len(dvs.Items) == 0,
				fmt.Sprintf("cron: %v, DataSource: %v, %d imports", cerr, derr, len(dvs.Items))
		})
	})
}
