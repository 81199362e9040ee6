// Package hosttools gives tests the host programs they drive (qemu-img,
// mkfs.ext4, debugfs, ip), installing the Debian packages that provide
// them through hack/deps.sh when they are missing.
package hosttools

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// sets maps a program to the hack/deps.sh set that installs it.
var sets = map[string]string{
	"qemu-img": "qemu",
	"ip":       "net",
	"ping":     "net",
}

// Require returns the path of prog, installing it first if it is missing
// and hack/deps.sh knows how; otherwise the test fails.
func Require(t testing.TB, prog string) string {
	t.Helper()
	if p, err := exec.LookPath(prog); err == nil {
		return p
	}
	if set, ok := sets[prog]; ok {
		_, file, _, _ := runtime.Caller(0)
		deps := filepath.Join(filepath.Dir(file), "../../hack/deps.sh")
		cmd := exec.Command(deps, set)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s is missing and hack/deps.sh %s failed: %v", prog, set, err)
		}
		if p, err := exec.LookPath(prog); err == nil {
			return p
		}
	}
	t.Fatalf("%s is not installed", prog)
	return ""
}

// Run runs a host command and fails the test with its output on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(Require(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
	return string(out)
}
