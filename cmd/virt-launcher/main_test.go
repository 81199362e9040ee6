package main

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	// Re-executed by a test as virt-launcher itself.
	if args := os.Getenv("VIRT_LAUNCHER_TEST_ARGS"); args != "" {
		os.Args = []string{"virt-launcher", args}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// `virt-launcher wait` (an attachment pod's container) runs until the
// kubelet's SIGTERM and then exits 0.
func TestWaitUntilSIGTERM(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VIRT_LAUNCHER_TEST_ARGS=wait")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	// Its line says the handler is in place: SIGTERM before that would
	// kill it by default, not end its wait.
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "virt-launcher: waiting for SIGTERM\n", line)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
}
