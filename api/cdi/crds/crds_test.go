package crds_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kubevmm/kubevmm/api/cdi/crds"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

// The CRDs as upstream names and scopes them.
func TestCRDs(t *testing.T) {
	all, err := crds.All()
	require.NoError(t, err)
	got := map[string]apiextensionsv1.ResourceScope{}
	for _, c := range all {
		assert.Equal(t, "CustomResourceDefinition", c.Kind)
		assert.Equal(t, "v1beta1", c.Spec.Versions[0].Name)
		got[c.Name] = c.Spec.Scope
	}
	assert.Equal(t, map[string]apiextensionsv1.ResourceScope{
		cdiv1.CDICRDName:            apiextensionsv1.ClusterScoped,
		cdiv1.CDIConfigCRDName:      apiextensionsv1.ClusterScoped,
		cdiv1.StorageProfileCRDName: apiextensionsv1.ClusterScoped,
		cdiv1.DataVolumeCRDName:     apiextensionsv1.NamespaceScoped,
		cdiv1.DataImportCronCRDName: apiextensionsv1.NamespaceScoped,
		cdiv1.DataSourceCRDName:     apiextensionsv1.NamespaceScoped,
	}, got)
}

// What the API server refuses in a DataVolume without a webhook: each
// error names the field. Upstream's example DataVolumes are accepted.
func TestDataVolumeValidation(t *testing.T) {
	storage := `"storage": {"resources": {"requests": {"storage": "1Gi"}}}`
	tests := []validationCase{
		{"upstream http example", `{"source": {"http": {"url": "https://example.org/disk.qcow2"}}, "pvc": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "500Mi"}}}}`, ""},
		{"upstream blank example", `{"source": {"blank": {}}, "pvc": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "500Mi"}}}}`, ""},
		{"upload", `{"source": {"upload": {}}, ` + storage + `}`, ""},
		{"http with everything", `{"source": {"http": {"url": "https://x/d.img.xz", "secretRef": "s", "certConfigMap": "c", "extraHeaders": ["A: b"], "secretExtraHeaders": ["h"], "checksum": "sha256:00ff"}}, ` + storage + `}`, ""},
		{"integer size", `{"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": 1048576}}}}`, ""},
		{"two sources", `{"source": {"http": {"url": "http://x"}, "blank": {}}, ` + storage + `}`, "spec.source must set exactly one source"},
		{"empty source", `{"source": {}, ` + storage + `}`, "spec.source must set exactly one source"},
		{"no source", `{` + storage + `}`, "one of spec.source and spec.sourceRef is required"},
		{"source and sourceRef", `{"source": {"blank": {}}, "sourceRef": {"kind": "DataSource", "name": "x"}, ` + storage + `}`, "spec.source and spec.sourceRef are mutually exclusive"},
		{"sourceRef", `{"sourceRef": {"kind": "DataSource", "name": "x"}, ` + storage + `}`, ""},
		{"sourceRef without size", `{"sourceRef": {"kind": "DataSource", "namespace": "golden", "name": "x"}, "storage": {}}`, ""},
		{"upstream clone example", `{"source": {"pvc": {"namespace": "source-ns", "name": "my-pvc"}}, "pvc": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "500Mi"}}}}`, ""},
		{"clone without size", `{"source": {"pvc": {"namespace": "a", "name": "b"}}, "storage": {}}`, ""},
		{"clone without name", `{"source": {"pvc": {"namespace": "a"}}, "storage": {}}`, "spec.source.pvc.name"},
		{"sourceRef of another kind", `{"sourceRef": {"kind": "PersistentVolumeClaim", "name": "x"}, "storage": {}}`, "spec.sourceRef.kind"},
		{"pvc and storage", `{"source": {"blank": {}}, "pvc": {"resources": {"requests": {"storage": "1Gi"}}}, ` + storage + `}`, "exactly one of spec.pvc and spec.storage is required"},
		{"neither pvc nor storage", `{"source": {"blank": {}}}`, "exactly one of spec.pvc and spec.storage is required"},
		{"no size", `{"source": {"blank": {}}, "storage": {"accessModes": ["ReadWriteOnce"]}}`, "spec.storage.resources.requests.storage is required"},
		{"s3", `{"source": {"s3": {"url": "s3://b/k"}}, ` + storage + `}`, "spec.source.s3 is not supported"},
		{"upstream registry example", `{"source": {"registry": {"url": "docker://kubevirt/fedora-cloud-registry-disk-demo"}}, ` + storage + `}`, ""},
		{"registry with everything", `{"source": {"registry": {"url": "docker://r:5000/a/b@sha256:00", "pullMethod": "pod", "secretRef": "s", "certConfigMap": "c", "platform": {"architecture": "arm64"}}}, ` + storage + `}`, ""},
		{"registry node", `{"source": {"registry": {"url": "docker://r:5000/a/b:1", "pullMethod": "node"}}, ` + storage + `}`, ""},
		{"registry imageStream", `{"source": {"registry": {"imageStream": "fedora"}}, ` + storage + `}`, "spec.source.registry.imageStream (OpenShift image streams) is not supported"},
		{"registry without url", `{"source": {"registry": {}}, ` + storage + `}`, "spec.source.registry.url is required"},
		{"registry not docker", `{"source": {"registry": {"url": "oci-archive:///x.tar"}}, ` + storage + `}`, "spec.source.registry.url"},
		{"registry bad pullMethod", `{"source": {"registry": {"url": "docker://r/x", "pullMethod": "kubelet"}}, ` + storage + `}`, "spec.source.registry.pullMethod"},
		{"registry node with secret", `{"source": {"registry": {"url": "docker://r/x", "pullMethod": "node", "secretRef": "s"}}, ` + storage + `}`, "pullMethod node pulls with the node's credentials"},
		{"snapshot", `{"source": {"snapshot": {"namespace": "a", "name": "b"}}, ` + storage + `}`, "spec.source.snapshot is not supported"},
		{"vddk", `{"source": {"vddk": {}}, ` + storage + `}`, "spec.source.vddk is not supported"},
		{"archive", `{"source": {"blank": {}}, "contentType": "archive", ` + storage + `}`, "spec.contentType: only kubevirt"},
		{"bad checksum", `{"source": {"http": {"url": "http://x", "checksum": "crc:1"}}, ` + storage + `}`, "spec.source.http.checksum"},
		{"storage dataSource", `{"source": {"blank": {}}, "storage": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "x"}, "resources": {"requests": {"storage": "1Gi"}}}}`, "spec.storage.dataSource and spec.storage.dataSourceRef are not supported"},
	}
	createEach(t, "DataVolume", tests)
}

// A DataSource names a PVC; a snapshot source is refused naming the
// field, and the PVC's name is required.
func TestDataSourceValidation(t *testing.T) {
	tests := []validationCase{
		{"pvc", `{"source": {"pvc": {"namespace": "golden", "name": "fedora"}}}`, ""},
		{"pvc without name", `{"source": {"pvc": {"namespace": "golden"}}}`, "spec.source.pvc.name"},
		{"snapshot", `{"source": {"snapshot": {"namespace": "a", "name": "b"}}}`, "spec.source.snapshot is not supported"},
		{"no source", `{}`, "spec.source"},
	}
	createEach(t, "DataSource", tests)
}

type validationCase struct{ name, spec, wantErr string }

// createEach creates an object of kind with each case's spec in a fresh
// API server: created when wantErr is empty, else refused with an error
// holding it.
func createEach(t *testing.T, kind string, tests []validationCase) {
	all, err := crds.All()
	require.NoError(t, err)
	_, k8s := apiserver.Start(t, func(e *envtest.Environment) { e.CRDs = append(e.CRDs, all...) })
	ctx := context.Background()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var spec map[string]any
			require.NoError(t, json.Unmarshal([]byte(tc.spec), &spec))
			obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
			obj.SetGroupVersionKind(cdiv1.GroupVersion.WithKind(kind))
			obj.SetNamespace("default")
			obj.SetName("obj-" + string(rune('a'+i)))
			err := k8s.Create(ctx, obj)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

// What the API server refuses in a DataImportCron, each error naming the
// field: CDI imports golden images from registries only.
func TestDataImportCronValidation(t *testing.T) {
	all, err := crds.All()
	require.NoError(t, err)
	_, k8s := apiserver.Start(t, func(e *envtest.Environment) { e.CRDs = append(e.CRDs, all...) })
	ctx := context.Background()
	storage := `"storage": {"resources": {"requests": {"storage": "1Gi"}}}`
	cron := func(source, extra string) string {
		return `{"template": {"spec": {"source": ` + source + `, ` + storage + `}}, "schedule": "* * * * *", "managedDataSource": "fedora"` + extra + `}`
	}
	tests := []struct {
		name, spec, wantErr string
	}{
		{"upstream example", cron(`{"registry": {"url": "docker://quay.io/kubevirt/fedora-cloud-registry-disk-demo:latest", "pullMethod": "node"}}`,
			`, "garbageCollect": "Outdated", "importsToKeep": 0, "retentionPolicy": "None"`), ""},
		{"http source", cron(`{"http": {"url": "http://x/d.img"}}`, ""), "spec.template.spec.source.registry is required"},
		{"blank source", cron(`{"blank": {}}`, ""), "spec.template.spec.source.registry is required"},
		{"negative importsToKeep", cron(`{"http": {"url": "http://x"}}`, `, "importsToKeep": -1`), "spec.importsToKeep"},
		{"unknown garbageCollect", cron(`{"http": {"url": "http://x"}}`, `, "garbageCollect": "Sometimes"`), "spec.garbageCollect"},
		{"unknown retentionPolicy", cron(`{"http": {"url": "http://x"}}`, `, "retentionPolicy": "Some"`), "spec.retentionPolicy"},
		{"no schedule", `{"template": {"spec": {"source": {"blank": {}}, ` + storage + `}}, "managedDataSource": "x"}`, "spec.schedule"},
		{"no managedDataSource", `{"template": {"spec": {"source": {"blank": {}}, ` + storage + `}}, "schedule": "@daily"}`, "spec.managedDataSource"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var spec map[string]any
			require.NoError(t, json.Unmarshal([]byte(tc.spec), &spec))
			c := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
			c.SetGroupVersionKind(cdiv1.GroupVersion.WithKind("DataImportCron"))
			c.SetNamespace("default")
			c.SetName("cron-" + string(rune('a'+i)))
			err := k8s.Create(ctx, c)
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
