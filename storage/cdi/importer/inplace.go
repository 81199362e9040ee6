package importer

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/kubevmm/kubevmm/vmm/block"
)

// inPlace says whether the image resp is bringing can be read where it
// is, with range requests: the server says it serves ranges of a known
// length, as served (not decoded by the transport), and no checksum asks
// for every byte.
func inPlace(resp *http.Response, sum hash.Hash) bool {
	return sum == nil && resp.ContentLength > 0 && !resp.Uncompressed && resp.Header.Get("Accept-Ranges") == "bytes"
}

// writeInPlace converts the size-byte qcow2 image at o.URL onto t,
// reading its header, tables and data clusters with range requests.
func (t *target) writeInPlace(ctx context.Context, o Options, size int64) error {
	client, err := httpClient(o.CAs)
	if err != nil {
		return err
	}
	r := &ranges{ctx: ctx, client: client, o: o, size: size}
	head := make([]byte, min(size, 1<<16))
	if _, err := r.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := checkQcow2(head, size, o.URL); err != nil {
		return err
	}
	q, err := block.OpenQcow2ReaderAt(r, o.URL, size)
	if err != nil {
		return fmt.Errorf("the qcow2 image from %s: %w", o.URL, err)
	}
	defer func() { _ = q.Close() }()
	return t.convert(q, o.URL, o.Progress)
}

// ranges reads an http image with range requests; the bytes it read count
// into o.Progress against the image's size.
type ranges struct {
	ctx    context.Context //nolint:containedctx // io.ReaderAt has no context
	client *http.Client
	o      Options
	size   int64
	read   atomic.Int64
}

func (r *ranges) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-off)
	resp, err := r.getRange(off, n)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadFull(resp.Body, p[:n])
	if err != nil {
		return got, fmt.Errorf("GET %s bytes %d+%d: %w", r.o.URL, off, n, err)
	}
	if r.o.Progress != nil {
		// 100 only once the image is written.
		r.o.Progress.Set(min(99.99, float64(r.read.Add(n))*100/float64(r.size)))
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// getRange asks for n bytes at off, and checks the server answered with
// those (a server that ignores or moves the range is refused).
func (r *ranges) getRange(off, n int64) (*http.Response, error) {
	rng := strconv.FormatInt(off, 10) + "-" + strconv.FormatInt(off+n-1, 10)
	resp, err := getRange(r.ctx, r.client, r.o, rng)
	if err != nil {
		return nil, err
	}
	if want := "bytes " + rng + "/" + strconv.FormatInt(r.size, 10); resp.Header.Get("Content-Range") != want {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("GET %s bytes %s: the server sent %q, want %q (has the image changed?)", r.o.URL, rng, resp.Header.Get("Content-Range"), want)
	}
	return resp, nil
}
