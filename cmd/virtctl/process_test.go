package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	kvscheme "github.com/kubevmm/kubevmm/api/scheme"
	"github.com/kubevmm/kubevmm/api/template/crds"
	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
	"github.com/kubevmm/kubevmm/operator/ssp/templates"
	"github.com/kubevmm/kubevmm/test/apiserver"
)

const demoTemplate = `apiVersion: template.openshift.io/v1
kind: Template
metadata:
  name: demo
labels:
  app: ${NAME}
objects:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: ${NAME}
  data:
    size: ${{SIZE}}
parameters:
- name: NAME
  required: true
- name: SIZE
  value: "2"
`

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "template.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// decodeList reads what `virtctl process` prints: a v1 List.
func decodeList(t *testing.T, b []byte) *unstructured.UnstructuredList {
	t.Helper()
	j, err := yaml.YAMLToJSON(b)
	require.NoError(t, err)
	l := &unstructured.UnstructuredList{}
	require.NoError(t, l.UnmarshalJSON(j))
	assert.Equal(t, "v1", l.GetAPIVersion())
	assert.Equal(t, "List", l.GetKind())
	return l
}

func TestProcessFile(t *testing.T) {
	f := writeFile(t, demoTemplate)
	for _, args := range [][]string{
		{"process", "-f", f, "-p", "NAME=web"},
		{"process", "--local", "-f", f, "-p", "NAME=web", "-o", "yaml"},
		{"process", "-p", "NAME=web", "--filename", f, "--output", "json"},
	} {
		var out bytes.Buffer
		code, err := run(args, nil, &out)
		require.NoError(t, err, args)
		require.Equal(t, 0, code)
		l := decodeList(t, out.Bytes())
		require.Len(t, l.Items, 1)
		cm := l.Items[0]
		assert.Equal(t, "web", cm.GetName())
		assert.Equal(t, map[string]string{"app": "web"}, cm.GetLabels())
		size, _, _ := unstructured.NestedFieldNoCopy(cm.Object, "data", "size")
		assert.Equal(t, int64(2), size, "${{SIZE}} is a number")
	}

	// JSON by default, as oc prints it.
	var out bytes.Buffer
	_, err := run([]string{"process", "-f", f, "-p", "NAME=x"}, nil, &out)
	require.NoError(t, err)
	assert.True(t, json.Valid(out.Bytes()), out.String())

	// From stdin.
	in, err := os.Open(f)
	require.NoError(t, err)
	defer in.Close()
	out.Reset()
	_, err = run([]string{"process", "-f", "-", "-p", "NAME=stdin"}, in, &out)
	require.NoError(t, err)
	assert.Equal(t, "stdin", decodeList(t, out.Bytes()).Items[0].GetName())
}

func TestProcessRefuses(t *testing.T) {
	f := writeFile(t, demoTemplate)
	notTemplate := writeFile(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
	for _, tc := range []struct {
		name    string
		args    []string
		code    int
		wantErr string
	}{
		{"required missing", []string{"process", "-f", f}, 1, "parameter NAME is required"},
		{"unknown parameter", []string{"process", "-f", f, "-p", "NAME=a", "-p", "COLOR=red"}, 1, "unknown parameter COLOR: template demo has NAME, SIZE"},
		{"parameter twice", []string{"process", "-f", f, "-p", "NAME=a", "-p", "NAME=b"}, 2, "parameter NAME given twice"},
		{"not NAME=VALUE", []string{"process", "-f", f, "-p", "NAME"}, 2, `-p "NAME": want NAME=VALUE`},
		{"bad output", []string{"process", "-f", f, "-o", "wide"}, 2, `-o "wide": want json or yaml`},
		{"nothing to process", []string{"process"}, 2, "want one TEMPLATE"},
		{"a name and a file", []string{"process", "demo", "-f", f}, 2, "want one TEMPLATE"},
		{"--local without a file", []string{"process", "--local", "demo"}, 2, "want one TEMPLATE"},
		{"missing file", []string{"process", "-f", filepath.Join(t.TempDir(), "nope")}, 1, "no such file"},
		{"not a template", []string{"process", "-f", notTemplate}, 1, `kind "ConfigMap", want template.openshift.io/v1 Template`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code, err := run(tc.args, nil, &out)
			require.ErrorContains(t, err, tc.wantErr)
			assert.Equal(t, tc.code, code)
			assert.Empty(t, out.String(), "nothing printed for kubectl apply")
		})
	}
}

// TestProcessFromCluster: `virtctl process NAME -n NS` reads the Template
// from a real API server holding the CRD, and the VM it prints names its
// template.
func TestProcessFromCluster(t *testing.T) {
	crd, err := crds.CRD()
	require.NoError(t, err)
	cfg, _ := apiserver.Start(t, func(env *envtest.Environment) { env.CRDs = append(env.CRDs, crd) })
	s, err := kvscheme.New()
	require.NoError(t, err)
	require.NoError(t, templatev1.AddToScheme(s))
	c, err := client.New(cfg, client.Options{Scheme: s})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "openshift"}}))
	all, err := templates.Common("openshift")
	require.NoError(t, err)
	require.NoError(t, c.Create(ctx, all[1]))
	kc := kubeconfig(t, cfg)

	var out bytes.Buffer
	code, err := run([]string{"--kubeconfig", kc, "process", all[1].Name, "-n", "openshift", "-p", "NAME=vm1", "-p", "SRC_IMAGE=example/disk:1"}, nil, &out)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	l := decodeList(t, out.Bytes())
	require.Len(t, l.Items, 1)
	vm := l.Items[0]
	assert.Equal(t, "VirtualMachine", vm.GetKind())
	assert.Equal(t, "vm1", vm.GetName())
	assert.Equal(t, all[1].Name, vm.GetLabels()["vm.kubevirt.io/template"])
	assert.Equal(t, "openshift", vm.GetLabels()["vm.kubevirt.io/template.namespace"])
	vols, _, _ := unstructured.NestedSlice(vm.Object, "spec", "template", "spec", "volumes")
	assert.Equal(t, "example/disk:1", vols[0].(map[string]any)["containerDisk"].(map[string]any)["image"])

	out.Reset()
	_, err = run([]string{"--kubeconfig", kc, "-n", "openshift", "process", "nope"}, nil, &out)
	require.ErrorContains(t, err, `template openshift/nope: templates.template.openshift.io "nope" not found`)
}
