package main

import (
	"bytes"
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// postCopyScript: a userspace counter, a checksummed 1 MiB region and awk
// rewriting a big array far faster than 1 MiB/s; no devices besides the
// serial console, so nothing in the guest depends on device I/O while it
// migrates.
const postCopyScript = `
dd if=/dev/urandom of=/tmp/region bs=64k count=16 2>/dev/null
set -- $(sha256sum /tmp/region); echo "region $1"
(i=0; while true; do i=$((i+1)); echo "count $i"; sleep 1; done) &
awk 'BEGIN { while (1) { for (i = 0; i < 200000; i++) a[i] = i + n; n++ } }' &
while read -r line; do
  case "$line" in
    sum) set -- $(sha256sum /tmp/region); echo "region $1" ;;
    quit) reboot -f ;;
  esac
done
`

// TestPostCopyMigrationLinuxGuest migrates a guest that dirties memory
// faster than the 1 MiB/s cap: pre-copy alone would never converge, post-
// copy finishes and the guest goes on on the target (its counter advances,
// its memory region is intact). Then it migrates that guest on and kills
// the source during post-copy: the target, which lacks pages only the
// source had, exits with an error naming the lost source instead of
// hanging, and the guest is gone.
func TestPostCopyMigrationLinuxGuest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := func(name string) string { return filepath.Join(dir, name) }
	initrd := guestimage.InitrdWithRun(t, postCopyScript, nil)
	a := startVMM(t, "run", "--kernel", guestimage.Kernel(t), "--initrd", initrd, "--memory", "128M",
		"--console", "socket:"+sock("a.con"), "--api", sock("a.api"))
	ca := attach(t, sock("a.con"), a)
	m, pos := ca.waitFor(regionRE, 0)
	region := m[1]
	_, pos = ca.nextCount(pos)
	before, _ := ca.nextCount(pos)

	b := startVMM(t, "run", "--incoming", "unix:"+sock("b.mig"), "--console", "socket:"+sock("b.con"), "--api", sock("b.api"))
	waitForFile(t, sock("b.mig"), b)
	// --downtime 1ms: pre-copy never counts as converged, however slowly
	// the guest gets to dirty its memory on a loaded host (under the
	// default 300 ms, 75 pages a round at 1 MiB/s, a starved awk let it
	// converge and the test saw no post-copy).
	r := vmm(t, "migrate", "--api", sock("a.api"), "--to", "unix:"+sock("b.mig"), "--bandwidth", "1M", "--downtime", "1ms", "--post-copy")
	require.Equal(t, 0, r.code, "migrate: %s%s", r.stdout, r.stderr)
	t.Log(r.stdout)
	assert.Contains(t, r.stdout, "migrate: completed")
	assert.Contains(t, r.stdout, "post-copy after round 2")
	assert.Equal(t, 0, a.wait(time.Minute), "the source VMM exits 0 once every page is on the target; stderr: %s", a.stderr.String())

	cb := attach(t, sock("b.con"), b)
	after, bpos := cb.nextCount(cb.len())
	assert.Greater(t, after, before, "the counter continues on the target")
	cb.send("sum")
	m, _ = cb.waitFor(regionRE, bpos)
	assert.Equal(t, region, m[1], "memory region intact after post-copy")

	// Again, and the source dies in post-copy.
	c := startVMM(t, "run", "--incoming", "unix:"+sock("c.mig"), "--console", "none")
	waitForFile(t, sock("c.mig"), c)
	mig := vmmCommand("migrate", "--api", sock("b.api"), "--to", "unix:"+sock("c.mig"), "--bandwidth", "1M", "--downtime", "1ms", "--post-copy")
	var migOut bytes.Buffer
	mig.Stdout, mig.Stderr = &migOut, &migOut
	require.NoError(t, mig.Start())
	waitPhase(t, sock("b.api"), "postcopy")
	require.NoError(t, b.cmd.Process.Signal(syscall.SIGKILL))
	// a bound for a hung target, not a speed limit
	code := c.wait(5 * time.Minute)
	assert.Equal(t, exitGuest, code, "the target fails; stderr: %s", c.stderr.String())
	assert.Contains(t, c.stderr.String(), "post-copy; the guest is lost")
	assert.Contains(t, c.stderr.String(), "lost the migration source")
	assert.Error(t, mig.Wait(), "migrate fails with its source: %s", migOut.String())
}

// waitPhase waits until the VMM's migration reaches phase.
func waitPhase(t *testing.T, sock, phase string) {
	t.Helper()
	c := api.NewClient(sock)
	// a bound for a migration that never gets there: the first rounds at
	// 1 MiB/s take minutes
	deadline := time.Now().Add(15 * time.Minute)
	for time.Now().Before(deadline) {
		s, err := c.Migration(context.Background())
		require.NoError(t, err)
		if s.Stats.Phase == phase {
			return
		}
		require.NotContains(t, []string{"completed", "failed"}, s.Stats.Phase, "migration ended before %s: %+v", phase, s.Stats)
		time.Sleep(100 * time.Millisecond) // polling the control API
	}
	t.Fatalf("migration never reached %s", phase)
}
