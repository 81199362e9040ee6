//go:build linux && amd64

package seccomp_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/boot/boottest"
	"github.com/kubevmm/kubevmm/vmm/machine"
	"github.com/kubevmm/kubevmm/vmm/runner"
	"github.com/kubevmm/kubevmm/vmm/seccomp"
)

// childEnv makes the test binary a VMM that breaks its filter: it runs a
// spinning guest, installs the filter in the mode the variable names, and
// makes a system call outside the list from a goroutine (any thread).
const childEnv = "KUBEVMM_SECCOMP_TEST_CHILD"

const survived = "survived the forbidden call"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if err := forbiddenCallInARunningVMM(seccomp.Mode(mode)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		fmt.Println(survived)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func forbiddenCallInARunningVMM(mode seccomp.Mode) error {
	m, err := machine.New(machine.Config{CPUs: 1, MemoryBytes: 64 << 20,
		Kernel: boottest.TinyELF([]byte{0xeb, 0xfe}, 0x100000), Console: io.Discard})
	if err != nil {
		return err
	}
	defer m.Close()
	if err := seccomp.Install(mode); err != nil {
		return err
	}
	r := runner.New(m, 1, 64<<20)
	go r.Run()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// personality(0xffffffff) only reads the persona: harmless
		// where it is let through (log mode), and not on the list.
		unix.Syscall(unix.SYS_PERSONALITY, 0xffffffff, 0, 0)
	}()
	<-done
	if err := r.Stop(); err != nil {
		return err
	}
	<-r.Done()
	return nil
}

func TestForbiddenCall(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	for _, tc := range []struct {
		mode     seccomp.Mode
		killed   bool
		survives bool
	}{
		{mode: seccomp.Kill, killed: true},
		{mode: seccomp.Log, survives: true},
		{mode: seccomp.Off, survives: true},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+string(tc.mode))
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if tc.killed {
				require.True(t, errors.As(err, &ee), "the VMM was not killed: %v\n%s", err, out)
				ws := ee.Sys().(syscall.WaitStatus)
				require.True(t, ws.Signaled(), "%v\n%s", err, out)
				assert.Equal(t, syscall.SIGSYS, ws.Signal())
				assert.NotContains(t, string(out), survived)
				return
			}
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), survived)
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"off", "log", "kill"} {
		m, err := seccomp.ParseMode(s)
		require.NoError(t, err)
		assert.Equal(t, seccomp.Mode(s), m)
	}
	_, err := seccomp.ParseMode("strict")
	assert.ErrorContains(t, err, "want off, log or kill")
}

func TestFilterRefusesOff(t *testing.T) {
	_, err := seccomp.Filter(seccomp.Off)
	assert.Error(t, err)
}
