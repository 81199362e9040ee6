package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

// The import section: CDI's http import of a qcow2 image by the code
// cdi-importer runs (importer.Run: read in place with range requests, or
// from a server without ranges downloaded onto the scratch directory
// first, and converted through vmm/block's qcow2 reader into a sparse
// disk.img), from an HTTP server on loopback, against `qemu-img convert
// -O raw` of the same file on the same machine.

const (
	importSize = 1 << 30 // the image's virtual size
	importRuns = 3
	// importStripe: the image alternates data and zeros in stripes this
	// large, half of each: what a used disk looks like to a converter
	// (allocated clusters, holes), not one run of each.
	importStripe = 4 << 20
)

type importSection struct {
	ours, scratch, theirs []time.Duration
	allocated             int64 // qcow2 file size
	err                   error
}

func (e *env) importSection(ctx context.Context) importSection {
	var s importSection
	s.err = func() error {
		qemuImg, err := hosttools.Find("qemu-img")
		if err != nil {
			return err
		}
		dir := filepath.Join(e.work, "import")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		log("import: making a %d MiB qcow2 image", importSize>>20)
		raw := filepath.Join(dir, "image.raw")
		if err := writeStriped(raw); err != nil {
			return fmt.Errorf("raw image: %w", err)
		}
		qcow := filepath.Join(dir, "image.qcow2")
		if out, err := exec.CommandContext(ctx, qemuImg, "convert", "-f", "raw", "-O", "qcow2", raw, qcow).CombinedOutput(); err != nil {
			return fmt.Errorf("qemu-img convert to qcow2: %w: %s", err, out)
		}
		if err := os.Remove(raw); err != nil {
			return err
		}
		st, err := os.Stat(qcow)
		if err != nil {
			return err
		}
		s.allocated = st.Size()

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/stream/image.qcow2" {
				// No ranges: the importer downloads it onto scratch.
				f, err := os.Open(qcow)
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				defer func() { _ = f.Close() }() // read-only
				_, _ = io.Copy(w, f)
				return
			}
			http.ServeFile(w, r, qcow)
		})}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		url := "http://" + ln.Addr().String() + "/image.qcow2"

		// Both read the qcow2 from the page cache: it was just written.
		theirsOut := filepath.Join(dir, "qemu-img.raw")
		for i := range importRuns {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// One claim per way in, each compared with qemu-img's below.
			inPlace, whole, scratch := filepath.Join(dir, "in-place"), filepath.Join(dir, "whole"), filepath.Join(dir, "scratch")
			for _, d := range []string{inPlace, whole, scratch} {
				if err := os.RemoveAll(d); err != nil {
					return err
				}
				if err := os.Mkdir(d, 0o700); err != nil {
					return err
				}
			}
			for _, run := range []struct {
				url, data string
				to        *[]time.Duration
			}{{url, inPlace, &s.ours}, {strings.Replace(url, "/image", "/stream/image", 1), whole, &s.scratch}} {
				log("import: run %d: cdi-importer from %s", i+1, run.url)
				o := importer.Options{Source: "http", URL: run.url, Size: 2 * importSize, Overhead: 0.06,
					DataDir: run.data, ScratchDir: scratch, BlockPath: filepath.Join(dir, "no-device"), Progress: &importer.Progress{}}
				t0 := time.Now()
				if err := importer.Run(ctx, o); err != nil {
					return fmt.Errorf("importer: %w", err)
				}
				*run.to = append(*run.to, time.Since(t0))
			}

			log("import: run %d: qemu-img convert", i+1)
			_ = os.Remove(theirsOut)
			t0 := time.Now()
			if out, err := exec.CommandContext(ctx, qemuImg, "convert", "-f", "qcow2", "-O", "raw", qcow, theirsOut).CombinedOutput(); err != nil {
				return fmt.Errorf("qemu-img convert to raw: %w: %s", err, out)
			}
			// Durable as the importer's disk.img is before it reports
			// success.
			if err := fsyncFile(theirsOut); err != nil {
				return err
			}
			s.theirs = append(s.theirs, time.Since(t0))
			if i == 0 {
				// What is timed must be a correct import.
				for _, d := range []string{inPlace, whole} {
					if err := samePrefix(filepath.Join(d, importer.DiskImage), theirsOut, importSize); err != nil {
						return fmt.Errorf("%s: %w", filepath.Base(d), err)
					}
				}
			}
		}
		return nil
	}()
	return s
}

// writeStriped writes a sparse raw image of importSize: pseudo-random
// data in every other stripe, holes between.
func writeStriped(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	rng := rand.NewPCG(1, 2)
	buf := make([]byte, importStripe)
	for off := int64(0); off < importSize; off += 2 * importStripe {
		for i := 0; i < len(buf); i += 8 {
			v := rng.Uint64()
			for j := range 8 {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		if _, err := f.WriteAt(buf, off); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := f.Truncate(importSize); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func fsyncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	return f.Close()
}

// samePrefix checks that a and b hold the same first n bytes (disk.img
// is grown past the image's size).
func samePrefix(a, b string, n int64) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer func() { _ = fa.Close() }() // read-only
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer func() { _ = fb.Close() }() // read-only
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); off < n; off += int64(len(ba)) {
		if _, err := io.ReadFull(io.NewSectionReader(fa, off, int64(len(ba))), ba); err != nil {
			return fmt.Errorf("reading %s: %w", a, err)
		}
		if _, err := io.ReadFull(io.NewSectionReader(fb, off, int64(len(bb))), bb); err != nil {
			return fmt.Errorf("reading %s: %w", b, err)
		}
		if !bytes.Equal(ba, bb) {
			return errors.New("the importer's disk.img differs from qemu-img convert's raw image at " + fmt.Sprint(off))
		}
	}
	return nil
}

func (s importSection) render(b *strings.Builder) {
	fmt.Fprintf(b, "## CDI import: a %d MiB qcow2 over http, medians of %d runs\n\n", importSize>>20, importRuns)
	fmt.Fprintf(b, "Method: a raw image of %d MiB, pseudo-random data and holes alternating in %d MiB stripes (half data, half zeros), converted to qcow2 by qemu-img; "+
		"kubevmm imports it as cdi-importer does (importer.Run) from an HTTP server on loopback, two ways: read in place with range requests (the server serves ranges: "+
		"no scratch space, the qcow2's tables read to skip its holes unread, its data copied in 4 MiB pieces with 4 writes in flight), and downloaded whole onto the scratch directory first "+
		"(a server without ranges), each converted through vmm/block's qcow2 reader into a sparse disk.img grown to the claim's usable size and synced; "+
		"against `qemu-img convert -f qcow2 -O raw` of the same file (no download), its output then fsynced, as the importer syncs disk.img before it reports success. "+
		"All write to the same filesystem and read the qcow2 from the page cache. "+
		"The first run's outputs are compared byte for byte. "+
		"Throughput is the virtual size over the wall-clock time.\n\n",
		importSize>>20, importStripe>>20)
	if s.err != nil {
		fmt.Fprintf(b, "failed: %s\n\n", oneLine(s.err))
		return
	}
	mibps := func(d time.Duration) string {
		return fmt.Sprintf("%.0f MiB/s (%s)", float64(importSize>>20)/d.Seconds(), fmtD(d))
	}
	ours, scratch, theirs := median(s.ours), median(s.scratch), median(s.theirs)
	fmt.Fprintf(b, "| %d MiB qcow2 (%d MiB allocated) | cdi-importer | qemu-img convert | cdi-importer / qemu-img (time) |\n|---|---|---|---|\n", importSize>>20, s.allocated>>20)
	fmt.Fprintf(b, "| read in place (range requests) | %s | %s | %.2f |\n", mibps(ours), mibps(theirs), ours.Seconds()/theirs.Seconds())
	fmt.Fprintf(b, "| downloaded whole onto scratch, then converted | %s | %s | %.2f |\n", mibps(scratch), mibps(theirs), scratch.Seconds()/theirs.Seconds())
}
