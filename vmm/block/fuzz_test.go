package block

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// memFile is an image file in memory, bounded so a fuzzed image can't make
// the writer allocate without end.
type memFile struct{ b []byte }

const memFileMax = 64 << 20

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > memFileMax {
		return 0, errors.New("memFile: write out of bounds")
	}
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memFile) Sync() error  { return nil }
func (m *memFile) Close() error { return nil }

// errNoBacking is what the fuzzer's backing-file opener answers.
var errNoBacking = errors.New("no backing files in the fuzzer")

// FuzzQcow2 opens arbitrary bytes as a qcow2 image, reads and writes a
// little: errors are fine, panics and runaway allocations are not.
func FuzzQcow2(f *testing.F) {
	if qi, err := exec.LookPath("qemu-img"); err == nil {
		dir := f.TempDir()
		for i, opts := range []string{"compat=1.1,cluster_size=512", "compat=0.10,cluster_size=4096"} {
			p := filepath.Join(dir, "seed.qcow2")
			if exec.Command(qi, "create", "-q", "-f", "qcow2", "-o", opts, p, "1M").Run() == nil {
				if b, err := os.ReadFile(p); err == nil {
					f.Add(b, uint32(i*4096), uint16(600))
				}
			}
		}
		// Compressed clusters (convert -c) reach the inflater.
		raw, p := filepath.Join(dir, "seed.raw"), filepath.Join(dir, "seed-c.qcow2")
		if os.WriteFile(raw, []byte("compressible compressible compressible"), 0o600) == nil &&
			exec.Command(qi, "convert", "-c", "-f", "raw", "-O", "qcow2", "-o", "cluster_size=4096", raw, p).Run() == nil {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b, uint32(0), uint16(512))
			}
		}
		// An image naming a backing file reaches the opener.
		p = filepath.Join(dir, "overlay.qcow2")
		if exec.Command(qi, "create", "-q", "-f", "qcow2", "-u", "-b", "base.raw", "-F", "raw", p, "1M").Run() == nil {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b, uint32(0), uint16(512))
			}
		}
	}
	f.Add([]byte("QFI\xfb\x00\x00\x00\x03"), uint32(0), uint16(512))
	f.Fuzz(func(t *testing.T, data []byte, off uint32, n uint16) {
		for _, ro := range []bool{true, false} {
			m := &memFile{b: append([]byte(nil), data...)}
			q, err := newQcow2(m, "fuzz", int64(len(m.b)), ro, func(string, string) (Disk, error) {
				return nil, errNoBacking
			})
			if err != nil {
				// A header naming a backing file reaches the opener, whose
				// error must come back wrapped, not replaced.
				if !errors.Is(err, ErrQcow2Corrupt) && !errors.Is(err, ErrQcow2Unsupported) && !errors.Is(err, errNoBacking) {
					t.Fatalf("unclassified error: %v", err)
				}
				continue
			}
			buf := make([]byte, n)
			q.ReadAt(buf, int64(off))
			q.Status(int64(off), int64(n)+1)
			if !ro {
				q.WriteAt(buf, int64(off))
				q.ReadAt(buf, int64(off))
			}
		}
	})
}
