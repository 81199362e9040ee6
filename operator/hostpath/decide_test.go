package hostpath_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kubevmm/kubevmm/api/conditions"
	hppv1 "github.com/kubevmm/kubevmm/api/hostpathprovisioner/v1beta1"
	"github.com/kubevmm/kubevmm/operator/hostpath"
)

var opts = hostpath.Options{Image: "r/hostpath-provisioner:v9", PullPolicy: corev1.PullIfNotPresent, KubeletRoot: "/var/lib/kubelet", Version: "v9"}

func conds(st hppv1.HostPathProvisionerStatus) string {
	out := ""
	for _, t := range []hppv1.ConditionType{hppv1.ConditionAvailable, hppv1.ConditionProgressing, hppv1.ConditionDegraded} {
		c := conditions.Find(st.Conditions, t)
		if c == nil {
			out += string(t) + "=none "
			continue
		}
		out += string(t) + "=" + string(c.Status) + " "
	}
	return out
}

func hpp(spec hppv1.HostPathProvisionerSpec) *hppv1.HostPathProvisioner {
	return &hppv1.HostPathProvisioner{ObjectMeta: metav1.ObjectMeta{Name: "hostpath-provisioner", UID: "uid-1"}, Spec: spec}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind {
			return u
		}
	}
	t.Fatalf("no %s applied", kind)
	return nil
}

func TestDecide(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	pools := []hppv1.StoragePool{{Name: "local", Path: "/var/hpvolumes"}, {Name: "ssd", Path: "/mnt/ssd"}}
	for _, tc := range []struct {
		name      string
		o         hostpath.Observed
		conds     string
		reason    string
		message   string
		phase     hppv1.StoragePoolPhase
		applied   bool
		observedV string
	}{
		{name: "not ready yet", o: hostpath.Observed{HPP: hpp(hppv1.HostPathProvisionerSpec{StoragePools: pools})},
			conds: "Available=False Progressing=True Degraded=False ", reason: "Deploying", phase: hppv1.StoragePoolPending, applied: true},
		{name: "ready", o: hostpath.Observed{HPP: hpp(hppv1.HostPathProvisionerSpec{StoragePools: pools}), DaemonSetReady: true},
			conds: "Available=True Progressing=False Degraded=False ", reason: "Complete", phase: hppv1.StoragePoolReady, applied: true, observedV: "v9"},
		{name: "unknown fields named", o: hostpath.Observed{HPP: hpp(hppv1.HostPathProvisionerSpec{StoragePools: pools}),
			UnknownFields: []string{"storagePools[0].pvcTemplate", "snapshot"}},
			conds: "Available=False Progressing=False Degraded=True ", reason: "InvalidConfiguration",
			message: "not supported by kubevmm: spec.storagePools[0].pvcTemplate, spec.snapshot"},
		{name: "pathConfig refused", o: hostpath.Observed{HPP: hpp(hppv1.HostPathProvisionerSpec{PathConfig: &hppv1.PathConfig{Path: "/var/hpp"}})},
			conds: "Available=False Progressing=False Degraded=True ", reason: "InvalidConfiguration", message: "spec.pathConfig: upstream's legacy provisioner"},
		{name: "feature gates refused", o: hostpath.Observed{HPP: hpp(hppv1.HostPathProvisionerSpec{StoragePools: pools, FeatureGates: []string{"Snapshotting"}})},
			conds: "Available=False Progressing=False Degraded=True ", reason: "InvalidConfiguration", message: "spec.featureGates: kubevmm implements none of Snapshotting"},
		{name: "shared directory refused", o: hostpath.Observed{HPP: hpp(hppv1.HostPathProvisionerSpec{StoragePools: append(pools, hppv1.StoragePool{Name: "again", Path: "/mnt/ssd"})})},
			conds: "Available=False Progressing=False Degraded=True ", reason: "InvalidConfiguration", message: "spec.storagePools[2].path: /mnt/ssd is pool ssd's directory already"},
		{name: "another deploys it", o: hostpath.Observed{HPP: hpp(hppv1.HostPathProvisionerSpec{StoragePools: pools}), Other: "first", DaemonSetReady: true},
			conds: "Available=False Progressing=False Degraded=True ", reason: "InvalidConfiguration", message: "HostPathProvisioner first deploys the hostpath provisioner already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := hostpath.Decide(tc.o, opts, now)
			assert.Equal(t, tc.conds, conds(d.Status))
			c := conditions.Find(d.Status.Conditions, hppv1.ConditionAvailable)
			require.NotNil(t, c)
			assert.Equal(t, tc.reason, c.Reason)
			assert.Contains(t, c.Message, tc.message)
			assert.Equal(t, tc.applied, len(d.Apply) > 0, "applies only what it can deploy")
			assert.Equal(t, tc.observedV, d.Status.ObservedVersion)
			assert.Equal(t, "v9", d.Status.OperatorVersion)
			if tc.phase == "" {
				assert.Empty(t, d.Status.StoragePoolStatuses)
				return
			}
			assert.Equal(t, []hppv1.StoragePoolStatus{{Name: "local", Phase: tc.phase}, {Name: "ssd", Phase: tc.phase}}, d.Status.StoragePoolStatuses)
		})
	}
}

// What is applied: every object owned by the HostPathProvisioner; the
// DaemonSet passes every pool to the driver, at its path, placed by
// spec.workload, with the spec's pull policy; the CSIDriver tracks
// capacity.
func TestDecideObjects(t *testing.T) {
	tol := []corev1.Toleration{{Key: "storage", Operator: corev1.TolerationOpExists}}
	h := hpp(hppv1.HostPathProvisionerSpec{ImagePullPolicy: corev1.PullNever,
		StoragePools: []hppv1.StoragePool{{Name: "local", Path: "/var/hpvolumes"}, {Name: "ssd", Path: "/mnt/ssd"}},
		Workload:     hppv1.NodePlacement{NodeSelector: map[string]string{"storage": "yes"}, Tolerations: tol}})
	d := hostpath.Decide(hostpath.Observed{HPP: h}, opts, metav1.Now())
	var kinds []string
	for _, u := range d.Apply {
		kinds = append(kinds, u.GetKind()+" "+u.GetName())
		require.Len(t, u.GetOwnerReferences(), 1, u.GetKind())
		ref := u.GetOwnerReferences()[0]
		assert.Equal(t, "HostPathProvisioner", ref.Kind)
		assert.Equal(t, h.UID, ref.UID)
		assert.True(t, *ref.Controller)
	}
	assert.ElementsMatch(t, []string{"ServiceAccount hostpath-provisioner", "ClusterRole hostpath-provisioner", "ClusterRoleBinding hostpath-provisioner",
		"Role hostpath-provisioner", "RoleBinding hostpath-provisioner", "CSIDriver kubevirt.io.hostpath-provisioner", "DaemonSet hostpath-provisioner",
		"NetworkPolicy hostpath-provisioner"}, kinds,
		"no StorageClass and no namespace: the users' and the operator's")

	ds := find(t, d.Apply, "DaemonSet")
	ctrs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	require.Len(t, ctrs, 1)
	ctr := ctrs[0].(map[string]any)
	assert.Equal(t, "r/hostpath-provisioner:v9", ctr["image"])
	assert.Equal(t, "Never", ctr["imagePullPolicy"])
	assert.Subset(t, ctr["args"], []any{"--storage-pool=local=/var/hpvolumes", "--storage-pool=ssd=/mnt/ssd", "--kubelet-root=/var/lib/kubelet"})
	var mounts []string
	for _, m := range ctr["volumeMounts"].([]any) {
		mounts = append(mounts, m.(map[string]any)["mountPath"].(string))
	}
	assert.Subset(t, mounts, []string{"/var/hpvolumes", "/mnt/ssd"})
	sel, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "template", "spec", "nodeSelector")
	assert.Equal(t, map[string]string{"storage": "yes"}, sel)
	tols, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "tolerations")
	assert.Equal(t, []any{map[string]any{"key": "storage", "operator": "Exists"}}, tols)

	capTracked, _, _ := unstructured.NestedBool(find(t, d.Apply, "CSIDriver").Object, "spec", "storageCapacity")
	assert.True(t, capTracked, "the scheduler reads the drivers' CSIStorageCapacity objects")
}

// Conditions keep their transition time while their status holds.
func TestDecideConditionTimes(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	h := hpp(hppv1.HostPathProvisionerSpec{StoragePools: []hppv1.StoragePool{{Name: "local", Path: "/p"}}})
	h.Status = hostpath.Decide(hostpath.Observed{HPP: h, DaemonSetReady: true}, opts, t0).Status
	st := hostpath.Decide(hostpath.Observed{HPP: h, DaemonSetReady: true}, opts, t1).Status
	assert.Equal(t, t0, conditions.Find(st.Conditions, hppv1.ConditionAvailable).LastTransitionTime)
	st = hostpath.Decide(hostpath.Observed{HPP: h}, opts, t1).Status
	assert.Equal(t, t1, conditions.Find(st.Conditions, hppv1.ConditionAvailable).LastTransitionTime)
}
