// Package importer is CDI's importer (cmd/cdi-importer): it fills a PVC
// from an http(s) URL, or with a blank image. An http image is raw or
// qcow2, either possibly gz or xz compressed; it is downloaded
// (decompressed on the way, its checksum taken over the bytes as served)
// into the scratch directory, then written as raw into disk.img on a
// Filesystem PVC or onto a Block PVC's device, zero blocks skipped (a
// file stays sparse). Nothing larger than the PVC's usable size is
// written: an image that does not fit is refused, saying so. The qcow2
// image is read by vmm/block's reader; backing files are refused (an
// image from the network cannot name a file here).
package importer

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/md5"  //nolint:gosec // a checksum algorithm CDI's checksum field names, not a security boundary
	"crypto/sha1" //nolint:gosec // likewise
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/block"
)

// DiskImage is the image's name on a Filesystem PVC.
const DiskImage = "disk.img"

// chunk is the unit of copying and of zero detection.
const chunk = 1 << 20

// Options are one import's.
type Options struct {
	// Source is "http", "registry" or "none" (blank).
	Source, URL string
	// Registry is a registry source's.
	Registry RegistryOptions
	// Checksum is "algorithm:hex" ("" for none).
	Checksum string
	// Size is the PVC's requested size in bytes; Overhead the share of a
	// Filesystem PVC kept for the filesystem.
	Size     int64
	Overhead float64
	// Headers are "Name: value" lines sent with the request.
	Headers              []string
	AccessKey, SecretKey string
	// CAs are PEM certificates trusted besides the system's.
	CAs [][]byte
	// DataDir, BlockPath and ScratchDir are where the PVC and the scratch
	// space are (a Block PVC when BlockPath exists).
	DataDir, BlockPath, ScratchDir string
	// Progress, if set, counts the share of the download done, in percent.
	Progress *Progress
}

// Progress is the share of an import done, in percent.
type Progress struct{ bits atomic.Uint64 }

// Set records p percent.
func (p *Progress) Set(v float64) { p.bits.Store(uint64(v * 1000)) }

// Get is the percentage recorded.
func (p *Progress) Get() float64 { return float64(p.bits.Load()) / 1000 }

// Run does the import.
func Run(ctx context.Context, o Options) error {
	t, err := openTarget(o)
	if err != nil {
		return err
	}
	defer func() { _ = t.f.Close() }() // closed after Sync below on success
	switch o.Source {
	case "none":
		if t.block {
			return nil // a new volume reads as zeros
		}
		// A blank image: the whole usable size, sparse.
		size := t.usable / chunk * chunk
		if err := t.f.Truncate(size); err != nil {
			return fmt.Errorf("sizing blank %s to %d bytes: %w", t.f.Name(), size, err)
		}
		return t.f.Sync()
	case "http", SourceRegistry:
	default:
		return fmt.Errorf("unknown source %q (want http, registry or none)", o.Source)
	}
	img, done, err := fetch(ctx, o)
	if err != nil {
		return err
	}
	defer done()
	src, err := openImage(img, o.URL)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	if int64(src.Size()) > t.usable {
		return fmt.Errorf("no space: the image from %s is %d bytes, more than the %d bytes usable on the PVC", o.URL, src.Size(), t.usable)
	}
	if err := copySparse(t, src, o.URL); err != nil {
		return err
	}
	if !t.block {
		if err := t.f.Truncate(int64(src.Size())); err != nil {
			return fmt.Errorf("sizing %s: %w", t.f.Name(), err)
		}
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", t.f.Name(), err)
	}
	if o.Progress != nil {
		o.Progress.Set(100)
	}
	return nil
}

// target is where the image goes and how much of it may be used.
type target struct {
	f      *os.File
	block  bool
	usable int64
}

func openTarget(o Options) (*target, error) {
	if st, err := os.Stat(o.BlockPath); err == nil && st.Mode()&os.ModeDevice != 0 {
		f, err := os.OpenFile(o.BlockPath, os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("opening the PVC's device: %w", err)
		}
		n, err := f.Seek(0, io.SeekEnd)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("sizing the PVC's device: %w", err)
		}
		return &target{f: f, block: true, usable: n}, nil
	}
	usable := int64(float64(o.Size)*(1-o.Overhead)) / 512 * 512
	path := filepath.Join(o.DataDir, DiskImage)
	_ = os.Remove(path) // a previous attempt's: its space counts as free
	var fs unix.Statfs_t
	if err := unix.Statfs(o.DataDir, &fs); err != nil {
		return nil, fmt.Errorf("the PVC at %s: %w", o.DataDir, err)
	}
	if free := int64(fs.Bavail) * fs.Bsize; free < usable { //nolint:gosec // block counts fit int64
		usable = free / 512 * 512
	}
	if usable <= 0 {
		return nil, fmt.Errorf("no space: the PVC at %s has no usable space (requested %d bytes, overhead %g)", o.DataDir, o.Size, o.Overhead)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	return &target{f: f, usable: usable}, nil
}

// download fetches the image into the scratch directory, decompressed,
// checking the checksum of the bytes as served; it returns the file.
func download(ctx context.Context, o Options) (string, error) {
	want, sum, err := parseChecksum(o.Checksum)
	if err != nil {
		return "", err
	}
	client, err := httpClient(o.CAs)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL, nil)
	if err != nil {
		return "", fmt.Errorf("source URL %q: %w", o.URL, err)
	}
	for _, h := range o.Headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return "", fmt.Errorf("extra header %q: want \"Name: value\"", h)
		}
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if o.AccessKey != "" || o.SecretKey != "" {
		req.SetBasicAuth(o.AccessKey, o.SecretKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", o.URL, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %s", o.URL, resp.Status)
	}
	var body io.Reader = &counting{r: resp.Body, total: resp.ContentLength, p: o.Progress}
	if sum != nil {
		body = io.TeeReader(body, sum)
	}
	img, err := decompress(body, o.URL)
	if err != nil {
		return "", err
	}
	path := filepath.Join(o.ScratchDir, "image")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return "", fmt.Errorf("creating the scratch image: %w", err)
	}
	n, err := writeSparse(f, img)
	if err == nil {
		err = f.Truncate(n)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		if errors.Is(err, unix.ENOSPC) {
			return "", fmt.Errorf("no space on the scratch PVC for the image from %s: %w", o.URL, err)
		}
		return "", fmt.Errorf("downloading %s: %w", o.URL, err)
	}
	if sum != nil {
		// The rest of the body (a compressed stream's trailer) counts.
		if _, err := io.Copy(io.Discard, body); err != nil {
			_ = os.Remove(path)
			return "", fmt.Errorf("downloading %s: %w", o.URL, err)
		}
		if got := hex.EncodeToString(sum.Sum(nil)); got != want {
			_ = os.Remove(path)
			return "", fmt.Errorf("checksum mismatch: %s of %s is %s, want %s", strings.Split(o.Checksum, ":")[0], o.URL, got, want)
		}
	}
	return path, nil
}

func parseChecksum(s string) (string, hash.Hash, error) {
	if s == "" {
		return "", nil, nil
	}
	alg, want, ok := strings.Cut(s, ":")
	if !ok || want == "" {
		return "", nil, fmt.Errorf("checksum %q: want algorithm:hex", s)
	}
	var h hash.Hash
	switch alg {
	case "md5":
		h = md5.New() //nolint:gosec // see the import
	case "sha1":
		h = sha1.New() //nolint:gosec // see the import
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return "", nil, fmt.Errorf("checksum %q: unknown algorithm %q (md5, sha1, sha256, sha512)", s, alg)
	}
	return strings.ToLower(want), h, nil
}

func httpClient(cas [][]byte) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if len(cas) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		for _, pem := range cas {
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("certConfigMap: a value holds no PEM certificate")
			}
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	// No overall timeout: a large image takes long. A stalled server is
	// cut by the response header timeout and the kubelet's restarts.
	tr.ResponseHeaderTimeout = time.Minute
	return &http.Client{Transport: tr}, nil
}

// counting counts the bytes read into a progress.
type counting struct {
	r     io.Reader
	n     int64
	total int64
	p     *Progress
}

func (c *counting) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.p != nil && c.total > 0 {
		// 100 only once the image is written.
		c.p.Set(min(99.99, float64(c.n)*100/float64(c.total)))
	}
	return n, err
}

var (
	gzipMagic  = []byte{0x1f, 0x8b}
	xzMagic    = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}
)

// decompress is r decompressed if it is gz or xz, else r.
func decompress(r io.Reader, url string) (io.Reader, error) {
	head := make([]byte, 6)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("the image from %s is empty", url)
		}
		return nil, fmt.Errorf("downloading %s: %w", url, err)
	}
	head = head[:n]
	all := io.MultiReader(bytes.NewReader(head), r)
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		z, err := gzip.NewReader(all)
		if err != nil {
			return nil, fmt.Errorf("the gz image from %s: %w", url, err)
		}
		return named{z, "gz", url}, nil
	case bytes.HasPrefix(head, xzMagic):
		z, err := xz.NewReader(all)
		if err != nil {
			return nil, fmt.Errorf("the xz image from %s: %w", url, err)
		}
		return named{z, "xz", url}, nil
	}
	return all, nil
}

// named says which stream failed.
type named struct {
	r         io.Reader
	kind, url string
}

func (n named) Read(b []byte) (int, error) {
	c, err := n.r.Read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("the %s image from %s is corrupt: %w", n.kind, n.url, err)
	}
	return c, err
}

// writeSparse copies r into f, skipping the chunks of zeros; it returns
// how many bytes r had.
func writeSparse(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, chunk)
	var off int64
	for {
		n, err := fill(r, buf)
		if n > 0 && !allZero(buf[:n]) {
			if _, werr := f.WriteAt(buf[:n], off); werr != nil {
				return off, werr
			}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// fill reads r until buf is full or r ends (io.EOF). Unlike io.ReadFull
// it passes a reader's own io.ErrUnexpectedEOF (a truncated compressed
// stream) on as the error it is.
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// openImage opens the downloaded image: qcow2 by its magic, else raw.
func openImage(path, url string) (block.Disk, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the downloaded image: %w", err)
	}
	head := make([]byte, 4)
	_, rerr := io.ReadFull(f, head)
	_ = f.Close() // read only
	if rerr == nil && bytes.Equal(head, qcow2Magic) {
		b := make([]byte, 1<<16)
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("opening the downloaded image: %w", err)
		}
		n, _ := io.ReadFull(f, b)
		st, serr := f.Stat()
		_ = f.Close() // read only
		if serr != nil {
			return nil, fmt.Errorf("the downloaded image: %w", serr)
		}
		h, err := block.ParseQcow2Header(b[:n], st.Size())
		if err != nil {
			return nil, fmt.Errorf("the qcow2 image from %s: %w", url, err)
		}
		if h.BackingFile != "" {
			return nil, fmt.Errorf("the qcow2 image from %s names a backing file (%s): only standalone images can be imported", url, h.BackingFile)
		}
		q, err := block.OpenQcow2(path, true)
		if err != nil {
			return nil, fmt.Errorf("the qcow2 image from %s: %w", url, err)
		}
		return q, nil
	}
	d, err := block.OpenRaw(path, true)
	if err != nil {
		return nil, fmt.Errorf("the raw image from %s: %w", url, err)
	}
	return d, nil
}

// copySparse writes src onto t: a file's zero chunks are skipped (they
// read as zeros), a device's are zeroed (they may hold old data).
func copySparse(t *target, src block.Disk, url string) error {
	buf := make([]byte, chunk)
	size := int64(src.Size())
	for off := int64(0); off < size; off += chunk {
		n := min(chunk, size-off)
		if _, err := src.ReadAt(buf[:n], off); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading the image from %s at %d: %w", url, off, err)
		}
		if !t.block && allZero(buf[:n]) {
			continue
		}
		if _, err := t.f.WriteAt(buf[:n], off); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return fmt.Errorf("no space left on the PVC writing the image from %s: %w", url, err)
			}
			return fmt.Errorf("writing the image at %d: %w", off, err)
		}
	}
	return nil
}
