package uploadserver

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"

	"github.com/kubevmm/kubevmm/api/certs"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

const mib = 1 << 20

// rawImage is an 8 MiB image: data at its start, in its middle and at its
// end, zeros elsewhere.
func rawImage(t *testing.T) []byte {
	t.Helper()
	img := make([]byte, 8*mib)
	for _, off := range []int{0, 3*mib + 4096, 8*mib - 512} {
		copy(img[off:], bytes.Repeat([]byte(fmt.Sprintf("kubevmm@%d ", off)), 40))
	}
	return img
}

// qcow2Of converts img with the real qemu-img and returns the qcow2 file
// and what `qemu-img convert -O raw` makes of it.
func qcow2Of(t *testing.T, img []byte, opts ...string) (qcow, raw []byte) {
	t.Helper()
	dir := t.TempDir()
	in, q, out := filepath.Join(dir, "in.raw"), filepath.Join(dir, "img.qcow2"), filepath.Join(dir, "out.raw")
	require.NoError(t, os.WriteFile(in, img, 0o600))
	hosttools.Run(t, "qemu-img", append(append([]string{"convert", "-f", "raw", "-O", "qcow2"}, opts...), in, q)...)
	hosttools.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", q, out)
	qb, err := os.ReadFile(q)
	require.NoError(t, err)
	rb, err := os.ReadFile(out)
	require.NoError(t, err)
	return qb, rb
}

func gz(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err := w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

func xzOf(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	require.NoError(t, err)
	_, err = w.Write(b)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.Bytes()
}

type fixture struct {
	srv  *Server
	http *httptest.Server
	dir  string
	size int64
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	dir := t.TempDir()
	if cfg.Dest == "" {
		cfg.Dest = dir
	}
	if cfg.Size == 0 {
		cfg.Size = 16 * mib
	}
	cfg.ScratchDir = t.TempDir()
	s := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := httptest.NewServer(s.Handler())
	t.Cleanup(h.Close)
	return &fixture{srv: s, http: h, dir: dir, size: cfg.Size}
}

func (f *fixture) post(t *testing.T, path string, body []byte) (int, string) {
	t.Helper()
	resp, err := http.Post(f.http.URL+path, "application/octet-stream", bytes.NewReader(body))
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// requireDisk: disk.img holds want, then zeros up to the usable size in
// whole MiB (grown as CDI resizes an image to its claim).
func (f *fixture) requireDisk(t *testing.T, want []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, DiskImage))
	require.NoError(t, err)
	require.Len(t, b, max(len(want), int(f.size/mib*mib)), "disk.img grown to the usable size")
	require.Equal(t, want, b[:len(want)])
	require.Equal(t, make([]byte, len(b)-len(want)), b[len(want):], "zeros after the image")
}

func (f *fixture) noDisk(t *testing.T) {
	t.Helper()
	for _, n := range []string{DiskImage, DiskImage + ".part"} {
		_, err := os.Stat(filepath.Join(f.dir, n))
		require.ErrorIs(t, err, os.ErrNotExist, n)
	}
	select {
	case <-f.srv.Done:
		t.Fatal("a failed upload marked the server done")
	default:
	}
}

func TestUploadFormats(t *testing.T) {
	img := rawImage(t)
	qcow, qraw := qcow2Of(t, img)
	require.Equal(t, img, qraw)
	// What cloud images ship: zlib-compressed clusters.
	compressed, craw := qcow2Of(t, img, "-c")
	require.Equal(t, img, craw)
	for _, tc := range []struct {
		name string
		body []byte
		want []byte
	}{
		{"raw", img, img},
		{"raw.gz", gz(t, img), img},
		{"raw.xz", xzOf(t, img), img},
		{"qcow2", qcow, qraw},
		{"qcow2.gz", gz(t, qcow), qraw},
		{"qcow2.xz", xzOf(t, qcow), qraw},
		{"qcow2 with compressed clusters", compressed, craw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{})
			code, msg := f.post(t, PathUpload, tc.body)
			require.Equal(t, http.StatusOK, code, msg)
			<-f.srv.Done
			f.requireDisk(t, tc.want)
			// Sparse: the zeros between the three data ranges take no room.
			st, err := os.Stat(filepath.Join(f.dir, DiskImage))
			require.NoError(t, err)
			require.Less(t, st.Sys().(*syscall.Stat_t).Blocks*512, int64(len(tc.want)/2))
			code, _ = f.post(t, PathUpload, tc.body)
			require.Equal(t, http.StatusConflict, code, "an upload after done")
		})
	}
}

func TestUploadAsyncAndForm(t *testing.T) {
	img := rawImage(t)
	qcow, qraw := qcow2Of(t, img)
	form := func(field string) (string, []byte) {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		w, err := mw.CreateFormFile(field, "disk.qcow2")
		require.NoError(t, err)
		_, err = w.Write(qcow)
		require.NoError(t, err)
		require.NoError(t, mw.Close())
		return mw.FormDataContentType(), buf.Bytes()
	}
	for _, path := range []string{PathUploadAsync, PathUploadForm, PathUploadFormAsync} {
		t.Run(path, func(t *testing.T) {
			f := newFixture(t, Config{})
			ct, body := "application/octet-stream", qcow
			if path == PathUploadForm || path == PathUploadFormAsync {
				ct, body = form("file")
			}
			resp, err := http.Post(f.http.URL+path, ct, bytes.NewReader(body))
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			<-f.srv.Done
			f.requireDisk(t, qraw)
		})
	}
	t.Run("async refuses a bad header before answering", func(t *testing.T) {
		f := newFixture(t, Config{Size: 4 * mib})
		code, msg := f.post(t, PathUploadAsync, qcow)
		require.Equal(t, http.StatusBadRequest, code, msg)
		require.Contains(t, msg, "larger than the usable size")
		f.noDisk(t)
	})
	t.Run("form without file", func(t *testing.T) {
		f := newFixture(t, Config{})
		ct, body := form("image")
		resp, err := http.Post(f.http.URL+PathUploadForm, ct, bytes.NewReader(body))
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		f.noDisk(t)
	})
}

func TestUploadRefused(t *testing.T) {
	img := rawImage(t)
	qcow, _ := qcow2Of(t, img)
	corrupt := bytes.Clone(qcow)
	// The L1 table offset (header bytes 40-47) past the file's end.
	copy(corrupt[40:48], []byte{0, 0, 0, 0x7f, 0, 0, 0, 0})
	dir := t.TempDir()
	base := filepath.Join(dir, "base.raw")
	require.NoError(t, os.WriteFile(base, img, 0o600))
	overlay := filepath.Join(dir, "overlay.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-f", "qcow2", "-b", base, "-F", "raw", overlay)
	withBacking, err := os.ReadFile(overlay)
	require.NoError(t, err)
	gzImg := gz(t, img)

	for _, tc := range []struct {
		name string
		body []byte
		size int64
		msg  string
	}{
		{"qcow2 cut short", qcow[:len(qcow)/2], 0, "qcow2"},
		{"corrupt qcow2", corrupt, 0, "qcow2 image"},
		{"qcow2 with a backing file", withBacking, 0, "backing file"},
		{"qcow2 larger than the volume", qcow, 4 * mib, "larger than the usable size"},
		{"raw larger than the volume", img, 4 * mib, "larger than the usable size"},
		{"gzip cut short", gzImg[:len(gzImg)-100], 0, "unexpected EOF"},
		{"gzip corrupt", append(bytes.Clone(gzImg[:20]), bytes.Repeat([]byte{0xff}, 200)...), 0, "reading the image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{Size: tc.size})
			code, msg := f.post(t, PathUpload, tc.body)
			require.Equal(t, http.StatusBadRequest, code, msg)
			require.Contains(t, msg, tc.msg)
			f.noDisk(t)
			// Still ready: a good upload now succeeds.
			code, msg = f.post(t, PathUpload, img[:2*mib])
			require.Equal(t, http.StatusOK, code, msg)
			f.requireDisk(t, img[:2*mib])
		})
	}
}

// TestBodyCutShort: the client (or a proxy) drops the connection halfway:
// no disk.img, the server stays ready and a new upload starts over.
func TestBodyCutShort(t *testing.T) {
	img := rawImage(t)
	for _, block := range []bool{false, true} {
		t.Run(fmt.Sprintf("block=%v", block), func(t *testing.T) {
			cfg := Config{}
			var dev string
			if block {
				dev = filepath.Join(t.TempDir(), "dev")
				require.NoError(t, os.WriteFile(dev, make([]byte, 16*mib), 0o600))
				cfg = Config{Dest: dev, Block: true}
			}
			f := newFixture(t, cfg)
			c, err := net.Dial("tcp", f.http.Listener.Addr().String())
			require.NoError(t, err)
			defer func() { _ = c.Close() }()
			_, err = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", PathUpload, len(img))
			require.NoError(t, err)
			_, err = c.Write(img[:len(img)/2])
			require.NoError(t, err)
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			if !block {
				f.noDisk(t)
			}
			code, msg := f.post(t, PathUpload, img)
			require.Equal(t, http.StatusOK, code, msg)
			<-f.srv.Done
			if block {
				b, err := os.ReadFile(dev)
				require.NoError(t, err)
				require.Equal(t, img, b[:len(img)])
				return
			}
			f.requireDisk(t, img)
		})
	}
}

// TestConcurrentUpload: a second upload while one is streaming gets 503.
func TestConcurrentUpload(t *testing.T) {
	img := rawImage(t)
	f := newFixture(t, Config{})
	started := make(chan struct{})
	f.srv.started = func() { close(started) }
	pr, pw := io.Pipe()
	first := make(chan int)
	go func() {
		resp, err := http.Post(f.http.URL+PathUpload, "application/octet-stream", pr)
		if err != nil {
			first <- 0
			return
		}
		_ = resp.Body.Close()
		first <- resp.StatusCode
	}()
	_, err := pw.Write(img[:1])
	require.NoError(t, err)
	<-started
	code, _ := f.post(t, PathUpload, img)
	require.Equal(t, http.StatusServiceUnavailable, code)
	_, err = pw.Write(img[1:])
	require.NoError(t, err)
	require.NoError(t, pw.Close())
	require.Equal(t, http.StatusOK, <-first)
	f.requireDisk(t, img)
}

// TestClientCertificate: only the proxy's certificate is let in.
func TestClientCertificate(t *testing.T) {
	now := time.Now()
	cfg := certs.Config{Duration: time.Hour, RenewBefore: time.Minute}
	ca, err := certs.NewCA("cdi-uploadserver-ca", cfg, now)
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o600))
		return p
	}
	server, err := certs.NewLeaf(ca, certs.Leaf{CommonName: "cdi-upload-disk.ns.svc", DNSNames: []string{"localhost"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, cfg, now)
	require.NoError(t, err)
	tlsCfg, err := TLSConfig(write("tls.crt", server.Cert), write("tls.key", server.Key), write("ca.crt", ca.Cert))
	require.NoError(t, err)

	f := newFixture(t, Config{ClientName: "cdi-uploadproxy"})
	h := httptest.NewUnstartedServer(f.srv.Handler())
	h.TLS = tlsCfg
	h.StartTLS()
	defer h.Close()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.Cert)
	post := func(client *certs.KeyPair) (int, error) {
		tc := &tls.Config{RootCAs: roots, ServerName: "localhost"}
		if client != nil {
			c, err := tls.X509KeyPair(client.Cert, client.Key)
			require.NoError(t, err)
			tc.Certificates = []tls.Certificate{c}
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		resp, err := hc.Post(h.URL+PathUpload, "application/octet-stream", bytes.NewReader([]byte("x")))
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	other, err := certs.NewLeaf(ca, certs.Leaf{CommonName: "someone", Usages: usage}, cfg, now)
	require.NoError(t, err)
	code, err := post(&other)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, code)
	code, err = post(nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, code, "no client certificate")
	foreignCA, err := certs.NewCA("other", cfg, now)
	require.NoError(t, err)
	foreign, err := certs.NewLeaf(foreignCA, certs.Leaf{CommonName: "cdi-uploadproxy", Usages: usage}, cfg, now)
	require.NoError(t, err)
	code, err = post(&foreign)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, code, "a client certificate of another CA")
	// The kubelet's readiness probe comes without a certificate.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}}
	resp, err := hc.Get(h.URL + PathHealthz)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	proxy, err := certs.NewLeaf(ca, certs.Leaf{CommonName: "cdi-uploadproxy", Usages: usage}, cfg, now)
	require.NoError(t, err)
	code, err = post(&proxy)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
}
