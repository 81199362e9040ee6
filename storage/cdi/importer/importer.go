// Package importer is CDI's importer (cmd/cdi-importer): it fills a PVC
// from an http(s) URL, or with a blank image. An http image is raw or
// qcow2, either possibly gz or xz compressed; its checksum is taken over
// the bytes as served. A raw image (decompressed on the way) is written
// as it arrives into disk.img on a Filesystem PVC or onto a Block PVC's
// device, zero blocks skipped (a file stays sparse). Nothing larger than
// the PVC's usable size is written: an image that does not fit is
// refused, saying so. A qcow2 image is read by vmm/block's reader;
// backing files are refused (an image from the network cannot name a
// file here).
//
// disk.img is then grown, sparse, to the PVC's usable size (its size less
// CDIConfig's filesystem overhead, at most the free space, in whole MiB),
// as CDI resizes an imported image, so that a VM sees the size the user
// asked for. A Block PVC's image is the device, whatever its size.
//
// A qcow2 image must be read at random (its tables may follow its data).
// Where the server serves ranges of it as it is (Accept-Ranges, a known
// length, not compressed) and no checksum asks for every byte, it is
// read in place with range requests, as upstream reads one through
// nbdkit: its tables and data clusters only, no scratch space. Else it
// arrives as a stream and is first written whole into the scratch PVC
// mounted at ScratchDir: scratch space only where it is needed, as
// upstream's data processor decides. An importer started without scratch
// space (Options.ScratchDir "") that needs some returns
// ErrScratchRequired; cmd/cdi-importer then ends with
// ScratchRequiredMessage and the import controller starts it again with
// a scratch PVC. A source other than http writes its image (raw or
// qcow2, decompressed) to a file under ScratchDir and calls WriteImage,
// which converts it onto the PVC and grows it as above.
//
// The conversion reads the image's allocation (qcow2 L1/L2 tables, a raw
// file's holes) so that holes and zero clusters are skipped unread, and
// copies the data in pieces of up to copyPiece bytes with copyWorkers
// writes in flight, as qemu-img convert does with -m.
package importer

import (
	"bufio"
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/ulikunitz/xz"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/storage/cdi/sparse"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// DiskImage is the image's name on a Filesystem PVC.
const DiskImage = "disk.img"

// chunk is the unit of streaming and of zero detection in a stream.
const chunk = sparse.Chunk

const (
	// copyPiece is the largest read and write of a conversion.
	copyPiece = 4 << 20
	// copyWorkers is how many pieces are read and written at once: a
	// write waits on the page cache or the disk, another goes on.
	copyWorkers = 4
)

// ErrScratchRequired is Run's error when the image must be converted
// through scratch space and Options.ScratchDir is "".
var ErrScratchRequired = errors.New("scratch space required")

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
	// space are (a Block PVC when BlockPath exists; no scratch space when
	// ScratchDir is "").
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
		if err := t.f.Truncate(t.grown()); err != nil {
			return fmt.Errorf("sizing blank %s to %d bytes: %w", t.f.Name(), t.grown(), err)
		}
		return t.f.Sync()
	case "http", SourceRegistry:
	default:
		return fmt.Errorf("unknown source %q (want http, registry or none)", o.Source)
	}
	if o.Source == SourceRegistry {
		// An image's layers are streamed, never read in place: the disk
		// goes onto scratch (pod) or is read where the node put it (node).
		img, done, err := fetchRegistry(ctx, o)
		if err != nil {
			return err
		}
		defer done()
		return t.write(img, o.URL, o.Progress)
	}
	if err := t.fetch(ctx, o); err != nil {
		if !t.block {
			_ = os.Remove(t.f.Name()) // a partial image must not look like one
		}
		return err
	}
	return nil
}

// WriteImage writes the raw or qcow2 image at path (a file in the scratch
// directory) onto o's PVC, as Run does with a download: converted to
// raw, sparse, disk.img grown to the usable size. from names the image's
// source in errors.
func WriteImage(o Options, path, from string) error {
	t, err := openTarget(o)
	if err != nil {
		return err
	}
	defer func() { _ = t.f.Close() }() // closed after Sync on success
	return t.write(path, from, o.Progress)
}

// write converts the image at path onto t and syncs it.
func (t *target) write(path, from string, p *Progress) error {
	src, err := openImage(path, from)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	return t.convert(src, from, p)
}

// convert writes src onto t, grows and syncs it.
func (t *target) convert(src block.Disk, from string, p *Progress) error {
	if int64(src.Size()) > t.usable {
		return fmt.Errorf("no space: the image from %s is %d bytes, more than the %d bytes usable on the PVC", from, src.Size(), t.usable)
	}
	if err := copySparse(t, src, from); err != nil {
		return err
	}
	return t.finish(int64(src.Size()), p)
}

// finish grows disk.img past the n bytes of the image written and syncs
// it.
func (t *target) finish(n int64, p *Progress) error {
	if !t.block {
		// Grown as CDI resizes: the guest sees the size asked for.
		if err := t.f.Truncate(max(n, t.grown())); err != nil {
			return fmt.Errorf("sizing %s: %w", t.f.Name(), err)
		}
	}
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", t.f.Name(), err)
	}
	if p != nil {
		p.Set(100)
	}
	return nil
}

// target is where the image goes and how much of it may be used.
type target struct {
	f      *os.File
	block  bool
	usable int64
}

// grown is the size of a Filesystem PVC's disk.img: the usable size in
// whole MiB (500Mi less 6% is 470Mi).
func (t *target) grown() int64 { return t.usable / chunk * chunk }

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

// fetch downloads the image, decompressed, checking the checksum of the
// bytes as served: a raw image straight onto t, a qcow2 one into the
// scratch directory and then converted onto t.
func (t *target) fetch(ctx context.Context, o Options) error {
	want, sum, err := parseChecksum(o.Checksum)
	if err != nil {
		return err
	}
	resp, err := get(ctx, o)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	var body io.Reader = &counting{r: resp.Body, total: resp.ContentLength, p: o.Progress}
	if sum != nil {
		body = io.TeeReader(body, sum)
	}
	dec, err := decompress(body, o.URL)
	if err != nil {
		return err
	}
	img := bufio.NewReaderSize(dec, chunk)
	head, _ := img.Peek(len(qcow2Magic))
	qcow2 := bytes.Equal(head, qcow2Magic)
	if _, compressed := dec.(named); qcow2 && !compressed && inPlace(resp, sum) {
		// Read where it is, as upstream's nbdkit does: no scratch space,
		// and only the image's tables and data cross the network.
		_ = resp.Body.Close()
		return t.writeInPlace(ctx, o, resp.ContentLength)
	}
	// The rest of the body (a compressed stream's trailer) counts.
	check := func() error {
		if sum == nil {
			return nil
		}
		if _, err := io.Copy(io.Discard, body); err != nil {
			return fmt.Errorf("downloading %s: %w", o.URL, err)
		}
		if got := hex.EncodeToString(sum.Sum(nil)); got != want {
			return fmt.Errorf("checksum mismatch: %s of %s is %s, want %s", strings.Split(o.Checksum, ":")[0], o.URL, got, want)
		}
		return nil
	}
	if !qcow2 {
		// Raw: nothing to convert, so no scratch space.
		n, err := sparse.Copy(t.f, img, !t.block, t.usable)
		switch {
		case errors.Is(err, sparse.ErrTooLarge):
			return fmt.Errorf("no space: the image from %s is larger than the %d bytes usable on the PVC", o.URL, t.usable)
		case errors.Is(err, unix.ENOSPC):
			return fmt.Errorf("no space left on the PVC writing the image from %s: %w", o.URL, err)
		case err != nil:
			return fmt.Errorf("downloading %s: %w", o.URL, err)
		}
		if err := check(); err != nil {
			return err
		}
		return t.finish(n, o.Progress)
	}
	if o.ScratchDir == "" {
		return fmt.Errorf("the qcow2 image from %s is converted through scratch space: %w", o.URL, ErrScratchRequired)
	}
	path := filepath.Join(o.ScratchDir, "image")
	defer func() { _ = os.Remove(path) }()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return fmt.Errorf("creating the scratch image: %w", err)
	}
	n, err := sparse.Copy(f, img, true, -1)
	if err == nil {
		err = f.Truncate(n)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("no space on the scratch PVC for the image from %s: %w", o.URL, err)
		}
		return fmt.Errorf("downloading %s: %w", o.URL, err)
	}
	if err := check(); err != nil {
		return err
	}
	return t.write(path, o.URL, o.Progress)
}

// get requests o's URL with its headers, credentials and CAs.
func get(ctx context.Context, o Options) (*http.Response, error) {
	client, err := httpClient(o.CAs)
	if err != nil {
		return nil, err
	}
	return getRange(ctx, client, o, "")
}

// getRange requests o's URL, the byte range rng ("first-last") of it if
// not "": the answer must be the whole image (200) or that range (206).
func getRange(ctx context.Context, client *http.Client, o Options, rng string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("source URL %q: %w", o.URL, err)
	}
	for _, h := range o.Headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return nil, fmt.Errorf("extra header %q: want \"Name: value\"", h)
		}
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if o.AccessKey != "" || o.SecretKey != "" {
		req.SetBasicAuth(o.AccessKey, o.SecretKey)
	}
	want := http.StatusOK
	if rng != "" {
		req.Header.Set("Range", "bytes="+rng)
		want = http.StatusPartialContent
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", o.URL, err)
	}
	if resp.StatusCode != want {
		_ = resp.Body.Close()
		if rng != "" {
			return nil, fmt.Errorf("GET %s bytes %s: HTTP %s", o.URL, rng, resp.Status)
		}
		return nil, fmt.Errorf("GET %s: HTTP %s", o.URL, resp.Status)
	}
	return resp, nil
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

// checkQcow2 refuses a qcow2 image whose header (head, of a size-byte
// file) is bad or names a backing file.
func checkQcow2(head []byte, size int64, url string) error {
	h, err := block.ParseQcow2Header(head, size)
	if err != nil {
		return fmt.Errorf("the qcow2 image from %s: %w", url, err)
	}
	if h.BackingFile != "" {
		return fmt.Errorf("the qcow2 image from %s names a backing file (%s): only standalone images can be imported", url, h.BackingFile)
	}
	return nil
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
		if err := checkQcow2(b[:n], st.Size(), url); err != nil {
			return nil, err
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

// statuser is an image that says where its data and zeros are
// (block.Qcow2 and block.Raw).
type statuser interface {
	Status(off, n int64) (data bool, length int64, err error)
}

// copySparse writes src onto t: its data read and written in pieces by
// copyWorkers goroutines, each at its offset; its zero runs skipped
// unread on a file (they read as zeros) and zeroed on a device (it may
// hold old data). A data piece that is all zeros is skipped on a file
// too.
func copySparse(t *target, src block.Disk, from string) error {
	st, ok := src.(statuser)
	if !ok {
		return fmt.Errorf("the image from %s: %T cannot say where its data is", from, src)
	}
	type piece struct {
		off, n int64
		data   bool
	}
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		stop  = make(chan struct{})
		work  = make(chan piece)
	)
	fail := func(err error) { once.Do(func() { first = err; close(stop) }) }
	for range copyWorkers {
		wg.Go(func() {
			buf := make([]byte, copyPiece)
			for p := range work {
				if err := t.copyPiece(src, buf[:p.n], p.off, p.data, from); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	err := func() error {
		size := int64(src.Size()) //nolint:gosec // an image's size fits int64
		for off := int64(0); off < size; {
			data, n, err := st.Status(off, size-off)
			if err != nil {
				return fmt.Errorf("reading the image from %s at %d: %w", from, off, err)
			}
			if n <= 0 {
				return fmt.Errorf("reading the image from %s at %d: no allocation status", from, off)
			}
			if !data && !t.block {
				off += n
				continue
			}
			end := off + n
			for p := off; p < end; p += copyPiece {
				select {
				case work <- piece{p, min(copyPiece, end-p), data}:
				case <-stop:
					return nil
				}
			}
			off = end
		}
		return nil
	}()
	close(work)
	wg.Wait()
	if err != nil {
		return err
	}
	return first
}

// copyPiece writes the len(buf) bytes of src at off onto t: read if data,
// else zeros.
func (t *target) copyPiece(src block.Disk, buf []byte, off int64, data bool, from string) error {
	if data {
		if _, err := src.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("reading the image from %s at %d: %w", from, off, err)
		}
		if !t.block && sparse.AllZero(buf) {
			return nil
		}
	} else {
		clear(buf)
	}
	if _, err := t.f.WriteAt(buf, off); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("no space left on the PVC writing the image from %s: %w", from, err)
		}
		return fmt.Errorf("writing the image at %d: %w", off, err)
	}
	return nil
}
