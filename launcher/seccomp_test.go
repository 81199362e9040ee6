package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
)

// launcherChildEnv makes the test binary a virt-launcher process, as
// cmd/virt-launcher runs it (Seccomp on): the filter confines the whole
// process, so it cannot run inside the test binary's own.
const launcherChildEnv = "KUBEVMM_LAUNCHER_TEST_CHILD"

func TestMain(m *testing.M) {
	if arg := os.Getenv(launcherChildEnv); arg != "" {
		os.Exit(launcherChild(arg))
	}
	os.Exit(m.Run())
}

type childArgs struct {
	VMIFile string
	Paths   Paths
}

func launcherChild(arg string) int {
	var a childArgs
	if err := json.Unmarshal([]byte(arg), &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	code, err := Run(ctx, Options{VMIFile: a.VMIFile, Paths: a.Paths, Log: os.Stderr, Console: io.Discard,
		Seccomp: true, Linger: time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	return code
}

// A virt-launcher running a kubevmm guest is under the VMM's filter (kill
// unless the annotation says otherwise) and goes through pause, resume,
// snapshot, stop and its exit record without a forbidden call.
func TestLauncherRunsUnderSeccomp(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	for _, tc := range []struct{ annotation, mode string }{
		{"", "2"}, {"log", "2"}, {"off", "0"},
	} {
		t.Run("annotation="+tc.annotation, func(t *testing.T) {
			p := testPaths(t)
			require.NoError(t, os.WriteFile(filepath.Join(p.KernelBootDir, vmispec.KernelFile),
				boottest.TinyELF([]byte{0xeb, 0xfe}, 0x100000), 0o644))
			vmi := testVMI()
			mem := resource.MustParse("64Mi")
			vmi.Spec.Domain.Memory.Guest = &mem
			vmi.Spec.Domain.CPU = &v1.CPU{Cores: 1}
			vmi.Spec.Domain.Firmware.KernelBoot.Container.InitrdPath = ""
			vmi.Spec.Domain.Devices = v1.Devices{}
			vmi.Spec.Networks, vmi.Spec.Volumes = nil, nil
			if tc.annotation != "" {
				vmi.Annotations = map[string]string{vmispec.SeccompAnnotation: tc.annotation}
			}
			b, err := json.Marshal(vmi)
			require.NoError(t, err)
			vmiFile := filepath.Join(t.TempDir(), "vmi.json")
			require.NoError(t, os.WriteFile(vmiFile, b, 0o644))
			arg, err := json.Marshal(childArgs{VMIFile: vmiFile, Paths: p})
			require.NoError(t, err)

			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), launcherChildEnv+"="+string(arg))
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			stderrFile, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			require.NoError(t, err)
			defer stderrFile.Close()
			cmd.Stderr = stderrFile
			stderr := func() string { b, _ := os.ReadFile(stderrFile.Name()); return string(b) }
			require.NoError(t, cmd.Start())
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() { cmd.Process.Kill() })

			ctx := context.Background()
			c := api.NewClient(filepath.Join(p.SocketDir, vmispec.ControlSocket))
			for {
				i, err := c.Info(ctx)
				if err == nil && i.State == api.StateRunning {
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("launcher ended early: %v\n%s", err, stderr())
				case <-time.After(10 * time.Millisecond): // polling the launcher's API
				}
			}
			status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status")
			require.NoError(t, err)
			m := regexp.MustCompile(`(?m)^Seccomp:\s*(\d+)$`).FindSubmatch(status)
			require.NotNil(t, m)
			assert.Equal(t, tc.mode, string(m[1]), "the launcher's Seccomp mode")

			require.NoError(t, c.Pause(ctx))
			require.NoError(t, c.Resume(ctx))
			_, err = c.Snapshot(ctx, api.SnapshotRequest{Dir: filepath.Join(t.TempDir(), "snap")})
			require.NoError(t, err)
			require.NoError(t, c.Stop(ctx))
			err = <-exited
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("launcher exited with %v (SIGSYS is a call outside the filter's list)\n%s", ee, stderr())
			}
			require.NoError(t, err)
			rec, err := os.ReadFile(filepath.Join(p.SocketDir, vmispec.ExitFile))
			require.NoError(t, err, "the exit record is written under the filter")
			var end api.Info
			require.NoError(t, json.Unmarshal(rec, &end))
			assert.Equal(t, api.StateStopped, end.State)
		})
	}
}
