package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/test/registrytest"
)

// diskFile writes n random bytes to a file in the test's directory.
func diskFile(t *testing.T, n int) (*os.File, []byte) {
	t.Helper()
	b := make([]byte, n)
	_, _ = rand.Read(b)
	p := filepath.Join(t.TempDir(), "src.qcow2")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	f, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f, b
}

func readDisk(t *testing.T, c *Client, ref Ref) (string, []byte, error) {
	t.Helper()
	var name string
	var got []byte
	err := c.Disk(context.Background(), ref, func(n string, size int64, r io.Reader) error {
		name = n
		b, err := io.ReadAll(r)
		if err == nil && int64(len(b)) != size {
			err = fmt.Errorf("read %d bytes, header says %d", len(b), size)
		}
		got = b
		return err
	})
	return name, got, err
}

func mustRef(t *testing.T, s string) Ref {
	t.Helper()
	r, err := ParseURL(s)
	require.NoError(t, err)
	return r
}

func TestPushDigestDisk(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	c, err := New(Options{CAs: [][]byte{reg.CA}})
	require.NoError(t, err)
	ctx := context.Background()
	src, want := diskFile(t, 3<<20+17)
	ref := mustRef(t, "docker://"+reg.Addr+"/kubevmm/disk:v1")

	pushed, err := c.PushContainerDisk(ctx, ref, "disk.qcow2", src)
	require.NoError(t, err)
	d, err := c.Digest(ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, pushed, d, "the tag's digest is the pushed manifest's")

	name, got, err := readDisk(t, c, ref)
	require.NoError(t, err)
	assert.Equal(t, "disk.qcow2", name)
	assert.True(t, bytes.Equal(want, got), "disk bytes differ")

	// By digest, the same image.
	byDigest := mustRef(t, "docker://"+reg.Addr+"/kubevmm/disk@"+d)
	_, got, err = readDisk(t, c, byDigest)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got))

	// The layer is what KubeVirt's containerDisk asks: disk/ and the file,
	// owned 107:107.
	m, err := c.Image(ctx, ref)
	require.NoError(t, err)
	require.Len(t, m.Layers, 1)
	assert.Equal(t, MediaOCILayerGzip, m.Layers[0].MediaType)

	// Pushing the same file again gives the same image.
	again, err := c.PushContainerDisk(ctx, mustRef(t, "docker://"+reg.Addr+"/kubevmm/disk:v2"), "disk.qcow2", src)
	require.NoError(t, err)
	assert.Equal(t, pushed, again, "the build is reproducible")

	// A new push moves the tag; the digest follows.
	src2, _ := diskFile(t, 1000)
	pushed2, err := c.PushContainerDisk(ctx, ref, "disk.qcow2", src2)
	require.NoError(t, err)
	d2, err := c.Digest(ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, pushed2, d2)
	assert.NotEqual(t, d, d2)
}

func TestLayerOwnership(t *testing.T) {
	src, want := diskFile(t, 4096)
	var buf bytes.Buffer
	_, err := writeDiskLayer(&buf, "x.img", src)
	require.NoError(t, err)
	z, err := gzip.NewReader(&buf)
	require.NoError(t, err)
	tr := tar.NewReader(z)
	h, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "disk/", h.Name)
	h, err = tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "disk/x.img", h.Name)
	assert.Equal(t, []int{107, 107}, []int{h.Uid, h.Gid})
	assert.Equal(t, int64(0o444), h.Mode, "readable by the launcher's user, whoever it is")
	got, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

func TestErrors(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	ctx := context.Background()
	c, err := New(Options{CAs: [][]byte{reg.CA}, Timeout: 2 * time.Second})
	require.NoError(t, err)
	src, _ := diskFile(t, 1000)
	ref := mustRef(t, "docker://"+reg.Addr+"/kubevmm/disk:v1")
	_, err = c.PushContainerDisk(ctx, ref, "disk.img", src)
	require.NoError(t, err)

	t.Run("unknown image", func(t *testing.T) {
		_, err := c.Digest(ctx, mustRef(t, "docker://"+reg.Addr+"/kubevmm/nothere:v1"))
		require.ErrorIs(t, err, ErrNotFound)
		assert.Contains(t, err.Error(), "nothere")
		_, _, err = readDisk(t, c, mustRef(t, "docker://"+reg.Addr+"/kubevmm/disk:nothere"))
		require.ErrorIs(t, err, ErrNotFound)
	})
	t.Run("unknown CA", func(t *testing.T) {
		c, err := New(Options{})
		require.NoError(t, err)
		_, err = c.Digest(ctx, ref)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "certificate")
	})
	t.Run("insecure", func(t *testing.T) {
		c, err := New(Options{Insecure: true})
		require.NoError(t, err)
		_, _, err = readDisk(t, c, ref)
		require.NoError(t, err)
	})
	t.Run("bad CA", func(t *testing.T) {
		_, err := New(Options{CAs: [][]byte{[]byte("not pem")}})
		require.ErrorContains(t, err, "no PEM certificate")
	})
	t.Run("connection refused", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		l.Close()
		_, err = c.Digest(ctx, mustRef(t, "docker://"+addr+"/x:1"))
		require.ErrorContains(t, err, "connection refused")
	})
	t.Run("registry that never answers", func(t *testing.T) {
		// Accepts connections and says nothing: the TLS handshake times out
		// instead of hanging.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		conns := make(chan net.Conn, 16)
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					close(conns)
					return
				}
				conns <- conn
			}
		}()
		defer func() {
			l.Close()
			for conn := range conns {
				conn.Close()
			}
		}()
		c, err := New(Options{Timeout: 300 * time.Millisecond})
		require.NoError(t, err)
		_, err = c.Digest(ctx, mustRef(t, "docker://"+l.Addr().String()+"/x:1"))
		require.ErrorContains(t, err, "timeout")
	})
	t.Run("no disk in the image", func(t *testing.T) {
		var layer bytes.Buffer
		tw := tar.NewWriter(&layer)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "etc/disk/x.img", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
		_, _ = tw.Write([]byte{1})
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "disk/sub/y.img", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
		_, _ = tw.Write([]byte{1})
		require.NoError(t, tw.Close())
		nodisk := mustRef(t, "docker://"+reg.Addr+"/kubevmm/nodisk:v1")
		pushImage(t, c, nodisk, layer.Bytes(), "application/vnd.oci.image.layer.v1.tar")
		_, _, err := readDisk(t, c, nodisk)
		require.ErrorIs(t, err, ErrNoDisk)
	})
	t.Run("zstd layer refused", func(t *testing.T) {
		z := mustRef(t, "docker://"+reg.Addr+"/kubevmm/zstd:v1")
		pushImage(t, c, z, []byte("whatever"), "application/vnd.oci.image.layer.v1.tar+zstd")
		_, _, err := readDisk(t, c, z)
		require.ErrorContains(t, err, `unsupported layer type "application/vnd.oci.image.layer.v1.tar+zstd"`)
	})
	t.Run("corrupt blob in the registry", func(t *testing.T) {
		src, _ := diskFile(t, 100000)
		cref := mustRef(t, "docker://"+reg.Addr+"/kubevmm/corrupt:v1")
		_, err := c.PushContainerDisk(ctx, cref, "disk.img", src)
		require.NoError(t, err)
		m, err := c.Image(ctx, cref)
		require.NoError(t, err)
		hexd := strings.TrimPrefix(m.Layers[0].Digest, "sha256:")
		data := filepath.Join(reg.Dir, "docker/registry/v2/blobs/sha256", hexd[:2], hexd, "data")
		b, err := os.ReadFile(data)
		require.NoError(t, err)
		b[len(b)/2] ^= 0xff
		require.NoError(t, os.WriteFile(data, b, 0o600))
		_, _, err = readDisk(t, c, cref)
		require.Error(t, err, "a corrupt layer must not pass as the image")
	})
}

// pushImage pushes a one-layer image with the given layer bytes and type.
func pushImage(t *testing.T, c *Client, ref Ref, layer []byte, mediaType string) string {
	t.Helper()
	ctx := context.Background()
	ld := digestOf(layer)
	require.NoError(t, c.putBlob(ctx, ref, ld, io.NewSectionReader(bytes.NewReader(layer), 0, int64(len(layer)))))
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	require.NoError(t, c.putBlob(ctx, ref, digestOf(cfg), io.NewSectionReader(bytes.NewReader(cfg), 0, int64(len(cfg)))))
	m, err := json.Marshal(Manifest{SchemaVersion: 2, MediaType: MediaOCIManifest,
		Config: &Descriptor{MediaType: MediaOCIConfig, Digest: digestOf(cfg), Size: int64(len(cfg))},
		Layers: []Descriptor{{MediaType: mediaType, Digest: ld, Size: int64(len(layer))}}})
	require.NoError(t, err)
	return putManifest(t, c, ref, MediaOCIManifest, m)
}

func putManifest(t *testing.T, c *Client, ref Ref, mediaType string, m []byte) string {
	t.Helper()
	resp, err := c.do(context.Background(), ref, http.MethodPut, ref.Repo+"/manifests/"+ref.Tag,
		http.Header{"Content-Type": {mediaType}},
		func() (io.Reader, error) { return io.NewSectionReader(bytes.NewReader(m), 0, int64(len(m))), nil }, http.StatusCreated)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return digestOf(m)
}

func TestIndex(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	ctx := context.Background()
	c, err := New(Options{CAs: [][]byte{reg.CA}})
	require.NoError(t, err)
	src, want := diskFile(t, 5000)
	img := mustRef(t, "docker://"+reg.Addr+"/kubevmm/multi:amd64")
	md, err := c.PushContainerDisk(ctx, img, "disk.img", src)
	require.NoError(t, err)
	m, err := c.Image(ctx, img)
	require.NoError(t, err)
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	idx, err := json.Marshal(Manifest{SchemaVersion: 2, MediaType: MediaOCIIndex, Manifests: []Descriptor{
		{MediaType: MediaOCIManifest, Digest: md, Size: int64(len(raw)), Platform: &Platform{OS: "linux", Architecture: "amd64"}},
	}})
	require.NoError(t, err)
	ref := mustRef(t, "docker://"+reg.Addr+"/kubevmm/multi:v1")
	id := putManifest(t, c, ref, MediaOCIIndex, idx)

	d, err := c.Digest(ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, id, d, "a multi-platform image's digest is its index's")
	_, got, err := readDisk(t, c, ref)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	other, err := New(Options{CAs: [][]byte{reg.CA}, Architecture: "s390x"})
	require.NoError(t, err)
	_, _, err = readDisk(t, other, ref)
	require.ErrorContains(t, err, "no linux/s390x manifest in its index (has linux/amd64)")
}

func TestBasicAuth(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{Username: "user", Password: "pw"})
	ctx := context.Background()
	ref := mustRef(t, "docker://"+reg.Addr+"/kubevmm/disk:v1")
	c, err := New(Options{CAs: [][]byte{reg.CA}, Username: "user", Password: "pw"})
	require.NoError(t, err)
	src, want := diskFile(t, 1234)
	_, err = c.PushContainerDisk(ctx, ref, "disk.img", src)
	require.NoError(t, err)
	_, got, err := readDisk(t, c, ref)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	for name, o := range map[string]Options{
		"no credentials":    {CAs: [][]byte{reg.CA}},
		"wrong credentials": {CAs: [][]byte{reg.CA}, Username: "user", Password: "nope"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := New(o)
			require.NoError(t, err)
			_, err = c.Digest(ctx, ref)
			require.ErrorIs(t, err, ErrUnauthorized)
		})
	}
}

// TestBearerAuth puts a token-checking front (the Bearer flow: 401 with a
// realm, a token from it for the credentials, the token on every request)
// before the real registry.
func TestBearerAuth(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	ctx := context.Background()
	target, err := url.Parse("https://" + reg.Addr)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	backend, err := New(Options{CAs: [][]byte{reg.CA}})
	require.NoError(t, err)
	proxy.Transport = backend.http.Transport
	var front *httptest.Server
	var scopes []string
	front = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			if u, p, ok := r.BasicAuth(); !ok || u != "user" || p != "pw" {
				http.Error(w, `{"errors":[{"code":"DENIED","message":"bad credentials"}]}`, http.StatusUnauthorized)
				return
			}
			scopes = append(scopes, r.URL.Query().Get("scope"))
			_ = json.NewEncoder(w).Encode(map[string]string{"token": "tok-" + r.URL.Query().Get("service")})
			return
		}
		if r.Header.Get("Authorization") != "Bearer tok-front" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="front",scope="repository:kubevmm/disk:pull,push"`, front.URL))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		r.Header.Del("Authorization")
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	caPEM := pemOf(front.Certificate().Raw)
	host := strings.TrimPrefix(front.URL, "https://")
	ref := mustRef(t, "docker://"+host+"/kubevmm/disk:v1")

	c, err := New(Options{CAs: [][]byte{caPEM}, Username: "user", Password: "pw"})
	require.NoError(t, err)
	src, want := diskFile(t, 2000)
	pushed, err := c.PushContainerDisk(ctx, ref, "disk.img", src)
	require.NoError(t, err)
	d, err := c.Digest(ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, pushed, d)
	_, got, err := readDisk(t, c, ref)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, []string{"repository:kubevmm/disk:pull,push"}, scopes, "one token, for the scope the challenge named")

	bad, err := New(Options{CAs: [][]byte{caPEM}, Username: "user", Password: "wrong"})
	require.NoError(t, err)
	_, err = bad.Digest(ctx, ref)
	require.ErrorIs(t, err, ErrUnauthorized)
	assert.Contains(t, err.Error(), "bad credentials")
}

func pemOf(der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}) }

// An insecure registry that speaks plain http (with Basic auth): an
// insecure client falls back to http and authenticates; a secure one
// refuses it.
func TestInsecurePlainHTTP(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{PlainHTTP: true, Username: "u", Password: "p"})
	ctx := context.Background()
	ref := mustRef(t, "docker://"+reg.Addr+"/kubevmm/disk:v1")
	c, err := New(Options{Insecure: true, Username: "u", Password: "p"})
	require.NoError(t, err)
	src, want := diskFile(t, 3000)
	pushed, err := c.PushContainerDisk(ctx, ref, "disk.img", src)
	require.NoError(t, err)
	d, err := c.Digest(ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, pushed, d)
	_, got, err := readDisk(t, c, ref)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	secure, err := New(Options{Username: "u", Password: "p"})
	require.NoError(t, err)
	_, err = secure.Digest(ctx, ref)
	require.ErrorContains(t, err, "server gave HTTP response to HTTPS client")
}

// TestSparseLayerRefused: a layer whose disk is a sparse tar entry, 512
// bytes standing for 4 EiB, is refused by name before any byte is handed
// on (archive/tar would read the holes as zeros for years).
func TestSparseLayerRefused(t *testing.T) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(sparseTar(t))
	require.NoError(t, w.Close())
	m, err := json.Marshal(Manifest{SchemaVersion: 2, MediaType: MediaOCIManifest,
		Layers: []Descriptor{{MediaType: MediaOCILayerGzip, Digest: sha(gz.Bytes()), Size: int64(gz.Len())}}})
	require.NoError(t, err)
	c, ref := fuzzClient(t, &fakeRegistry{manifests: map[string][]byte{"v1": m}, blob: gz.Bytes()})
	calls := 0
	err = c.Disk(context.Background(), ref, func(string, int64, io.Reader) error { calls++; return nil })
	require.ErrorContains(t, err, "disk/x.img is a sparse file")
	assert.Zero(t, calls)
}
