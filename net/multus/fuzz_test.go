package multus

import (
	"strings"
	"testing"
)

// FuzzNADConfig: a NetworkAttachmentDefinition's spec.config is any
// namespace editor's text, parsed by the meta-plugin as root on the node.
// It either parses into a conflist of at least one plugin, named as asked
// when it names none, or is an error: never a panic.
func FuzzNADConfig(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","type":"bridge","bridge":"br1"}`,
		`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"bridge"},{"type":"tuning"}]}`,
		`{"plugins":null}`, `{"plugins":[{}]}`, `[]`, `null`, `{"name":3}`, `{`,
	} {
		f.Add([]byte(s), "br1")
	}
	f.Fuzz(func(t *testing.T, b []byte, name string) {
		list, err := confList(b, name)
		if err != nil {
			return
		}
		if list == nil || len(list.Plugins) == 0 {
			t.Fatalf("parsed into no plugin: %q", b)
		}
	})
}

// FuzzCNIArgs: CNI_ARGS come from the runtime; what parses is the
// KEY=VALUE pairs given, in order.
func FuzzCNIArgs(f *testing.F) {
	for _, s := range []string{"", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u", "A=1;;B=2", "=", "A==B", "noequals"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseArgs(s)
		if err != nil || s == "" {
			return
		}
		parts := make([]string, len(a.all))
		for i, kv := range a.all {
			parts[i] = kv[0] + "=" + kv[1]
		}
		if got := strings.Join(parts, ";"); got != s {
			t.Fatalf("parsed %q as %q", s, got)
		}
	})
}
