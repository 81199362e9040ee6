package handler

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/api/vmispec"
)

// The installed profile is what containerd reads for a Localhost profile
// (an OCI LinuxSeccomp): an allow-list that refuses what the runtime's
// default refuses, and lets userfaultfd through for post-copy.
func TestInstallSeccompProfile(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, InstallSeccompProfile(dir))
	require.NoError(t, InstallSeccompProfile(dir), "again: replaced")
	b, err := os.ReadFile(filepath.Join(dir, vmispec.SeccompProfile))
	require.NoError(t, err)
	var p specs.LinuxSeccomp
	require.NoError(t, json.Unmarshal(b, &p))
	assert.Equal(t, specs.ActErrno, p.DefaultAction, "what is not listed is refused")
	assert.Contains(t, p.Architectures, specs.ArchX86_64)
	allowed := func(name string) bool {
		for _, s := range p.Syscalls {
			if slices.Contains(s.Names, name) && s.Action == specs.ActAllow && len(s.Args) == 0 {
				return true
			}
		}
		return false
	}
	for _, name := range []string{"userfaultfd", "ioctl", "mmap", "memfd_create", "seccomp", "openat2"} {
		assert.True(t, allowed(name), "%s is allowed", name)
	}
	// Among what the runtime's default refuses without CAP_SYS_ADMIN and
	// friends, which the launcher pods do not have.
	for _, name := range []string{"mount", "unshare", "setns", "kexec_load", "bpf", "init_module"} {
		assert.False(t, allowed(name), "%s is refused", name)
	}
	ents, err := os.ReadDir(filepath.Dir(filepath.Join(dir, vmispec.SeccompProfile)))
	require.NoError(t, err)
	assert.Len(t, ents, 1, "no temporary file left")
}
