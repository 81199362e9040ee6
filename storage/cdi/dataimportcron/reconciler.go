package dataimportcron

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/api/patch"
)

// digestTimeout bounds one digest read: an unreachable registry is a
// condition, never a reconcile that hangs.
const digestTimeout = 30 * time.Second

// DigestFunc reads the digest ("sha256:<hex>") of the image a template's
// registry source names (url as written, with its tag), in the cron's
// namespace (where its secretRef and certConfigMap are).
type DigestFunc func(ctx context.Context, namespace string, src *cdiv1.DataVolumeSource) (string, error)

// Reconciler reconciles DataImportCrons.
type Reconciler struct {
	Client client.Client
	Digest DigestFunc
	Log    *slog.Logger
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Reconcile is one pass: read, decide, write.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	c := &cdiv1.DataImportCron{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	log := r.Log.With("dataImportCron", req.String())
	now := time.Now()
	if r.Now != nil {
		now = r.Now()
	}
	if c.DeletionTimestamp == nil {
		if err := patch.AddFinalizer(ctx, r.Client, c, Finalizer); err != nil {
			return reconcile.Result{}, err
		}
	}
	o := Observed{Cron: c}
	dvs := &cdiv1.DataVolumeList{}
	if err := r.Client.List(ctx, dvs, client.InNamespace(c.Namespace), client.MatchingLabels{CronLabel: c.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing the imports: %w", err)
	}
	o.Imports = dvs.Items
	if c.DeletionTimestamp == nil {
		var due bool
		due, o.Next, o.ScheduleErr = Due(c, now)
		if due {
			o.Polled = true
			dctx, cancel := context.WithTimeout(ctx, digestTimeout)
			o.Digest, o.DigestErr = r.Digest(dctx, c.Namespace, c.Spec.Template.Spec.Source)
			cancel()
		}
	}
	d, err := Decide(o, metav1.NewTime(now))
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.write(ctx, log, c, d); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
}

// write does what d says, the status last.
func (r *Reconciler) write(ctx context.Context, log *slog.Logger, c *cdiv1.DataImportCron, d Decision) error {
	if d.Create != nil {
		if err := r.Client.Create(ctx, d.Create); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DataVolume %s: %w", d.Create.Name, err)
		}
		log.Info("importing", "dataVolume", d.Create.Name, "digest", d.Status.CurrentImports[0].Digest)
	}
	for _, name := range d.Delete {
		dv := &cdiv1.DataVolume{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
		if err := r.Client.Delete(ctx, dv); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting DataVolume %s: %w", name, err)
		}
		log.Info("import deleted", "dataVolume", name)
	}
	if d.DataSourcePVC != "" {
		if err := r.dataSource(ctx, log, c, d.DataSourcePVC); err != nil {
			return err
		}
	}
	if d.DeleteDataSource {
		ds := &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Spec.ManagedDataSource}}
		if err := r.Client.Delete(ctx, ds); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting DataSource %s: %w", ds.Name, err)
		}
	}
	old := FindDataImportCronUpToDate(c.Status)
	if err := patch.Status(ctx, r.Client, c, &c.Status, d.Status); err != nil {
		return err
	}
	if now := FindDataImportCronUpToDate(d.Status); now != old {
		log.Info("state", "upToDate", now)
	}
	if d.Finalize && controllerutil.ContainsFinalizer(c, Finalizer) {
		if err := patch.RemoveFinalizer(ctx, r.Client, c, Finalizer); err != nil {
			return err
		}
		log.Info("removed", "retentionPolicy", ptr.Deref(c.Spec.RetentionPolicy, cdiv1.DataImportCronRetainAll))
	}
	return nil
}

// FindDataImportCronUpToDate is the UpToDate condition as "Status/Reason"
// ("" without one).
func FindDataImportCronUpToDate(st cdiv1.DataImportCronStatus) string {
	if u := cdiv1.FindDataImportCronCondition(st.Conditions, cdiv1.DataImportCronUpToDate); u != nil {
		return string(u.Status) + "/" + u.Reason
	}
	return ""
}

// dataSource keeps the managed DataSource on pvc, labelled with the cron
// (created when missing; an edit of its source is reverted).
func (r *Reconciler) dataSource(ctx context.Context, log *slog.Logger, c *cdiv1.DataImportCron, pvc string) error {
	want := cdiv1.DataSourceSource{PVC: &cdiv1.DataVolumeSourcePVC{Namespace: c.Namespace, Name: pvc}}
	ds := &cdiv1.DataSource{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.ManagedDataSource}, ds)
	if apierrors.IsNotFound(err) {
		ds = &cdiv1.DataSource{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Spec.ManagedDataSource,
			Labels: map[string]string{CronLabel: c.Name}}, Spec: cdiv1.DataSourceSpec{Source: want}}
		if err := r.Client.Create(ctx, ds); err != nil {
			return fmt.Errorf("creating DataSource %s: %w", ds.Name, err)
		}
		log.Info("DataSource created", "dataSource", ds.Name, "pvc", pvc)
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading DataSource %s: %w", c.Spec.ManagedDataSource, err)
	}
	if equality.Semantic.DeepEqual(ds.Spec.Source, want) && ds.Labels[CronLabel] == c.Name {
		return nil
	}
	orig := ds.DeepCopy()
	ds.Spec.Source = want
	if ds.Labels == nil {
		ds.Labels = map[string]string{}
	}
	ds.Labels[CronLabel] = c.Name
	if err := r.Client.Patch(ctx, ds, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("updating DataSource %s: %w", ds.Name, err)
	}
	log.Info("DataSource points at the newest import", "dataSource", ds.Name, "pvc", pvc)
	return nil
}

// SetupWithManager registers the reconciler: DataImportCrons, and the
// imports and DataSources by the cron label.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	byLabel := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name, ok := o.GetLabels()[CronLabel]
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	})
	return ctrl.NewControllerManagedBy(mgr).Named("dataimportcron").For(&cdiv1.DataImportCron{}).
		Watches(&cdiv1.DataVolume{}, byLabel).
		Watches(&cdiv1.DataSource{}, byLabel).
		Complete(r)
}
