package importer_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ulikunitz/xz"

	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

const mib = 1 << 20

// rawImage is an 8 MiB raw image with data in two places, zeros
// elsewhere.
func rawImage(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	b := make([]byte, 8*mib)
	copy(b, "kubevmm cdi importer test image")
	for i := range mib {
		b[5*mib+i] = byte(i*7 + 1)
	}
	p := filepath.Join(dir, "disk.raw")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p, b
}

func compress(t *testing.T, kind string, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	switch kind {
	case "gz":
		w := gzip.NewWriter(&out)
		_, err := w.Write(b)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	case "xz":
		w, err := xz.NewWriter(&out)
		require.NoError(t, err)
		_, err = w.Write(b)
		require.NoError(t, err)
		require.NoError(t, w.Close())
	}
	return out.Bytes()
}

func opts(t *testing.T, url string, size int64) importer.Options {
	data, scratch := t.TempDir(), t.TempDir()
	return importer.Options{Source: "http", URL: url, Size: size, Overhead: 0.06, DataDir: data, ScratchDir: scratch,
		BlockPath: filepath.Join(data, "no-device"), Progress: &importer.Progress{}}
}

// The formats CDI imports, from a real HTTP server: raw, qcow2 (made by
// qemu-img), each plain, gz or xz; the PVC gets the raw bytes, sparse,
// and what qemu-img convert makes of the qcow2.
func TestImportFormats(t *testing.T) {
	dir := t.TempDir()
	rawPath, raw := rawImage(t, dir)
	qcowPath := filepath.Join(dir, "disk.qcow2")
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath)
	converted := filepath.Join(dir, "converted.raw")
	hosttools.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", qcowPath, converted)
	want, err := os.ReadFile(converted)
	require.NoError(t, err)
	require.Equal(t, raw, want, "qemu-img's round trip")
	qcow, err := os.ReadFile(qcowPath)
	require.NoError(t, err)
	files := map[string][]byte{
		"/disk.raw": raw, "/disk.raw.gz": compress(t, "gz", raw), "/disk.raw.xz": compress(t, "xz", raw),
		"/disk.qcow2": qcow, "/disk.qcow2.gz": compress(t, "gz", qcow), "/disk.qcow2.xz": compress(t, "xz", qcow),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	for name := range files {
		t.Run(name, func(t *testing.T) {
			o := opts(t, srv.URL+name, 16*mib)
			require.NoError(t, importer.Run(context.Background(), o))
			got, err := os.ReadFile(filepath.Join(o.DataDir, importer.DiskImage))
			require.NoError(t, err)
			require.Len(t, got, 15*mib, "grown to 16 MiB less 6%, in whole MiB")
			assert.True(t, bytes.Equal(want, got[:len(want)]), "disk.img starts with the image's raw bytes")
			assert.True(t, bytes.Equal(make([]byte, len(got)-len(want)), got[len(want):]), "and reads zeros after them")
			var st syscall.Stat_t
			require.NoError(t, syscall.Stat(filepath.Join(o.DataDir, importer.DiskImage), &st))
			assert.Less(t, st.Blocks*512, int64(len(want)), "zeros are not written: disk.img is sparse")
			assert.InDelta(t, 100, o.Progress.Get(), 0.001)
			left, err := os.ReadDir(o.ScratchDir)
			require.NoError(t, err)
			assert.Empty(t, left, "the scratch space is emptied")
		})
	}
}

// A blank image is the PVC's usable size, sparse.
func TestImportBlank(t *testing.T) {
	o := opts(t, "", 100*mib)
	o.Source = "none"
	require.NoError(t, importer.Run(context.Background(), o))
	st, err := os.Stat(filepath.Join(o.DataDir, importer.DiskImage))
	require.NoError(t, err)
	assert.Equal(t, int64(94*mib), st.Size(), "100 MiB less 6%, in whole MiB")
	var s syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(o.DataDir, importer.DiskImage), &s))
	assert.Zero(t, s.Blocks)
}

// What goes wrong is said, naming the URL and what is wrong with it.
func TestImportErrors(t *testing.T) {
	dir := t.TempDir()
	_, raw := rawImage(t, dir)
	sum := sha256.Sum256(raw)
	qcowPath := filepath.Join(dir, "disk.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", qcowPath, "4M")
	corrupt, err := os.ReadFile(qcowPath)
	require.NoError(t, err)
	// The L1 table's offset pointed past the end of the file.
	copy(corrupt[40:48], []byte{0, 0, 0, 0x7f, 0, 0, 0, 0})
	overlay := filepath.Join(dir, "overlay.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", qcowPath, overlay)
	withBacking, err := os.ReadFile(overlay)
	require.NoError(t, err)
	files := map[string][]byte{"/disk.raw": raw, "/corrupt.qcow2": corrupt, "/overlay.qcow2": withBacking,
		"/corrupt.gz": append(compress(t, "gz", raw)[:100], make([]byte, 64)...), "/empty": {}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	tests := []struct {
		name, path, checksum string
		size                 int64
		want                 string
	}{
		{"404", "/missing", "", 16 * mib, "GET " + srv.URL + "/missing: HTTP 404 Not Found"},
		{"corrupt qcow2", "/corrupt.qcow2", "", 16 * mib, "the qcow2 image from " + srv.URL + "/corrupt.qcow2: "},
		{"backing file", "/overlay.qcow2", "", 16 * mib, "names a backing file"},
		{"corrupt gz", "/corrupt.gz", "", 16 * mib, "the gz image from " + srv.URL + "/corrupt.gz is corrupt"},
		{"empty", "/empty", "", 16 * mib, "is empty"},
		{"no space", "/disk.raw", "", 8 * mib, "no space: the image from " + srv.URL + "/disk.raw is larger than the 7884800 bytes usable on the PVC"},
		{"checksum mismatch", "/disk.raw", "sha256:" + strings.Repeat("0", 64), 16 * mib, "checksum mismatch: sha256 of " + srv.URL + "/disk.raw is " + hex.EncodeToString(sum[:])},
		{"unknown checksum", "/disk.raw", "crc32:00", 16 * mib, `unknown algorithm "crc32"`},
		{"unreachable", "", "", 16 * mib, "GET http://127.0.0.1:1/x: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := srv.URL + tc.path
			if tc.path == "" {
				url = "http://127.0.0.1:1/x"
			}
			o := opts(t, url, tc.size)
			o.Checksum = tc.checksum
			err := importer.Run(context.Background(), o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("checksum match", func(t *testing.T) {
		o := opts(t, srv.URL+"/disk.raw", 16*mib)
		o.Checksum = "sha256:" + hex.EncodeToString(sum[:])
		require.NoError(t, importer.Run(context.Background(), o))
	})
}

// Extra headers, basic auth and a CA from certConfigMap reach the
// server.
func TestImportAuth(t *testing.T) {
	_, raw := rawImage(t, t.TempDir())
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != "me" || pass != "secret" || r.Header.Get("X-Token") != "abc" || r.Header.Get("X-Other") != "d e" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		_, _ = w.Write(raw)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	o := opts(t, srv.URL+"/disk.raw", 16*mib)
	err := importer.Run(context.Background(), o)
	require.Error(t, err, "the server's CA is not trusted without certConfigMap")
	assert.Contains(t, err.Error(), "certificate")
	o.CAs = [][]byte{ca}
	err = importer.Run(context.Background(), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP 403 Forbidden")
	o.Headers, o.AccessKey, o.SecretKey = []string{"X-Token: abc", "X-Other: d e"}, "me", "secret"
	require.NoError(t, importer.Run(context.Background(), o))
	got, err := os.ReadFile(filepath.Join(o.DataDir, importer.DiskImage))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(raw, got[:len(raw)]))
}

// disk.img is grown, sparse, to the PVC's usable size (its size less the
// overhead CDIConfig gives the class, in whole MiB), as CDI resizes an
// imported image; an image as large as the usable size is kept whole.
func TestImportResize(t *testing.T) {
	dir := t.TempDir()
	rawPath, raw := rawImage(t, dir)
	qcowPath := filepath.Join(dir, "disk.qcow2")
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath)
	qcow, err := os.ReadFile(qcowPath)
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/disk.qcow2" {
			_, _ = w.Write(qcow)
			return
		}
		_, _ = w.Write(raw)
	}))
	defer srv.Close()
	tests := []struct {
		name, path string
		size       int64
		overhead   float64
		want       int64
	}{
		{"raw, global overhead", "/disk.raw", 100 * mib, 0.06, 94 * mib},
		{"qcow2, a class's overhead", "/disk.qcow2", 100 * mib, 0.2, 80 * mib},
		{"no overhead", "/disk.raw", 100 * mib, 0, 100 * mib},
		{"usable size not whole MiB", "/disk.raw", 1090 * mib, 0.06, 1024 * mib},
		{"image exactly the usable size", "/disk.raw", 10 * mib, 0.2, 8 * mib},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := opts(t, srv.URL+tc.path, tc.size)
			o.Overhead = tc.overhead
			require.NoError(t, importer.Run(context.Background(), o))
			path := filepath.Join(o.DataDir, importer.DiskImage)
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Len(t, got, int(tc.want))
			assert.True(t, bytes.Equal(raw, got[:len(raw)]), "the image's bytes first")
			assert.True(t, allZero(got[len(raw):]), "zeros after them")
			var st syscall.Stat_t
			require.NoError(t, syscall.Stat(path, &st))
			assert.LessOrEqual(t, st.Blocks*512, int64(2*mib+64<<10), "the growth takes no space")
		})
	}
}

// WriteImage, the entry point for a source that leaves its image in the
// scratch directory: converted onto the PVC, grown; the scratch file is
// the caller's.
func TestWriteImage(t *testing.T) {
	dir := t.TempDir()
	rawPath, raw := rawImage(t, dir)
	o := opts(t, "", 32*mib)
	qcowPath := filepath.Join(o.ScratchDir, "image")
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath)
	require.NoError(t, importer.WriteImage(o, qcowPath, "registry layer"))
	got, err := os.ReadFile(filepath.Join(o.DataDir, importer.DiskImage))
	require.NoError(t, err)
	require.Len(t, got, 30*mib)
	assert.True(t, bytes.Equal(raw, got[:len(raw)]))
	assert.InDelta(t, 100, o.Progress.Get(), 0.001)

	o = opts(t, "", 4*mib)
	err = importer.WriteImage(o, rawPath, "registry layer")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no space: the image from registry layer is 8388608 bytes")
}

func allZero(b []byte) bool { return bytes.Equal(b, make([]byte, len(b))) }

// qcow2 images as qemu-img and qemu-io make them, imported over http:
// disk.img holds what qemu-img convert makes of each, sparse.
func TestImportQcow2Layouts(t *testing.T) {
	dir := t.TempDir()
	rawPath, _ := rawImage(t, dir)
	// mk runs each command with the image's path in place of "IMG".
	mk := func(name string, cmds ...[]string) string {
		p := filepath.Join(dir, name)
		for _, c := range cmds {
			args := slices.Clone(c[1:])
			args[slices.Index(args, "IMG")] = p
			hosttools.Run(t, c[0], args...)
		}
		return p
	}
	images := map[string]string{
		// What cloud images ship: every cluster deflated.
		"compressed": mk("c.qcow2", []string{"qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", rawPath, "IMG"}),
		// Zero clusters over allocated ones, and between them.
		"zero clusters": mk("z.qcow2", []string{"qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=4096", "IMG", "8M"},
			[]string{"qemu-io", "-f", "qcow2", "-c", "write -P 0x11 0 1M", "-c", "write -z 256k 256k", "-c", "write -P 0x22 3M 8k", "-c", "write -z 5M 1M", "IMG"}),
		// 512-byte clusters: an L2 table per 32 KiB, written where the
		// writes left off, between data clusters and after them.
		"L2 tables between data": mk("l2.qcow2", []string{"qemu-img", "create", "-q", "-f", "qcow2", "-o", "cluster_size=512", "IMG", "8M"},
			[]string{"qemu-io", "-f", "qcow2", "-c", "write -P 0x33 7M 100k", "-c", "write -P 0x44 0 3k", "-c", "write -P 0x55 2M 33k", "-c", "write -P 0x66 64k 1k", "IMG"}),
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer srv.Close()
	for name, img := range images {
		t.Run(name, func(t *testing.T) {
			want := filepath.Join(t.TempDir(), "want.raw")
			hosttools.Run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", img, want)
			wantB, err := os.ReadFile(want)
			require.NoError(t, err)
			o := opts(t, srv.URL+"/"+filepath.Base(img), 16*mib)
			require.NoError(t, importer.Run(context.Background(), o))
			path := filepath.Join(o.DataDir, importer.DiskImage)
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Len(t, got, 15*mib)
			assert.True(t, bytes.Equal(wantB, got[:len(wantB)]), "disk.img starts with qemu-img's conversion")
			assert.True(t, allZero(got[len(wantB):]))
			var st syscall.Stat_t
			require.NoError(t, syscall.Stat(path, &st))
			assert.LessOrEqual(t, st.Blocks*512, int64(2*mib), "zeros are not written")
		})
	}
}

// Without scratch space a raw image (plain or compressed) goes straight
// onto the PVC, and so does a qcow2 one read in place from a server that
// serves ranges; a qcow2 one that must be downloaded whole (no ranges,
// or a checksum over every byte) asks for scratch space, writing
// nothing.
func TestImportWithoutScratch(t *testing.T) {
	dir := t.TempDir()
	rawPath, raw := rawImage(t, dir)
	qcowPath := filepath.Join(dir, "disk.qcow2")
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath)
	qcow, err := os.ReadFile(qcowPath)
	require.NoError(t, err)
	sum := sha256.Sum256(qcow)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "disk.raw.xz"), compress(t, "xz", raw), 0o600))
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/no-ranges.qcow2" {
			_, _ = w.Write(qcow)
			return
		}
		files.ServeHTTP(w, r)
	}))
	defer srv.Close()
	for _, name := range []string{"disk.raw", "disk.raw.xz", "disk.qcow2"} {
		t.Run(name, func(t *testing.T) {
			o := opts(t, srv.URL+"/"+name, 16*mib)
			o.ScratchDir = ""
			require.NoError(t, importer.Run(context.Background(), o))
			got, err := os.ReadFile(filepath.Join(o.DataDir, importer.DiskImage))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(raw, got[:len(raw)]))
			assert.InDelta(t, 100, o.Progress.Get(), 0.001)
		})
	}
	for name, tc := range map[string]struct{ path, checksum string }{
		"qcow2 without ranges":  {"/no-ranges.qcow2", ""},
		"qcow2 with a checksum": {"/disk.qcow2", "sha256:" + hex.EncodeToString(sum[:])},
	} {
		t.Run(name, func(t *testing.T) {
			o := opts(t, srv.URL+tc.path, 16*mib)
			o.ScratchDir, o.Checksum = "", tc.checksum
			err := importer.Run(context.Background(), o)
			require.ErrorIs(t, err, importer.ErrScratchRequired)
			assert.NoFileExists(t, filepath.Join(o.DataDir, importer.DiskImage))
		})
	}
}

// A server whose image changes between range requests is caught, not
// read as a mix of two images.
func TestImportInPlaceChanged(t *testing.T) {
	dir := t.TempDir()
	rawPath, _ := rawImage(t, dir)
	qcowPath := filepath.Join(dir, "disk.qcow2")
	hosttools.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", rawPath, qcowPath)
	qcow, err := os.ReadFile(qcowPath)
	require.NoError(t, err)
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		b := qcow
		if requests > 2 { // after the first GET and the header's range
			b = append(slices.Clone(qcow), make([]byte, 4096)...)
		}
		http.ServeContent(w, r, "disk.qcow2", time.Time{}, bytes.NewReader(b))
	}))
	defer srv.Close()
	o := opts(t, srv.URL+"/disk.qcow2", 16*mib)
	err = importer.Run(context.Background(), o)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "has the image changed?")
}
