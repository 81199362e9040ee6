// Package dataimportcron is cdi-controller's DataImportCron logic: a
// cron's registry image polled on its schedule, each new digest imported
// into a DataVolume, the managed DataSource kept on the newest import and
// the outdated imports garbage collected.
//
// State machine of one cron (a reconcile reads, Decide decides, the
// controller writes once):
//
//	bad schedule   -> UpToDate=False InvalidSchedule, nothing polled
//	tick due       -> the digest read; an error: UpToDate=False with it,
//	                  retried at the next tick
//	new digest     -> DataVolume <managedDataSource>-<digest[:12]> created,
//	                  Progressing=True, UpToDate=False
//	import done    -> lastImportedPVC, lastImportTimestamp, the DataSource
//	                  on its PVC, UpToDate=True, Progressing=False,
//	                  imports beyond importsToKeep deleted (Outdated)
//	deleted        -> retentionPolicy None: the DataSource and every
//	                  import deleted; RetainAll: all kept; finalizer off
//
// The imports and the DataSource carry the cron's label and no owner
// reference: RetainAll (CDI's default) keeps them after the cron is gone.
package dataimportcron

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/storage/cdi/registry"
)

// CronLabel is on every DataVolume and DataSource a cron makes, naming
// it (upstream's).
const CronLabel = "cdi.kubevirt.io/dataImportCron"

// Finalizer lets the controller apply the retention policy before a cron
// goes.
const Finalizer = "cdi.kubevirt.io/dataImportCronFinalizer"

// The condition reasons.
const (
	ReasonInvalidSchedule = "InvalidSchedule"
	ReasonDigestError     = "DigestError"
	ReasonNoDigest        = "NoDigest"
	ReasonImportRunning   = "ImportProgressing"
	ReasonImportFailed    = "ImportFailed"
	ReasonUpToDate        = "UpToDate"
	ReasonNoImport        = "NoImport"
)

// Due says whether the cron's source is to be polled at now (never polled,
// or a tick passed since the last poll) and when the next tick after now
// is. An unparsable schedule is an error naming spec.schedule.
func Due(c *cdiv1.DataImportCron, now time.Time) (bool, time.Time, error) {
	sched, err := cron.ParseStandard(c.Spec.Schedule)
	if err != nil {
		return false, time.Time{}, fmt.Errorf("spec.schedule %q: %w", c.Spec.Schedule, err)
	}
	next := sched.Next(now)
	last := c.Status.LastExecutionTimestamp
	if last == nil {
		return true, next, nil
	}
	return !sched.Next(last.Time).After(now), next, nil
}

// Observed is what a reconcile read.
type Observed struct {
	Cron *cdiv1.DataImportCron
	// ScheduleErr is Due's error.
	ScheduleErr error
	// Polled: the source's digest was read this pass (Due); Digest is
	// what it read ("sha256:<hex>"), DigestErr why it could not.
	Polled    bool
	Digest    string
	DigestErr error
	// Next is the next tick (Due).
	Next time.Time
	// Imports are the DataVolumes carrying the cron's label.
	Imports []cdiv1.DataVolume
}

// Decision is what to write.
type Decision struct {
	// Create is a DataVolume to create, nil if none.
	Create *cdiv1.DataVolume
	// Delete names DataVolumes to delete (their PVCs go with them).
	Delete []string
	// DataSourcePVC is the PVC the managed DataSource points at ("" while
	// nothing was imported).
	DataSourcePVC string
	// DeleteDataSource: the cron is going with retentionPolicy None.
	DeleteDataSource bool
	// Finalize removes the finalizer (deletion done).
	Finalize bool
	// Status is the status to write.
	Status cdiv1.DataImportCronStatus
	// RequeueAfter is when to look again (the next tick), 0 for never.
	RequeueAfter time.Duration
}

// Decide is the controller's logic, a pure function of what was read.
func Decide(o Observed, now metav1.Time) (Decision, error) {
	c := o.Cron
	if c.DeletionTimestamp != nil {
		d := Decision{Finalize: true, Status: c.Status}
		if c.Spec.RetentionPolicy != nil && *c.Spec.RetentionPolicy == cdiv1.DataImportCronRetainNone {
			d.DeleteDataSource = true
			for _, dv := range o.Imports {
				d.Delete = append(d.Delete, dv.Name)
			}
		}
		return d, nil
	}
	st := *c.Status.DeepCopy()
	st.SourceFormat = ptrTo(cdiv1.DataImportCronSourceFormatPvc)
	set := func(t cdiv1.DataImportCronConditionType, ok bool, reason, msg string) {
		status := corev1.ConditionFalse
		if ok {
			status = corev1.ConditionTrue
		}
		st.Conditions = cdiv1.SetDataImportCronCondition(st.Conditions, cdiv1.DataImportCronCondition{Type: t,
			ConditionState: cdiv1.ConditionState{Status: status, Reason: reason, Message: msg}}, now)
	}
	d := Decision{}
	if o.ScheduleErr != nil {
		set(cdiv1.DataImportCronUpToDate, false, ReasonInvalidSchedule, o.ScheduleErr.Error())
		set(cdiv1.DataImportCronProgressing, false, ReasonInvalidSchedule, o.ScheduleErr.Error())
		d.Status = st
		return d, nil
	}
	if !o.Next.IsZero() {
		d.RequeueAfter = o.Next.Sub(now.Time)
	}
	byName := map[string]*cdiv1.DataVolume{}
	for i := range o.Imports {
		byName[o.Imports[i].Name] = &o.Imports[i]
	}
	var pollErr string
	if o.Polled {
		st.LastExecutionTimestamp = &now
		var err error
		if d.Create, pollErr, err = poll(o, &st, byName); err != nil {
			return Decision{}, err
		}
	}
	if !o.Polled {
		// The last poll's error stands until the next poll.
		if u := cdiv1.FindDataImportCronCondition(st.Conditions, cdiv1.DataImportCronUpToDate); u != nil && u.Reason == ReasonDigestError {
			pollErr = u.Message
		}
	}
	running, failed := current(&st, byName, d.Create != nil, now)
	if failed != "" {
		pollErr = failed
	}
	switch {
	case pollErr != "":
		reason := ReasonDigestError
		if failed != "" {
			reason = ReasonImportFailed
		}
		set(cdiv1.DataImportCronUpToDate, false, reason, pollErr)
		set(cdiv1.DataImportCronProgressing, false, reason, pollErr)
	case running != "":
		set(cdiv1.DataImportCronUpToDate, false, ReasonImportRunning, running)
		set(cdiv1.DataImportCronProgressing, true, ReasonImportRunning, running)
	case st.LastImportedPVC != nil:
		msg := "the newest digest is imported in PVC " + st.LastImportedPVC.Name
		set(cdiv1.DataImportCronUpToDate, true, ReasonUpToDate, msg)
		set(cdiv1.DataImportCronProgressing, false, ReasonUpToDate, msg)
	default:
		set(cdiv1.DataImportCronUpToDate, false, ReasonNoImport, "no digest read yet")
		set(cdiv1.DataImportCronProgressing, false, ReasonNoImport, "no digest read yet")
	}
	if st.LastImportedPVC != nil {
		d.DataSourcePVC = st.LastImportedPVC.Name
	}
	d.Delete = outdated(c, o.Imports, st)
	d.Status = st
	return d, nil
}

// poll is what a digest read means: an import to make for a new one
// (recorded as the current import), or why the read failed.
func poll(o Observed, st *cdiv1.DataImportCronStatus, byName map[string]*cdiv1.DataVolume) (*cdiv1.DataVolume, string, error) {
	switch {
	case o.DigestErr != nil:
		return nil, o.DigestErr.Error(), nil
	case !validDigest(o.Digest):
		return nil, fmt.Sprintf("the registry answered digest %q, not sha256:<64 hex>", o.Digest), nil
	case len(st.CurrentImports) > 0 && st.CurrentImports[0].Digest == o.Digest:
		return nil, "", nil
	}
	name := ImportName(o.Cron.Spec.ManagedDataSource, o.Digest)
	st.CurrentImports = []cdiv1.ImportStatus{{DataVolumeName: name, Digest: o.Digest}}
	if byName[name] != nil {
		return nil, "", nil
	}
	dv, err := importDataVolume(o.Cron, name, o.Digest)
	return dv, "", err
}

// current follows the current import: running says what runs, failed
// why it failed; one that succeeded becomes the last imported PVC.
func current(st *cdiv1.DataImportCronStatus, byName map[string]*cdiv1.DataVolume, creating bool, now metav1.Time) (running, failed string) {
	if len(st.CurrentImports) == 0 {
		return "", ""
	}
	cur := st.CurrentImports[0]
	dv := byName[cur.DataVolumeName]
	switch {
	case creating || dv == nil:
		return "importing " + cur.Digest + " into DataVolume " + cur.DataVolumeName, ""
	case dv.Status.Phase == cdiv1.Succeeded:
		if st.LastImportedPVC == nil || st.LastImportedPVC.Name != dv.Name {
			st.LastImportedPVC = &cdiv1.DataVolumeSourcePVC{Namespace: dv.Namespace, Name: dv.Name}
			st.LastImportTimestamp = &now
		}
		return "", ""
	case dv.Status.Phase == cdiv1.Failed:
		failed = "DataVolume " + dv.Name + " failed"
		if r := cdiv1.FindDataVolumeCondition(dv.Status.Conditions, cdiv1.DataVolumeReady); r != nil && r.Message != "" {
			failed += ": " + r.Message
		}
		return "", failed
	}
	return fmt.Sprintf("importing %s into DataVolume %s (%s)", cur.Digest, cur.DataVolumeName, dv.Status.Phase), ""
}

// outdated are the imports garbage collection deletes: all but the
// importsToKeep newest, never the current import or the DataSource's.
func outdated(c *cdiv1.DataImportCron, imports []cdiv1.DataVolume, st cdiv1.DataImportCronStatus) []string {
	if c.Spec.GarbageCollect != nil && *c.Spec.GarbageCollect == cdiv1.DataImportCronGarbageCollectNever {
		return nil
	}
	keep := int32(cdiv1.DefaultImportsToKeep)
	if c.Spec.ImportsToKeep != nil {
		keep = *c.Spec.ImportsToKeep
	}
	protected := map[string]bool{}
	for _, i := range st.CurrentImports {
		protected[i.DataVolumeName] = true
	}
	if st.LastImportedPVC != nil {
		protected[st.LastImportedPVC.Name] = true
	}
	sorted := append([]cdiv1.DataVolume(nil), imports...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i].CreationTimestamp, sorted[j].CreationTimestamp
		if a.Equal(&b) {
			return sorted[i].Name > sorted[j].Name
		}
		return b.Before(&a)
	})
	var out []string
	kept := int32(0)
	for _, dv := range sorted {
		if protected[dv.Name] {
			kept++
			continue
		}
		if kept < keep {
			kept++
			continue
		}
		out = append(out, dv.Name)
	}
	return out
}

// ImportName is the DataVolume a digest is imported into (upstream's):
// the managed DataSource's name and the digest's first 12 hex digits.
func ImportName(dataSource, digest string) string {
	hex := strings.TrimPrefix(digest, "sha256:")
	if len(hex) > 12 {
		hex = hex[:12]
	}
	return dataSource + "-" + hex
}

func validDigest(d string) bool {
	hex, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hex) != 64 {
		return false
	}
	for _, r := range hex {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	return true
}

// importDataVolume is the cron's template named name, labelled with the
// cron, its registry URL pinned to digest: what it imports cannot move
// under it.
func importDataVolume(c *cdiv1.DataImportCron, name, digest string) (*cdiv1.DataVolume, error) {
	t := c.Spec.Template.DeepCopy()
	dv := &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.GroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace,
			Labels: t.Labels, Annotations: t.Annotations},
		Spec: t.Spec,
	}
	if dv.Labels == nil {
		dv.Labels = map[string]string{}
	}
	dv.Labels[CronLabel] = c.Name
	src := dv.Spec.Source
	if src == nil || src.Registry == nil || src.Registry.URL == nil {
		return nil, errors.New("spec.template.spec.source.registry.url is required")
	}
	ref, err := registry.ParseURL(*src.Registry.URL)
	if err != nil {
		return nil, fmt.Errorf("spec.template.spec.source.registry.url: %w", err)
	}
	ref.Tag, ref.Digest = "", digest
	src.Registry.URL = ptrTo(ref.String())
	return dv, nil
}

func ptrTo[T any](v T) *T { return &v }
