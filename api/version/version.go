// Package version is the build's version in KubeVirt's shape
// (kubevirt.io/client-go/version.Info): virt-api serves it at
// /apis/subresources.kubevirt.io/v1/version and virtctl prints it, and
// KubeVirt's own virtctl reads it from the former.
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is KubeVirt's version.Info, field for field.
type Info struct {
	GitVersion   string `json:"gitVersion"`
	GitCommit    string `json:"gitCommit"`
	GitTreeState string `json:"gitTreeState"`
	BuildDate    string `json:"buildDate"`
	GoVersion    string `json:"goVersion"`
	Compiler     string `json:"compiler"`
	Platform     string `json:"platform"`
}

// String is the version alone, as KubeVirt's.
func (i Info) String() string { return i.GitVersion }

// gitVersion may be set at build time, e.g. for a release:
//
//	go build -ldflags "-X github.com/kubevmm/kubevmm/api/version.gitVersion=v1.2.3"
var gitVersion string

// Dev is the version of a build that knows no better: a semver, as
// clients that compare versions need one.
const Dev = "v0.0.0-dev"

// Get describes this binary: the version set at build time, else the one
// Go stamped from the module's VCS state (a tag, or a pseudo-version such
// as v0.0.0-20261124070000-f059f57a1b2c+dirty), else Dev; the commit,
// tree state and commit time from the VCS stamp when there is one.
func Get() Info {
	i := Info{GitVersion: gitVersion, GoVersion: runtime.Version(), Compiler: runtime.Compiler, Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if ok {
		if v := bi.Main.Version; i.GitVersion == "" && strings.HasPrefix(v, "v") {
			i.GitVersion = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.GitCommit = s.Value
			case "vcs.time":
				i.BuildDate = s.Value
			case "vcs.modified":
				i.GitTreeState = "clean"
				if s.Value == "true" {
					i.GitTreeState = "dirty"
				}
			}
		}
	}
	if i.GitVersion == "" {
		i.GitVersion = Dev
	}
	return i
}
