package process

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	templatev1 "github.com/kubevmm/kubevmm/api/template/v1"
)

// tmpl builds a Template from its objects (JSON) and parameters.
func tmpl(objects []string, params ...templatev1.Parameter) *templatev1.Template {
	t := &templatev1.Template{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: "templates"}, Parameters: params}
	for _, o := range objects {
		t.Objects = append(t.Objects, runtime.RawExtension{Raw: []byte(o)})
	}
	return t
}

func cm(data string) string {
	return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":` + data + `}`
}

func TestProcessSubstitution(t *testing.T) {
	params := []templatev1.Parameter{
		{Name: "A", Value: "alpha"},
		{Name: "N", Value: "3"},
		{Name: "OBJ", Value: `{"k":[1,true]}`},
		{Name: "WORD", Value: "plain words"},
		{Name: "EMPTY"},
	}
	for _, tc := range []struct {
		name, data string
		given      map[string]string
		want       any
	}{
		{"whole string", `{"x":"${A}"}`, nil, map[string]any{"x": "alpha"}},
		{"within a string, twice", `{"x":"pre-${A}-${A}-post"}`, nil, map[string]any{"x": "pre-alpha-alpha-post"}},
		{"unknown reference stays", `{"x":"${NOPE}-${A}"}`, nil, map[string]any{"x": "${NOPE}-alpha"}},
		{"${{}} number", `{"x":"${{N}}"}`, nil, map[string]any{"x": int64(3)}},
		{"${{}} object", `{"x":"${{OBJ}}"}`, nil, map[string]any{"x": map[string]any{"k": []any{int64(1), true}}}},
		{"${{}} not JSON is a string", `{"x":"${{WORD}}"}`, nil, map[string]any{"x": "plain words"}},
		{"${{}} only as the whole string", `{"x":"a${{N}}"}`, nil, map[string]any{"x": "a${{N}}"}},
		{"${{}} in a list", `{"x":["${{N}}","${A}"]}`, nil, map[string]any{"x": []any{int64(3), "alpha"}}},
		{"map keys", `{"${A}":"v"}`, nil, map[string]any{"alpha": "v"}},
		{"empty value", `{"x":"[${EMPTY}]"}`, nil, map[string]any{"x": "[]"}},
		{"given value wins", `{"x":"${A}"}`, map[string]string{"A": "given"}, map[string]any{"x": "given"}},
		{"given ${{}} boolean", `{"x":"${{A}}"}`, map[string]string{"A": "false"}, map[string]any{"x": false}},
		{"numbers and null untouched", `{"x":1.5,"y":null,"z":false}`, nil, map[string]any{"x": 1.5, "y": nil, "z": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Process(tmpl([]string{cm(tc.data)}, params...), tc.given)
			require.NoError(t, err)
			require.Len(t, objs, 1)
			assert.Equal(t, tc.want, objs[0].Object["data"])
		})
	}
}

func TestProcessParameters(t *testing.T) {
	gen := templatev1.Parameter{Name: "GEN", Generate: "expression", From: "vm-[a-z0-9]{8}"}
	for _, tc := range []struct {
		name    string
		params  []templatev1.Parameter
		given   map[string]string
		want    string // the value of ${P} / ${GEN}, or a regexp for generated values
		wantErr string
	}{
		{name: "default", params: []templatev1.Parameter{{Name: "P", Value: "d"}}, want: "^d$"},
		{name: "generated", params: []templatev1.Parameter{gen}, want: "^vm-[a-z0-9]{8}$"},
		{name: "given beats the generator", params: []templatev1.Parameter{gen}, given: map[string]string{"GEN": "mine"}, want: "^mine$"},
		{name: "given empty: generated, as oc", params: []templatev1.Parameter{gen}, given: map[string]string{"GEN": ""}, want: "^vm-[a-z0-9]{8}$"},
		{name: "a value stops the generator", params: []templatev1.Parameter{{Name: "GEN", Value: "v", Generate: "expression", From: "[a-z]{3}"}}, want: "^v$"},
		{name: "required and given", params: []templatev1.Parameter{{Name: "P", Required: true}}, given: map[string]string{"P": "x"}, want: "^x$"},
		{name: "required, generated", params: []templatev1.Parameter{{Name: "GEN", Required: true, Generate: "expression", From: "[a]{2}"}}, want: "^aa$"},
		{name: "required, missing", params: []templatev1.Parameter{{Name: "P", Required: true}}, wantErr: "parameter P is required"},
		{name: "required, given empty", params: []templatev1.Parameter{{Name: "P", Required: true}}, given: map[string]string{"P": ""}, wantErr: "parameter P is required"},
		{name: "unknown parameter", params: []templatev1.Parameter{{Name: "P"}}, given: map[string]string{"Q": "1", "B": "2"}, wantErr: "unknown parameter B, Q: template t has P"},
		{name: "unknown generator", params: []templatev1.Parameter{{Name: "P", Generate: "random"}}, wantErr: `parameter P: unknown generator "random"`},
		{name: "bad expression", params: []templatev1.Parameter{{Name: "P", Generate: "expression", From: "[z-a]{3}"}}, wantErr: "parameter P: generating from"},
		{name: "bad name", params: []templatev1.Parameter{{Name: "A-B"}}, wantErr: `parameters[0]: name "A-B"`},
		{name: "no name", params: []templatev1.Parameter{{Name: ""}}, wantErr: `parameters[0]: name ""`},
		{name: "declared twice", params: []templatev1.Parameter{{Name: "P"}, {Name: "P"}}, wantErr: "parameter P: declared twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := "${" + tc.params[0].Name + "}"
			objs, err := Process(tmpl([]string{cm(`{"v":"` + ref + `"}`)}, tc.params...), tc.given)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Regexp(t, regexp.MustCompile(tc.want), objs[0].Object["data"].(map[string]any)["v"])
		})
	}
}

func TestProcessLeavesTheTemplateAlone(t *testing.T) {
	tp := tmpl([]string{cm(`{"v":"${GEN}"}`)}, templatev1.Parameter{Name: "GEN", Generate: "expression", From: "[a-z]{8}"})
	tp.ObjectLabels = map[string]string{"l": "${GEN}"}
	before := tp.DeepCopy()
	a, err := Process(tp, nil)
	require.NoError(t, err)
	b, err := Process(tp, nil)
	require.NoError(t, err)
	assert.Equal(t, before, tp)
	// Generated afresh each time.
	assert.NotEqual(t, a[0].Object["data"], b[0].Object["data"])
}

func TestProcessMetadata(t *testing.T) {
	vm := `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"${NAME}","labels":{"app":"${NAME}","keep":"me","over":"object"}},"spec":{}}`
	other := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"${NAME}","namespace":"fixed"}}`
	ns := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"${NS}"}}`
	tp := tmpl([]string{vm, other, ns}, templatev1.Parameter{Name: "NAME", Value: "vm1"}, templatev1.Parameter{Name: "NS", Value: "target"})
	tp.ObjectLabels = map[string]string{"from": "${NAME}", "over": "template"}
	tp.Labels = map[string]string{
		"os.template.kubevirt.io/fedora40":     "true",
		"workload.template.kubevirt.io/server": "true",
		"flavor.template.kubevirt.io/small":    "true",
		"template.kubevirt.io/type":            "base",
	}
	objs, err := Process(tp, nil)
	require.NoError(t, err)
	require.Len(t, objs, 3)

	assert.Equal(t, "vm1", objs[0].GetName())
	assert.Equal(t, map[string]string{
		"app": "vm1", "keep": "me", "over": "template", "from": "vm1",
		LabelTemplate: "t", LabelTemplateNamespace: "templates",
		"os.template.kubevirt.io/fedora40":     "true",
		"workload.template.kubevirt.io/server": "true",
		"flavor.template.kubevirt.io/small":    "true",
	}, objs[0].GetLabels())

	// Not a VM: the template's labels only; a written namespace is dropped.
	assert.Equal(t, map[string]string{"from": "vm1", "over": "template"}, objs[1].GetLabels())
	assert.Empty(t, objs[1].GetNamespace())
	// A namespace from a parameter stays.
	assert.Equal(t, "target", objs[2].GetNamespace())
}

func TestProcessRefusesBadObjects(t *testing.T) {
	for _, tc := range []struct{ name, obj, wantErr string }{
		{"not an object", `[1,2]`, "objects[0]: not a JSON object"},
		{"null", `null`, "objects[0]: not a JSON object"},
		{"no kind", `{"apiVersion":"v1","metadata":{"name":"x"}}`, "objects[0]: apiVersion and kind are required"},
		{"kind from an empty parameter", `{"apiVersion":"v1","kind":"${E}"}`, "apiVersion and kind are required"},
		{"metadata not an object", `{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}`, "metadata is a string"},
		{"labels not an object", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":[1]}}`, "metadata.labels is a []interface {}"},
		{"a label not a string", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"labels":{"a":1}}}`, "metadata.labels.a is a int64"},
		{"keys collide", `{"apiVersion":"v1","kind":"ConfigMap","data":{"${E}x":"1","x":"2"}}`, `key "x" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Process(tmpl([]string{tc.obj}, templatev1.Parameter{Name: "E"}), nil)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	t.Run("empty object", func(t *testing.T) {
		tp := &templatev1.Template{Objects: []runtime.RawExtension{{}}}
		_, err := Process(tp, nil)
		require.ErrorContains(t, err, "objects[0]: empty object")
	})
}

// A template built in Go holds typed objects rather than raw JSON.
func TestProcessTypedObject(t *testing.T) {
	tp := &templatev1.Template{
		ObjectMeta: metav1.ObjectMeta{Name: "t"},
		Objects: []runtime.RawExtension{{Object: &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "${N}"},
		}}},
		Parameters: []templatev1.Parameter{{Name: "N", Value: "typed"}},
	}
	objs, err := Process(tp, nil)
	require.NoError(t, err)
	assert.Equal(t, "typed", objs[0].GetName())
}

func FuzzProcess(f *testing.F) {
	f.Add([]byte(`{"objects":[{"apiVersion":"v1","kind":"A","metadata":{"name":"${P}","namespace":"${P}"}}],"parameters":[{"name":"P","generate":"expression","from":"[a-z]{3}"}],"labels":{"${P}":"${P}"}}`), "P", "x")
	f.Add([]byte(`{"objects":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","spec":"${{P}}"}],"parameters":[{"name":"P","value":"{\"a\":1}"}]}`), "Q", "")
	f.Fuzz(func(t *testing.T, tmplJSON []byte, name, value string) {
		tp := &templatev1.Template{}
		if err := json.Unmarshal(tmplJSON, tp); err != nil {
			return
		}
		objs, err := Process(tp, map[string]string{name: value})
		if err != nil {
			return
		}
		for _, o := range objs {
			if _, err := o.MarshalJSON(); err != nil {
				t.Fatalf("a processed object does not encode: %v", err)
			}
		}
	})
}
