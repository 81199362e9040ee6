package block_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// The crash test's writer runs in a child process (this test binary,
// re-executed with crashEnv set) so that it can be killed with SIGKILL.
const crashEnv = "KUBEVMM_TEST_QCOW2_CRASH_WRITER"

// TestMain runs the helper processes of the crash and lock tests.
func TestMain(m *testing.M) {
	for env, helper := range map[string]func(string) error{crashEnv: crashWriter, lockEnv: lockHolder} {
		if arg := os.Getenv(env); arg != "" {
			if err := helper(arg); err != nil {
				fmt.Fprintln(os.Stderr, env, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

const (
	crashBlock  = 4096 // bytes per write, aligned
	crashWrites = 300  // most writes in one round
)

// crashWrite is one write of a round's plan: block index, and whether the
// writer flushes after it.
type crashWrite struct {
	block int
	flush bool
}

// crashPlan is the writes of a round, the same in writer and checker.
func crashPlan(seed uint64, round, blocks int) []crashWrite {
	r := rand.New(rand.NewPCG(seed, uint64(round)))
	plan := make([]crashWrite, crashWrites)
	for i := range plan {
		plan[i] = crashWrite{block: r.IntN(blocks), flush: r.IntN(4) == 0}
	}
	return plan
}

func crashData(seed uint64, round, i int) []byte {
	return randomBytes(crashBlock, seed^uint64(round)<<32^uint64(i)<<12^0x5eed)
}

// crashWriter runs a round's plan on the image and, after each Flush,
// appends to the side file how many writes are now flushed. SIGKILL
// keeps what reached the kernel, so the side file needs no fsync.
func crashWriter(arg string) error {
	var img, side string
	var seed uint64
	var round, blocks int
	if _, err := fmt.Sscanf(arg, "%s %s %d %d %d", &img, &side, &seed, &round, &blocks); err != nil {
		return fmt.Errorf("arguments %q: %w", arg, err)
	}
	d, err := block.OpenQcow2(img, false)
	if err != nil {
		return err
	}
	log, err := os.OpenFile(side, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	for i, w := range crashPlan(seed, round, blocks) {
		if _, err := d.WriteAt(crashData(seed, round, i), int64(w.block*crashBlock)); err != nil {
			return err
		}
		if w.flush {
			if err := d.Flush(); err != nil {
				return err
			}
			if _, err := fmt.Fprintf(log, "%d\n", i+1); err != nil {
				return err
			}
		}
	}
	if err := d.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintf(log, "%d\n", crashWrites)
	return err
}

// flushedWrites reads the side file: how many writes were flushed.
func flushedWrites(t *testing.T, side string) int {
	b, err := os.ReadFile(side)
	require.NoError(t, err)
	lines := strings.Split(string(b), "\n")
	n := 0
	for _, l := range lines[:len(lines)-1] { // the last one may be cut
		if v, err := strconv.Atoi(l); err == nil {
			n = v
		}
	}
	return n
}

// A process writing to a qcow2 image through this package, with flushes,
// killed with SIGKILL at random points: after every kill `qemu-img check`
// finds no corruption (leaked clusters are allowed), and the image holds
// every flushed write, read through this package and through qemu-img.
// Each round carries on with the image the last one left, as a VM
// restarted after a crash would. Small clusters exercise allocation of L2
// tables, refcount blocks and refcount table moves; large ones with a
// backing file exercise copy-on-write of partial clusters.
func TestQcow2SurvivesKill(t *testing.T) {
	const size = 16 << 20
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range []struct {
		name    string
		opts    string
		backing bool
	}{
		{"cluster 512", "cluster_size=512", false},
		{"cluster 64k over a backing file", "cluster_size=65536", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			img := filepath.Join(dir, "disk.qcow2")
			want := make([]byte, size) // what the guest sees before a round
			args := []string{"create", "-q", "-f", "qcow2", "-o", tc.opts}
			if tc.backing {
				want = randomBytes(size, seed)
				base := filepath.Join(dir, "base.raw")
				require.NoError(t, os.WriteFile(base, want, 0o644))
				args = append(args, "-b", base, "-F", "raw")
			}
			hosttools.Run(t, "qemu-img", append(args, img, strconv.Itoa(size))...)
			exe, err := os.Executable()
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(seed, 1))
			leaks, flushedTotal := 0, 0
			for round := range 30 {
				side := filepath.Join(dir, "flushed")
				require.NoError(t, os.WriteFile(side, nil, 0o644))
				cmd := exec.Command(exe)
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d %d %d", crashEnv, img, side, seed, round, size/crashBlock))
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				require.NoError(t, cmd.Start())
				time.Sleep(time.Duration(5+r.IntN(200)) * time.Millisecond)
				cmd.Process.Signal(syscall.SIGKILL)
				err := cmd.Wait()
				var ee *exec.ExitError
				if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != -1) {
					t.Fatalf("round %d: writer failed: %v\n%s", round, err, stderr.String())
				}

				out, err := exec.Command(hosttools.Require(t, "qemu-img"), "check", img).CombinedOutput()
				if err != nil {
					require.ErrorAs(t, err, &ee)
					require.Equal(t, 3, ee.ExitCode(), "round %d: qemu-img check found more than leaks:\n%s", round, out)
					leaks++
				}
				got := readQcow2(t, img)
				raw := filepath.Join(dir, "out.raw")
				hosttools.Run(t, "qemu-img", "convert", "-O", "raw", img, raw)
				qemuGot, err := os.ReadFile(raw)
				require.NoError(t, err)
				require.True(t, bytes.Equal(got, qemuGot), "round %d: qemu-img reads differ from ours", round)
				flushed := flushedWrites(t, side)
				flushedTotal += flushed
				checkCrashRound(t, want, got, seed, round, flushed)
				want = got
			}
			// leaks stay until repaired: this counts the rounds since the first
			t.Logf("%d writes flushed before 30 kills; qemu-img check saw leaks after %d", flushedTotal, leaks)
		})
	}
}

func readQcow2(t *testing.T, img string) []byte {
	d, err := block.OpenQcow2(img, true)
	require.NoError(t, err)
	defer d.Close()
	return readAll(t, d)
}

// checkCrashRound checks every sector after a round killed with flushed
// writes done: it holds its last flushed write (or what it held before
// the round), or the data of a write after that, which may or may not
// have landed.
func checkCrashRound(t *testing.T, before, got []byte, seed uint64, round, flushed int) {
	t.Helper()
	plan := crashPlan(seed, round, len(got)/crashBlock)
	last := map[int]int{}    // block -> its last flushed write
	later := map[int][]int{} // block -> writes after the last flush
	for i, w := range plan {
		if i < flushed {
			last[w.block] = i
		} else {
			later[w.block] = append(later[w.block], i)
		}
	}
	for b := 0; b < len(got)/crashBlock; b++ {
		off := b * crashBlock
		base := before[off : off+crashBlock]
		if i, ok := last[b]; ok {
			base = crashData(seed, round, i)
		}
		var cands [][]byte
		for _, i := range later[b] {
			cands = append(cands, crashData(seed, round, i))
		}
		for s := 0; s < crashBlock; s += block.SectorSize {
			g := got[off+s : off+s+block.SectorSize]
			ok := bytes.Equal(g, base[s:s+block.SectorSize])
			for _, c := range cands {
				ok = ok || bytes.Equal(g, c[s:s+block.SectorSize])
			}
			if !ok {
				_, flushedHere := last[b]
				assert.Failf(t, "lost write", "round %d: sector at %#x holds neither its flushed contents (flushed write here: %v) nor a later write", round, off+s, flushedHere)
				return
			}
		}
	}
}
