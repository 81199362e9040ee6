package dataimportcron_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/dataimportcron"
)

var (
	d1 = "sha256:" + strings.Repeat("1", 64)
	d2 = "sha256:" + strings.Repeat("2", 64)
	t0 = time.Date(2026, 1, 1, 10, 0, 30, 0, time.UTC)
)

func newCron() *cdiv1.DataImportCron {
	return &cdiv1.DataImportCron{
		ObjectMeta: metav1.ObjectMeta{Namespace: "os-images", Name: "fedora-cron"},
		Spec: cdiv1.DataImportCronSpec{
			Schedule:          "*/5 * * * *",
			ManagedDataSource: "fedora",
			Template: cdiv1.DataVolume{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"a": "b"}},
				Spec: cdiv1.DataVolumeSpec{Source: &cdiv1.DataVolumeSource{Registry: &cdiv1.DataVolumeSourceRegistry{
					URL: ptr.To("docker://registry:5000/fedora:latest"), PullMethod: ptr.To(cdiv1.RegistryPullNode)}}},
			},
		},
	}
}

func dv(name string, phase cdiv1.DataVolumePhase, created time.Time) cdiv1.DataVolume {
	return cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "os-images",
		CreationTimestamp: metav1.NewTime(created)}, Status: cdiv1.DataVolumeStatus{Phase: phase}}
}

func cond(st cdiv1.DataImportCronStatus, t cdiv1.DataImportCronConditionType) cdiv1.DataImportCronCondition {
	c := cdiv1.FindDataImportCronCondition(st.Conditions, t)
	if c == nil {
		return cdiv1.DataImportCronCondition{}
	}
	return *c
}

func TestDue(t *testing.T) {
	c := newCron()
	due, next, err := dataimportcron.Due(c, t0)
	require.NoError(t, err)
	assert.True(t, due, "never polled")
	assert.Equal(t, time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC), next)

	c.Status.LastExecutionTimestamp = &metav1.Time{Time: t0}
	due, _, err = dataimportcron.Due(c, t0.Add(4*time.Minute))
	require.NoError(t, err)
	assert.False(t, due, "polled at 10:00:30, the 10:05 tick not passed at 10:04:30")
	due, _, err = dataimportcron.Due(c, t0.Add(5*time.Minute))
	require.NoError(t, err)
	assert.True(t, due, "the 10:05 tick passed")

	c.Spec.Schedule = "every minute"
	_, _, err = dataimportcron.Due(c, t0)
	require.ErrorContains(t, err, `spec.schedule "every minute"`)
}

func TestDecide(t *testing.T) {
	now := metav1.NewTime(t0)
	next := t0.Add(4*time.Minute + 30*time.Second)
	name1, name2 := "fedora-111111111111", "fedora-222222222222"
	importing := func(c *cdiv1.DataImportCron) {
		c.Status.CurrentImports = []cdiv1.ImportStatus{{DataVolumeName: name1, Digest: d1}}
	}
	imported := func(c *cdiv1.DataImportCron, name, digest string) {
		c.Status.CurrentImports = []cdiv1.ImportStatus{{DataVolumeName: name, Digest: digest}}
		c.Status.LastImportedPVC = &cdiv1.DataVolumeSourcePVC{Namespace: "os-images", Name: name}
	}
	tests := []struct {
		name                  string
		cron                  func(*cdiv1.DataImportCron)
		obs                   dataimportcron.Observed
		create                string
		delete                []string
		dsPVC                 string
		upToDate, progressing corev1.ConditionStatus
		reason                string
		current               []cdiv1.ImportStatus
	}{
		{name: "first digest: an import made",
			obs:    dataimportcron.Observed{Polled: true, Digest: d1, Next: next},
			create: name1, upToDate: corev1.ConditionFalse, progressing: corev1.ConditionTrue, reason: dataimportcron.ReasonImportRunning,
			current: []cdiv1.ImportStatus{{DataVolumeName: name1, Digest: d1}}},
		{name: "import running",
			cron:     importing,
			obs:      dataimportcron.Observed{Imports: []cdiv1.DataVolume{dv(name1, cdiv1.ImportInProgress, t0)}, Next: next},
			upToDate: corev1.ConditionFalse, progressing: corev1.ConditionTrue, reason: dataimportcron.ReasonImportRunning,
			current: []cdiv1.ImportStatus{{DataVolumeName: name1, Digest: d1}}},
		{name: "import done: the DataSource on it",
			cron:  importing,
			obs:   dataimportcron.Observed{Imports: []cdiv1.DataVolume{dv(name1, cdiv1.Succeeded, t0)}, Next: next},
			dsPVC: name1, upToDate: corev1.ConditionTrue, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonUpToDate,
			current: []cdiv1.ImportStatus{{DataVolumeName: name1, Digest: d1}}},
		{name: "same digest polled: nothing new",
			cron:  func(c *cdiv1.DataImportCron) { imported(c, name1, d1) },
			obs:   dataimportcron.Observed{Polled: true, Digest: d1, Imports: []cdiv1.DataVolume{dv(name1, cdiv1.Succeeded, t0)}, Next: next},
			dsPVC: name1, upToDate: corev1.ConditionTrue, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonUpToDate,
			current: []cdiv1.ImportStatus{{DataVolumeName: name1, Digest: d1}}},
		{name: "new digest: imported while the DataSource stays on the last",
			cron:   func(c *cdiv1.DataImportCron) { imported(c, name1, d1) },
			obs:    dataimportcron.Observed{Polled: true, Digest: d2, Imports: []cdiv1.DataVolume{dv(name1, cdiv1.Succeeded, t0)}, Next: next},
			create: name2, dsPVC: name1, upToDate: corev1.ConditionFalse, progressing: corev1.ConditionTrue, reason: dataimportcron.ReasonImportRunning,
			current: []cdiv1.ImportStatus{{DataVolumeName: name2, Digest: d2}}},
		{name: "new digest's DataVolume already there: not made twice",
			cron: func(c *cdiv1.DataImportCron) { imported(c, name1, d1) },
			obs: dataimportcron.Observed{Polled: true, Digest: d2, Next: next,
				Imports: []cdiv1.DataVolume{dv(name1, cdiv1.Succeeded, t0), dv(name2, cdiv1.ImportInProgress, t0)}},
			dsPVC: name1, upToDate: corev1.ConditionFalse, progressing: corev1.ConditionTrue, reason: dataimportcron.ReasonImportRunning,
			current: []cdiv1.ImportStatus{{DataVolumeName: name2, Digest: d2}}},
		{name: "unreachable registry: UpToDate False with the error, the DataSource kept",
			cron: func(c *cdiv1.DataImportCron) { imported(c, name1, d1) },
			obs: dataimportcron.Observed{Polled: true, DigestErr: errors.New("registry:5000: connection refused"), Next: next,
				Imports: []cdiv1.DataVolume{dv(name1, cdiv1.Succeeded, t0)}},
			dsPVC: name1, upToDate: corev1.ConditionFalse, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonDigestError,
			current: []cdiv1.ImportStatus{{DataVolumeName: name1, Digest: d1}}},
		{name: "the last poll's error stands until the next poll",
			cron: func(c *cdiv1.DataImportCron) {
				imported(c, name1, d1)
				c.Status.Conditions = []cdiv1.DataImportCronCondition{{Type: cdiv1.DataImportCronUpToDate,
					ConditionState: cdiv1.ConditionState{Status: corev1.ConditionFalse, Reason: dataimportcron.ReasonDigestError, Message: "connection refused"}}}
			},
			obs:   dataimportcron.Observed{Imports: []cdiv1.DataVolume{dv(name1, cdiv1.Succeeded, t0)}, Next: next},
			dsPVC: name1, upToDate: corev1.ConditionFalse, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonDigestError,
			current: []cdiv1.ImportStatus{{DataVolumeName: name1, Digest: d1}}},
		{name: "a malformed digest from the registry is refused",
			obs:      dataimportcron.Observed{Polled: true, Digest: "sha256:../../x", Next: next},
			upToDate: corev1.ConditionFalse, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonDigestError},
		{name: "failed import reported",
			cron:     importing,
			obs:      dataimportcron.Observed{Imports: []cdiv1.DataVolume{dv(name1, cdiv1.Failed, t0)}, Next: next},
			upToDate: corev1.ConditionFalse, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonImportFailed,
			current: []cdiv1.ImportStatus{{DataVolumeName: name1, Digest: d1}}},
		{name: "bad schedule",
			cron:     func(c *cdiv1.DataImportCron) { c.Spec.Schedule = "nope" },
			obs:      dataimportcron.Observed{ScheduleErr: errors.New(`spec.schedule "nope": expected exactly 5 fields`)},
			upToDate: corev1.ConditionFalse, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonInvalidSchedule},
		{name: "garbage collected beyond importsToKeep, newest kept",
			cron: func(c *cdiv1.DataImportCron) { imported(c, "fedora-d", d2); c.Spec.ImportsToKeep = ptr.To[int32](2) },
			obs: dataimportcron.Observed{Next: next, Imports: []cdiv1.DataVolume{
				dv("fedora-a", cdiv1.Succeeded, t0.Add(-3*time.Hour)), dv("fedora-b", cdiv1.Succeeded, t0.Add(-2*time.Hour)),
				dv("fedora-c", cdiv1.Succeeded, t0.Add(-time.Hour)), dv("fedora-d", cdiv1.Succeeded, t0)}},
			delete: []string{"fedora-b", "fedora-a"}, dsPVC: "fedora-d",
			upToDate: corev1.ConditionTrue, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonUpToDate,
			current: []cdiv1.ImportStatus{{DataVolumeName: "fedora-d", Digest: d2}}},
		{name: "importsToKeep 0 still keeps the DataSource's import",
			cron: func(c *cdiv1.DataImportCron) { imported(c, "fedora-d", d2); c.Spec.ImportsToKeep = ptr.To[int32](0) },
			obs: dataimportcron.Observed{Next: next, Imports: []cdiv1.DataVolume{
				dv("fedora-c", cdiv1.Succeeded, t0.Add(-time.Hour)), dv("fedora-d", cdiv1.Succeeded, t0)}},
			delete: []string{"fedora-c"}, dsPVC: "fedora-d",
			upToDate: corev1.ConditionTrue, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonUpToDate,
			current: []cdiv1.ImportStatus{{DataVolumeName: "fedora-d", Digest: d2}}},
		{name: "garbageCollect Never keeps all",
			cron: func(c *cdiv1.DataImportCron) {
				imported(c, "fedora-d", d2)
				c.Spec.ImportsToKeep = ptr.To[int32](0)
				c.Spec.GarbageCollect = ptr.To(cdiv1.DataImportCronGarbageCollectNever)
			},
			obs: dataimportcron.Observed{Next: next, Imports: []cdiv1.DataVolume{
				dv("fedora-c", cdiv1.Succeeded, t0.Add(-time.Hour)), dv("fedora-d", cdiv1.Succeeded, t0)}},
			dsPVC: "fedora-d", upToDate: corev1.ConditionTrue, progressing: corev1.ConditionFalse, reason: dataimportcron.ReasonUpToDate,
			current: []cdiv1.ImportStatus{{DataVolumeName: "fedora-d", Digest: d2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCron()
			if tc.cron != nil {
				tc.cron(c)
			}
			tc.obs.Cron = c
			d, err := dataimportcron.Decide(tc.obs, now)
			require.NoError(t, err)
			if tc.create == "" {
				assert.Nil(t, d.Create)
			} else if assert.NotNil(t, d.Create) {
				assert.Equal(t, tc.create, d.Create.Name)
				assert.Equal(t, "os-images", d.Create.Namespace)
				assert.Equal(t, map[string]string{"a": "b", dataimportcron.CronLabel: "fedora-cron"}, d.Create.Labels)
				assert.Equal(t, &cdiv1.DataVolumeSourceRegistry{URL: ptr.To("docker://registry:5000/fedora@" + tc.current[0].Digest),
					PullMethod: ptr.To(cdiv1.RegistryPullNode)}, d.Create.Spec.Source.Registry,
					"the URL pinned to the digest read, the rest of the template kept")
				assert.Equal(t, "docker://registry:5000/fedora:latest", *c.Spec.Template.Spec.Source.Registry.URL, "the cron's template is not modified")
			}
			assert.Equal(t, tc.delete, d.Delete)
			assert.Equal(t, tc.dsPVC, d.DataSourcePVC)
			assert.Equal(t, tc.current, d.Status.CurrentImports)
			up, pr := cond(d.Status, cdiv1.DataImportCronUpToDate), cond(d.Status, cdiv1.DataImportCronProgressing)
			assert.Equal(t, tc.upToDate, up.Status, up.Message)
			assert.Equal(t, tc.progressing, pr.Status, pr.Message)
			assert.Equal(t, tc.reason, up.Reason, up.Message)
			if tc.obs.Polled {
				assert.Equal(t, &now, d.Status.LastExecutionTimestamp)
			}
			if tc.obs.ScheduleErr == nil {
				assert.Equal(t, next.Sub(t0), d.RequeueAfter, "looked at again at the next tick")
			} else {
				assert.Zero(t, d.RequeueAfter, "a bad schedule waits for an edit")
			}
		})
	}
}

func TestDecideLastImport(t *testing.T) {
	c := newCron()
	c.Status.CurrentImports = []cdiv1.ImportStatus{{DataVolumeName: "fedora-111111111111", Digest: d1}}
	now := metav1.NewTime(t0)
	d, err := dataimportcron.Decide(dataimportcron.Observed{Cron: c, Imports: []cdiv1.DataVolume{dv("fedora-111111111111", cdiv1.Succeeded, t0)}}, now)
	require.NoError(t, err)
	assert.Equal(t, &cdiv1.DataVolumeSourcePVC{Namespace: "os-images", Name: "fedora-111111111111"}, d.Status.LastImportedPVC)
	assert.Equal(t, &now, d.Status.LastImportTimestamp)
	assert.Equal(t, ptr.To(cdiv1.DataImportCronSourceFormatPvc), d.Status.SourceFormat)

	// A later pass keeps the timestamp of the import.
	c.Status = d.Status
	later := metav1.NewTime(t0.Add(time.Hour))
	d, err = dataimportcron.Decide(dataimportcron.Observed{Cron: c, Imports: []cdiv1.DataVolume{dv("fedora-111111111111", cdiv1.Succeeded, t0)}}, later)
	require.NoError(t, err)
	assert.Equal(t, &now, d.Status.LastImportTimestamp)
}

func TestDecideDeletion(t *testing.T) {
	imports := []cdiv1.DataVolume{dv("fedora-a", cdiv1.Succeeded, t0), dv("fedora-b", cdiv1.Succeeded, t0)}
	for _, tc := range []struct {
		name   string
		policy *cdiv1.DataImportCronRetentionPolicy
		delete []string
	}{
		{"default RetainAll keeps all", nil, nil},
		{"RetainAll keeps all", ptr.To(cdiv1.DataImportCronRetainAll), nil},
		{"None deletes the imports and the DataSource", ptr.To(cdiv1.DataImportCronRetainNone), []string{"fedora-a", "fedora-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCron()
			c.DeletionTimestamp = &metav1.Time{Time: t0}
			c.Spec.RetentionPolicy = tc.policy
			d, err := dataimportcron.Decide(dataimportcron.Observed{Cron: c, Imports: imports}, metav1.NewTime(t0))
			require.NoError(t, err)
			assert.True(t, d.Finalize)
			assert.Equal(t, tc.delete, d.Delete)
			assert.Equal(t, tc.delete != nil, d.DeleteDataSource)
			assert.Nil(t, d.Create)
		})
	}
}

func TestImportName(t *testing.T) {
	assert.Equal(t, "fedora-111111111111", dataimportcron.ImportName("fedora", d1))
}
