package registry

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseURL(t *testing.T) {
	dg := "sha256:" + strings.Repeat("ab", 32)
	ok := []struct {
		in   string
		want Ref
	}{
		{"docker://10.200.0.1:5000/kubevmm/disk:v1", Ref{Host: "10.200.0.1:5000", Repo: "kubevmm/disk", Tag: "v1"}},
		{"docker://quay.io/containerdisks/fedora", Ref{Host: "quay.io", Repo: "containerdisks/fedora", Tag: "latest"}},
		{"docker://localhost:5000/a/b/c@" + dg, Ref{Host: "localhost:5000", Repo: "a/b/c", Digest: dg}},
		{"docker://[::1]:5000/x_y.z-w:1.0_rc", Ref{Host: "[::1]:5000", Repo: "x_y.z-w", Tag: "1.0_rc"}},
	}
	for _, c := range ok {
		t.Run(c.in, func(t *testing.T) {
			r, err := ParseURL(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.want, r)
			if !strings.HasSuffix(c.in, "/containerdisks/fedora") {
				assert.Equal(t, c.in, r.String(), "round trip")
			}
		})
	}
	bad := []struct{ in, why string }{
		{"quay.io/x:1", "want docker://"},
		{"http://quay.io/x", "want docker://"},
		{"docker://fedora", "no registry host"},
		{"docker:///x", "no registry host"},
		{"docker://host:5000/", "no repository"},
		{"docker://host/Upper", `repository "Upper"`},
		{"docker://host/a//b", "repository"},
		{"docker://host/x:", `tag ""`},
		{"docker://host/x:-bad", `tag "-bad"`},
		{"docker://host/x@sha256:abc", "digest"},
		{"docker://host/x@md5:" + strings.Repeat("a", 32), "digest"},
		{"docker://host/x:1@" + dg, "both a tag and a digest"},
		{"docker://ho st/x", "host"},
		{"docker://host:99999999/x", "host"},
	}
	for _, c := range bad {
		t.Run(c.in, func(t *testing.T) {
			_, err := ParseURL(c.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.why)
			assert.Contains(t, err.Error(), c.in, "the error names the URL")
		})
	}
}

func TestParseChallenge(t *testing.T) {
	s, p := parseChallenge(`Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"`)
	assert.Equal(t, "Bearer", s)
	assert.Equal(t, map[string]string{"realm": "https://auth.example/token", "service": "registry.example", "scope": "repository:a/b:pull,push"}, p)
	s, p = parseChallenge(`Basic realm=test`)
	assert.Equal(t, "Basic", s)
	assert.Equal(t, map[string]string{"realm": "test"}, p)
}
