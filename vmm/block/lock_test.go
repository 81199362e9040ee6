package block_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// Two opens of one image in one process conflict as two VMMs would (OFD
// locks belong to the open, not the process): writers are exclusive,
// readers share.
func TestImageLocks(t *testing.T) {
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	require.NoError(t, os.WriteFile(raw, make([]byte, 1<<20), 0o644))
	ov := filepath.Join(dir, "overlay.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", raw, "-F", "raw", ov)

	open := func(path string, format block.Format, ro bool) (block.Disk, error) {
		return block.Open(path, block.Options{Format: format, ReadOnly: ro})
	}
	for _, tc := range []struct {
		name           string
		format         block.Format
		path           string
		firstRO, secRO bool
		conflict       bool
	}{
		{"raw writer, writer", block.FormatRaw, raw, false, false, true},
		{"raw writer, reader", block.FormatRaw, raw, false, true, true},
		{"raw reader, writer", block.FormatRaw, raw, true, false, true},
		{"raw reader, reader", block.FormatRaw, raw, true, true, false},
		{"qcow2 writer, writer", block.FormatQcow2, ov, false, false, true},
		{"qcow2 writer, reader", block.FormatQcow2, ov, false, true, true},
		{"qcow2 reader, reader", block.FormatQcow2, ov, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, err := open(tc.path, tc.format, tc.firstRO)
			require.NoError(t, err)
			second, err := open(tc.path, tc.format, tc.secRO)
			if !tc.conflict {
				require.NoError(t, err)
				second.Close()
				first.Close()
				return
			}
			require.ErrorIs(t, err, block.ErrLocked)
			assert.Contains(t, err.Error(), tc.path)
			assert.Contains(t, err.Error(), "this process")
			assert.NotContains(t, err.Error(), "\n")
			require.NoError(t, first.Close())
			second, err = open(tc.path, tc.format, tc.secRO)
			require.NoError(t, err, "the lock went with the first open")
			second.Close()
		})
	}

	t.Run("backing files are shared", func(t *testing.T) {
		d, err := block.OpenQcow2(ov, false)
		require.NoError(t, err)
		defer d.Close()
		_, err = block.OpenRaw(raw, false)
		assert.ErrorIs(t, err, block.ErrLocked, "the overlay's base can't be written")
		other, err := block.OpenRaw(raw, true)
		require.NoError(t, err, "but it can be read")
		other.Close()
	})

	// A migration source lets go of its image for the target and takes it
	// back if the migration fails.
	for _, format := range []block.Format{block.FormatRaw, block.FormatQcow2} {
		t.Run("unlock and lock again "+string(format), func(t *testing.T) {
			path := map[block.Format]string{block.FormatRaw: raw, block.FormatQcow2: ov}[format]
			src, err := open(path, format, false)
			require.NoError(t, err)
			defer src.Close()
			l := src.(block.Locker)
			require.NoError(t, l.Unlock())
			dst, err := open(path, format, false)
			require.NoError(t, err, "the target opens the released image")
			err = l.Lock()
			require.ErrorIs(t, err, block.ErrLocked, "the source can't take it back while the target has it")
			assert.Contains(t, err.Error(), path)
			require.NoError(t, dst.Close())
			require.NoError(t, l.Lock())
			_, err = open(path, format, true)
			assert.ErrorIs(t, err, block.ErrLocked, "locked again")
		})
	}
}

const lockEnv = "KUBEVMM_TEST_LOCK_HOLDER"

// lockHolder opens an image writable, says so and holds it until stdin
// closes.
func lockHolder(path string) error {
	d, err := block.OpenRaw(path, false)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Println("locked")
	_, err = io.Copy(io.Discard, os.Stdin)
	return err
}

// Across processes the error names the holder, and QEMU, which locks
// bytes of the same file, sees our lock too.
func TestImageLockedByAnotherProcess(t *testing.T) {
	raw := filepath.Join(t.TempDir(), "disk.raw")
	require.NoError(t, os.WriteFile(raw, make([]byte, 1<<20), 0o644))
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), lockEnv+"="+raw)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)

	_, err = block.OpenRaw(raw, true)
	require.ErrorIs(t, err, block.ErrLocked)
	assert.Contains(t, err.Error(), raw)
	assert.Contains(t, err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid))

	out, err := exec.Command(hosttools.Require(t, "qemu-img"), "convert", "-f", "raw", "-O", "raw", raw, raw+".copy").CombinedOutput()
	require.Error(t, err, "qemu-img opened an image we write:\n%s", out)
	assert.True(t, strings.Contains(string(out), "lock"), "qemu-img says why: %s", out)

	stdin.Close()
	require.NoError(t, cmd.Wait())
	d, err := block.OpenRaw(raw, false)
	require.NoError(t, err, "the lock ended with the process")
	d.Close()
}

// An image handed over as an open descriptor: its disk holds its own
// duplicate (the caller's may close), is locked as a path's open would
// be, and a read-only descriptor is refused for a writable disk.
func TestOpenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk.raw")
	require.NoError(t, os.WriteFile(p, make([]byte, 1<<20), 0o644))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	d, err := block.OpenFile(f, block.Options{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	assert.Equal(t, uint64(1<<20), d.Size())
	_, err = d.WriteAt([]byte("kept"), 0)
	require.NoError(t, err, "the caller's close leaves the disk's own descriptor")
	_, err = block.Open(p, block.Options{})
	assert.ErrorIs(t, err, block.ErrLocked, "locked as a path's open")
	require.NoError(t, d.Close())
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	assert.Equal(t, "kept", string(b[:4]))

	ro, err := os.Open(p)
	require.NoError(t, err)
	defer ro.Close()
	_, err = block.OpenFile(ro, block.Options{})
	assert.ErrorContains(t, err, "the descriptor is read-only")
	d, err = block.OpenFile(ro, block.Options{ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, d.Close())
	_, err = block.OpenFile(ro, block.Options{Format: block.FormatQcow2, ReadOnly: true})
	assert.ErrorIs(t, err, block.ErrQcow2Unsupported)
}
