package handler

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/kubevmm/kubevmm/api/vmispec"
)

// LauncherSeccompProfile is the launcher pods' seccomp profile, in the
// OCI form containerd reads a Localhost profile in: the container
// runtime's default profile (moby's, which containerd's is derived from),
// for the launcher pods' capabilities (NET_BIND_SERVICE at most), plus
// userfaultfd. The default leaves userfaultfd out, and a post-copy
// migration's target VMM needs it; everything else the launcher, the VMM
// before it confines itself, and the QEMU fallback do is in the default.
func LauncherSeccompProfile() ([]byte, error) {
	p, err := seccomp.GetDefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
		Bounding: []string{"CAP_NET_BIND_SERVICE"},
	}}})
	if err != nil {
		return nil, fmt.Errorf("the runtime's default seccomp profile: %w", err)
	}
	for _, s := range p.Syscalls {
		if slices.Contains(s.Names, "userfaultfd") && s.Action == specs.ActAllow && len(s.Args) == 0 {
			return json.Marshal(p)
		}
	}
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"userfaultfd"}, Action: specs.ActAllow})
	return json.Marshal(p)
}

// InstallSeccompProfile writes LauncherSeccompProfile where the kubelet
// looks for vmispec.SeccompProfile: in its seccomp directory dir. It replaces
// the file in one rename, so a launcher container being created at that
// moment reads the old profile or the new one, never half of one.
func InstallSeccompProfile(dir string) error {
	b, err := LauncherSeccompProfile()
	if err != nil {
		return err
	}
	path := filepath.Join(dir, vmispec.SeccompProfile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("installing the launcher seccomp profile: %w", err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("installing the launcher seccomp profile: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("installing the launcher seccomp profile: %w", err)
	}
	return nil
}
