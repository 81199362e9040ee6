// Package uploadserver is CDI's upload server: it runs in pod
// cdi-upload-<pvc> with the PVC mounted, takes one image from
// cdi-uploadproxy over mutual TLS, and writes it to the PVC: disk.img on
// a Filesystem volume (sparse, grown to the usable size as CDI resizes
// an image to its claim), or the device of a Block volume.
//
// Accepted: raw, qcow2 (converted with vmm/block's reader, which checks
// every table against the file and reads compressed clusters; a backing
// file is refused: it would name a file on this node), each plain, gzip
// or xz compressed. A qcow2 image
// is first received whole into the scratch directory (its tables may
// come after its data), then converted.
//
// States (one upload at a time):
//
//	idle --POST--> uploading --ok--> [async: processing -->] done
//	  ^                |  body cut short, bad image, no room
//	  +----------------+
//
// A failed upload leaves the server idle and ready: the next upload
// starts over from the first byte (no resume). On a Filesystem volume the
// image is written to disk.img.part and renamed to disk.img only once
// complete and synced, so a cut upload never leaves a disk.img; on a Block
// volume the device holds whatever was written until an upload completes.
// What marks an upload done is the server's exit (pod Succeeded), which
// the upload controller records on the PVC. While uploading, another
// upload gets 503; after done, 409 (CDI's codes).
package uploadserver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/ulikunitz/xz"

	"github.com/kubevmm/kubevmm/storage/cdi/sparse"
	"github.com/kubevmm/kubevmm/vmm/block"
)

// Paths, as CDI's upload server serves them (the proxy forwards the path
// the client used).
const (
	PathUpload          = "/v1beta1/upload"
	PathUploadAsync     = "/v1beta1/upload-async"
	PathUploadForm      = "/v1beta1/upload-form"
	PathUploadFormAsync = "/v1beta1/upload-form-async"
	PathHealthz         = "/healthz"
)

// Paths are the upload paths.
var Paths = []string{PathUpload, PathUploadAsync, PathUploadForm, PathUploadFormAsync}

// DiskImage is the image's name on a Filesystem volume.
const DiskImage = "disk.img"

// Config is where and how much to write.
type Config struct {
	// Dest is the device (Block) or the volume's directory (Filesystem).
	Dest  string
	Block bool
	// Size is the usable size: the largest virtual size accepted.
	Size int64
	// ScratchDir receives qcow2 images before conversion.
	ScratchDir string
	// ClientName is the common name the client certificate must carry
	// (cdi-uploadproxy's); empty accepts any the TLS layer verified.
	ClientName string
}

type state int

const (
	idle state = iota
	uploading
	processing
	done
)

// Server is one upload server.
type Server struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	state state
	// Done is closed once the image is written and synced.
	Done chan struct{}
	// Failed gets an async upload's processing error: the client was
	// already answered, so the process ends with it (the pod restarts).
	Failed chan error
	// started, when set, is called as an upload begins (tests).
	started func()
}

// New makes a server.
func New(cfg Config, log *slog.Logger) *Server {
	return &Server{cfg: cfg, log: log, Done: make(chan struct{}), Failed: make(chan error, 1)}
}

// Handler is every route.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "OK") })
	for _, p := range Paths {
		form := p == PathUploadForm || p == PathUploadFormAsync
		async := p == PathUploadAsync || p == PathUploadFormAsync
		mux.HandleFunc("POST "+p, func(w http.ResponseWriter, r *http.Request) { s.upload(w, r, form, async) })
		// CDI's clients probe the async path with HEAD to learn it exists.
		mux.HandleFunc("HEAD "+p, func(http.ResponseWriter, *http.Request) {})
	}
	return mux
}

// badImage is an error in what the client sent (400); other errors are
// the server's (500).
type badImage struct{ error }

func (e badImage) Unwrap() error { return e.error }

func bad(format string, a ...any) error { return badImage{fmt.Errorf(format, a...)} }

func (s *Server) begin(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.ClientName != "" {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || r.TLS.VerifiedChains[0][0].Subject.CommonName != s.cfg.ClientName {
			http.Error(w, "uploads come through cdi-uploadproxy", http.StatusUnauthorized)
			return false
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case uploading, processing:
		http.Error(w, "an upload is in progress", http.StatusServiceUnavailable)
		return false
	case done:
		http.Error(w, "the upload is already done", http.StatusConflict)
		return false
	}
	s.state = uploading
	if s.started != nil {
		s.started()
	}
	return true
}

func (s *Server) setState(st state) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = st
	if st == done {
		close(s.Done)
	}
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request, form, async bool) {
	if !s.begin(w, r) {
		return
	}
	s.log.Info("upload started", "path", r.URL.Path, "contentLength", r.ContentLength)
	fail := func(err error) {
		s.setState(idle)
		code := http.StatusInternalServerError
		if errors.As(err, new(badImage)) {
			code = http.StatusBadRequest
		}
		s.log.Error("upload failed; ready for another", "err", err)
		http.Error(w, "Saving stream failed: "+err.Error(), code)
	}
	body := io.Reader(r.Body)
	if form {
		part, err := filePart(r)
		if err != nil {
			fail(err)
			return
		}
		body = part
	}
	finish, err := s.receive(body)
	if err != nil {
		fail(err)
		return
	}
	if async {
		s.setState(processing)
		go func() {
			if err := finish(); err != nil {
				s.log.Error("processing failed", "err", err)
				s.Failed <- err
				return
			}
			s.log.Info("upload done")
			s.setState(done)
		}()
		return
	}
	if err := finish(); err != nil {
		fail(err)
		return
	}
	s.log.Info("upload done")
	s.setState(done)
}

// filePart is the form's "file" field, streamed.
func filePart(r *http.Request) (io.Reader, error) {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "multipart/form-data" {
		return nil, bad("a form upload is multipart/form-data, not %q", r.Header.Get("Content-Type"))
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, bad("form: %w", err)
	}
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return nil, bad("form: no field \"file\"")
		}
		if err != nil {
			return nil, bad("form: %w", err)
		}
		if p.FormName() == "file" {
			return p, nil
		}
	}
}

var (
	magicGzip  = []byte{0x1f, 0x8b}
	magicXz    = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	magicQcow2 = []byte{'Q', 'F', 'I', 0xfb}
)

// decompress unwraps one layer of gzip or xz.
func decompress(r io.Reader) (*bufio.Reader, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	head, _ := br.Peek(len(magicXz)) // a short image is handled as raw
	var inner io.Reader
	switch {
	case bytes.HasPrefix(head, magicGzip):
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, bad("gzip: %w", err)
		}
		z.Multistream(false)
		inner = z
	case bytes.HasPrefix(head, magicXz):
		z, err := xz.NewReader(br)
		if err != nil {
			return nil, bad("xz: %w", err)
		}
		inner = z
	default:
		return br, nil
	}
	return bufio.NewReaderSize(inner, 1<<20), nil
}

// receive reads the whole image and returns what completes it (conversion,
// sync, rename).
func (s *Server) receive(body io.Reader) (func() error, error) {
	br, err := decompress(&readErr{body})
	if err != nil {
		return nil, err
	}
	head, _ := br.Peek(len(magicQcow2))
	src := &readErr{br} // the decompressor's errors too
	if bytes.Equal(head, magicQcow2) {
		return s.receiveQcow2(src)
	}
	out, err := s.openDest()
	if err != nil {
		return nil, err
	}
	n, err := copySparse(out.f, src, s.cfg.Size, !s.cfg.Block)
	if err != nil {
		out.abort()
		return nil, err
	}
	return func() error { return out.commit(n) }, nil
}

func (s *Server) receiveQcow2(src io.Reader) (func() error, error) {
	path := filepath.Join(s.cfg.ScratchDir, "upload.qcow2")
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("scratch file: %w", err)
	}
	if _, err := io.Copy(f, src); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return nil, err
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("scratch file: %w", err)
	}
	// What the header says is refused now, before an async upload is
	// answered.
	if _, err := s.checkQcow2(path); err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	return func() error {
		defer func() { _ = os.Remove(path) }()
		return s.convertQcow2(path)
	}, nil
}

// checkQcow2 refuses an image whose header is corrupt, names a backing
// file or is larger than the volume.
func (s *Server) checkQcow2(path string) (*block.Qcow2Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scratch file: %w", err)
	}
	first := make([]byte, 1<<16)
	n, err := f.ReadAt(first, 0)
	st, serr := f.Stat()
	_ = f.Close() // read-only
	if err != nil && !errors.Is(err, io.EOF) || serr != nil {
		return nil, fmt.Errorf("scratch file: %w", errors.Join(err, serr))
	}
	h, err := block.ParseQcow2Header(first[:n], st.Size())
	if err != nil {
		return nil, bad("qcow2 image: %w", err)
	}
	if h.BackingFile != "" {
		return nil, bad("qcow2 image has a backing file (%q): upload a standalone image (qemu-img convert)", h.BackingFile)
	}
	if h.Size > uint64(s.cfg.Size) {
		return nil, bad("image virtual size %d is larger than the usable size %d", h.Size, s.cfg.Size)
	}
	return h, nil
}

func (s *Server) convertQcow2(path string) error {
	if _, err := s.checkQcow2(path); err != nil {
		return err
	}
	q, err := block.OpenQcow2(path, true)
	if err != nil {
		return bad("qcow2 image: %w", err)
	}
	defer func() { _ = q.Close() }() // read-only
	out, err := s.openDest()
	if err != nil {
		return err
	}
	if _, err := copySparse(out.f, &readErr{io.NewSectionReader(q, 0, int64(q.Size()))}, int64(q.Size()), !s.cfg.Block); err != nil {
		out.abort()
		return bad("qcow2 image: %w", err)
	}
	return out.commit(int64(q.Size()))
}

// readErr marks the source's errors as the client's: a body cut short, a
// truncated gzip stream, a qcow2 cluster past the file's end.
type readErr struct{ r io.Reader }

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = bad("reading the image: %w", err)
	}
	return n, err
}

// dest is the destination being written.
type dest struct {
	f          *os.File
	part, path string // Filesystem only
	block      bool
	// grow is the size disk.img is grown to, sparse, as CDI resizes an
	// image to its claim: the usable size in whole MiB, so that a VM sees
	// the size the user asked for (the importer's rule).
	grow int64
}

func (s *Server) openDest() (*dest, error) {
	if s.cfg.Block {
		f, err := os.OpenFile(s.cfg.Dest, os.O_WRONLY, 0)
		if err != nil {
			return nil, fmt.Errorf("block volume: %w", err)
		}
		return &dest{f: f, block: true}, nil
	}
	path := filepath.Join(s.cfg.Dest, DiskImage)
	part := path + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o660)
	if err != nil {
		return nil, fmt.Errorf("disk image: %w", err)
	}
	return &dest{f: f, part: part, path: path, grow: s.cfg.Size / sparse.Chunk * sparse.Chunk}, nil
}

func (d *dest) abort() {
	_ = d.f.Close() // the upload failed: what it wrote is dropped
	if !d.block {
		_ = os.Remove(d.part)
	}
}

// commit gives the image its size (grown to d.grow), syncs it and, on a
// filesystem, puts it in place.
func (d *dest) commit(size int64) error {
	err := func() error {
		if !d.block {
			if err := d.f.Truncate(max(size, d.grow)); err != nil {
				return fmt.Errorf("disk image size: %w", err)
			}
		}
		if err := d.f.Sync(); err != nil {
			return fmt.Errorf("syncing the disk: %w", err)
		}
		return nil
	}()
	if cerr := d.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing the disk: %w", cerr)
	}
	if err != nil {
		d.abort()
		return err
	}
	if d.block {
		return nil
	}
	if err := os.Rename(d.part, d.path); err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	dir, err := os.Open(filepath.Dir(d.path))
	if err != nil {
		return fmt.Errorf("disk image directory: %w", err)
	}
	defer func() { _ = dir.Close() }() // read-only
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("syncing the disk image directory: %w", err)
	}
	return nil
}

// copySparse is sparse.Copy, a stream longer than limit being the
// client's error.
func copySparse(w *os.File, src io.Reader, limit int64, skipZeros bool) (int64, error) {
	n, err := sparse.Copy(w, src, skipZeros, limit)
	if errors.Is(err, sparse.ErrTooLarge) {
		return n, bad("image is larger than the usable size %d", limit)
	}
	return n, err
}

// TLSConfig serves with certFile/keyFile and verifies a client
// certificate against the CA in caFile. One is not required at the TLS
// layer (the kubelet's readiness probe has none): uploads check for it.
func TLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("client CA %s: no certificates", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}, nil
}

// Serve runs srv until the upload is done (then it returns nil, once the
// answer is sent), an async upload fails, or ctx ends.
func (s *Server) Serve(ctx context.Context, srv *http.Server) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServeTLS("", "") }()
	var err error
	select {
	case <-s.Done:
	case err = <-s.Failed:
	case err = <-errc:
		return err
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Shutdown waits for the answer to the request that finished it.
	if serr := srv.Shutdown(context.WithoutCancel(ctx)); serr != nil && err == nil {
		err = serr
	}
	return err
}
