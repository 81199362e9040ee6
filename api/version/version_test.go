package version

import (
	"regexp"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

// semverRE is SemVer 2.0 with Go's leading v.
var semverRE = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// TestGet: the version is a semver whatever the build (KubeVirt's virtctl
// and tools compare it), and the build-time one wins.
func TestGet(t *testing.T) {
	i := Get()
	assert.Regexp(t, semverRE, i.GitVersion)
	assert.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, i.Platform)
	assert.Equal(t, runtime.Version(), i.GoVersion)

	old := gitVersion
	t.Cleanup(func() { gitVersion = old })
	gitVersion = "v1.2.3"
	assert.Equal(t, "v1.2.3", Get().GitVersion)
	assert.Equal(t, "v1.2.3", Get().String())
}
