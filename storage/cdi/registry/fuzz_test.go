package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRegistry is a registry in memory, as the client's http transport:
// GET and HEAD of manifests/<reference> answer manifests[reference] (with
// contentType and, for a HEAD, the Docker-Content-Digest header dcd),
// GET of blobs/<anything> answers blob; all else is 404. It counts the
// requests.
type fakeRegistry struct {
	manifests        map[string][]byte
	contentType, dcd string
	blob             []byte
	gets             int
}

func (r *fakeRegistry) RoundTrip(req *http.Request) (*http.Response, error) {
	resp := &http.Response{StatusCode: http.StatusNotFound, Header: http.Header{}, Request: req,
		Body: io.NopCloser(strings.NewReader(`{"errors":[{"code":"NOT_FOUND","message":"no"}]}`))}
	rest, _ := strings.CutPrefix(req.URL.Path, "/v2/kubevmm/disk/")
	if req.Method == http.MethodGet {
		r.gets++
	}
	body, ok := []byte(nil), false
	if ref, isManifest := strings.CutPrefix(rest, "manifests/"); isManifest {
		body, ok = r.manifests[ref]
		resp.Header.Set("Content-Type", r.contentType)
		if req.Method == http.MethodHead && r.dcd != "" {
			resp.Header.Set("Docker-Content-Digest", r.dcd)
		}
	} else if strings.HasPrefix(rest, "blobs/") {
		body, ok = r.blob, true
	}
	if ok {
		resp.StatusCode, resp.Body = http.StatusOK, io.NopCloser(bytes.NewReader(body))
	}
	return resp, nil
}

func fuzzClient(t testing.TB, reg *fakeRegistry) (*Client, Ref) {
	c, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.http = &http.Client{Transport: reg}
	ref, err := ParseURL("docker://registry.test/kubevmm/disk:v1")
	if err != nil {
		t.Fatal(err)
	}
	return c, ref
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// childRef in a fuzzed manifest stands for the digest of the fuzzed
// child manifest, which the fuzzer could never compute: with it, an
// index can point at a manifest the registry really has.
const childRef = "@CHILD@"

// FuzzManifest is a hostile registry's manifests: the tag's (an image
// manifest, an index or anything), the one an index may point at, the
// Content-Type and Docker-Content-Digest headers; optionally padded past
// the size limit. Image and Digest must not panic; Image follows at most
// one index level; a manifest over maxManifest is refused; a digest
// returned is well formed and is the header's (if well formed) or the
// sha256 of what was served, never something the registry made up.
func FuzzManifest(f *testing.F) {
	layer := Descriptor{MediaType: MediaOCILayerGzip, Digest: sha([]byte("layer")), Size: 5}
	img, _ := json.Marshal(Manifest{SchemaVersion: 2, MediaType: MediaOCIManifest,
		Config: &Descriptor{MediaType: MediaOCIConfig, Digest: sha([]byte("{}")), Size: 2}, Layers: []Descriptor{layer}})
	idx, _ := json.Marshal(Manifest{SchemaVersion: 2, MediaType: MediaOCIIndex, Manifests: []Descriptor{
		{MediaType: MediaOCIManifest, Digest: sha([]byte("arm")), Size: 1, Platform: &Platform{OS: "linux", Architecture: "arm64"}},
		{MediaType: MediaOCIManifest, Digest: childRef, Size: int64(len(img)), Platform: &Platform{OS: "linux", Architecture: "amd64"}},
	}})
	docker := bytes.ReplaceAll(img, []byte(MediaOCIManifest), []byte(MediaDockerManifest))
	list := bytes.ReplaceAll(bytes.ReplaceAll(idx, []byte(MediaOCIIndex), []byte(MediaDockerList)), []byte(MediaOCIManifest), []byte(MediaDockerManifest))
	f.Add(img, []byte{}, MediaOCIManifest, "", false)
	f.Add(idx, img, MediaOCIIndex, sha([]byte("x")), false)
	f.Add(list, docker, MediaDockerList, "sha256:nothex", false)
	f.Add([]byte(`{"schemaVersion":2,"layers":[]}`), []byte{}, "", "", false)
	f.Add(idx, idx, "", "", false) // an index pointing at an index
	f.Add(img, []byte{}, MediaOCIManifest, "", true)
	f.Fuzz(func(t *testing.T, top, child []byte, contentType, dcd string, big bool) {
		top = bytes.ReplaceAll(top, []byte(childRef), []byte(sha(child)))
		if big {
			// Leading space, which JSON allows, to one byte past the
			// limit: refused however well formed the rest is.
			top = append(bytes.Repeat([]byte{' '}, max(0, maxManifest+1-len(top))), top...)
		}
		reg := &fakeRegistry{contentType: contentType, dcd: dcd,
			manifests: map[string][]byte{"v1": top, sha(top): top, sha(child): child}}
		c, ref := fuzzClient(t, reg)
		ctx := context.Background()

		_, err := c.Image(ctx, ref)
		if reg.gets > 2 {
			t.Fatalf("Image fetched %d manifests: it follows one index, no more", reg.gets)
		}
		if big && err == nil {
			t.Fatalf("a %d-byte manifest was accepted", len(top))
		}

		d, err := c.Digest(ctx, ref)
		if err != nil {
			return
		}
		switch {
		case digestRE.MatchString(dcd):
			if d != dcd {
				t.Fatalf("digest %q, the registry said %q", d, dcd)
			}
		case big:
			t.Fatalf("digest %q of an oversized manifest", d)
		case d != sha(top):
			t.Fatalf("digest %q, the manifest's is %q", d, sha(top))
		}
	})
}

// fuzzTar is a layer of headers and contents, for the seeds.
func fuzzTar(tb testing.TB, files ...*tar.Header) []byte {
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, h := range files {
		if err := w.WriteHeader(h); err != nil {
			tb.Fatal(err)
		}
		if _, err := w.Write(bytes.Repeat([]byte{'d'}, int(h.Size))); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// Layer encodings FuzzLayer tries (mode % 3).
const (
	layerTar     = iota // plain tar media type, the fuzzed bytes as they are
	layerGzip           // gzip media type, the fuzzed bytes compressed
	layerGzipRaw        // gzip media type, the fuzzed bytes as they are
	layerModes
)

// sparseTar is a layer of one PAX (GNU 1.0) sparse file, disk/x.img:
// 512 bytes of data standing for a 4 EiB file, whose holes archive/tar
// reads as zeros. archive/tar writes no sparse files: the PAX header is
// written as a file, then given its type.
func sparseTar(tb testing.TB) []byte {
	rec := func(k, v string) string {
		s := " " + k + "=" + v + "\n"
		n := len(s) + 2
		if len(fmt.Sprint(n)) > 2 {
			n++
		}
		return fmt.Sprint(n) + s
	}
	pax := rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", "disk/x.img") +
		rec("GNU.sparse.realsize", fmt.Sprint(int64(1)<<62))
	data := append([]byte("1\n0\n512\n"), make([]byte, 504)...) // the map: one block, 512 bytes at 0
	data = append(data, bytes.Repeat([]byte{'d'}, 512)...)
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, e := range []struct{ name, body string }{{"pax", pax}, {"disk/GNUSparseFile.0/x.img", string(data)}} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Size: int64(len(e.body)), Format: tar.FormatUSTAR}); err != nil {
			tb.Fatal(err)
		}
		_, _ = w.Write([]byte(e.body))
	}
	_ = w.Close()
	h := b.Bytes()[:512]
	h[156] = tar.TypeXHeader
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b.Bytes()
}

// fuzzMaxDisk bounds what FuzzLayer's callback writes to its directory.
const fuzzMaxDisk = 1 << 20

// FuzzLayer is a hostile registry's image layer: any bytes as a plain tar
// or a gzip'd one (or as a broken gzip stream), under a manifest naming
// its true digest or a wrong one. Disk must not panic; it hands at most
// one file to its callback, with a plain base name (a caller joining it
// to a directory stays inside: the callback here creates it in a
// directory of its own, and nothing may appear beside it), and no more
// bytes than the tar header's size; and it succeeds only when the file
// was read whole and the layer's digest is right.
func FuzzLayer(f *testing.F) {
	// The seed is a layer as PushContainerDisk writes it, and layers
	// with names that try to leave disk/ or the directory.
	src := filepath.Join(f.TempDir(), "disk.qcow2")
	if err := os.WriteFile(src, []byte("QFI\xfb\x00\x00\x00\x03 a qcow2 header, more or less"), 0o600); err != nil {
		f.Fatal(err)
	}
	sf, err := os.Open(src)
	if err != nil {
		f.Fatal(err)
	}
	defer sf.Close()
	var gz bytes.Buffer
	if _, err := writeDiskLayer(&gz, "disk.qcow2", sf); err != nil {
		f.Fatal(err)
	}
	z, err := gzip.NewReader(bytes.NewReader(gz.Bytes()))
	if err != nil {
		f.Fatal(err)
	}
	plain, err := io.ReadAll(z)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(plain, uint8(layerTar), false)
	f.Add(plain, uint8(layerGzip), false)
	f.Add(gz.Bytes(), uint8(layerGzipRaw), false)
	f.Add(plain, uint8(layerTar), true)
	reg := func(name string, size int64) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644}
	}
	f.Add(fuzzTar(f, reg("disk/../../x", 3), reg("../disk/y", 4)), uint8(layerTar), false)
	f.Add(fuzzTar(f, reg("disk/.wh.disk.img", 0), &tar.Header{Typeflag: tar.TypeSymlink, Name: "disk/l", Linkname: "/etc/passwd"},
		reg("disk/sub/z", 1), reg("./disk//disk.img", 9)), uint8(layerGzip), false)
	f.Add(sparseTar(f), uint8(layerGzip), false)
	// The callback writes into dir, which is alone in root. One pair for
	// the whole run (emptied after each input): creating directories is
	// most of an execution's time otherwise.
	root := f.TempDir()
	dir := filepath.Join(root, "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, layer []byte, mode uint8, badDigest bool) {
		mediaType, blob := MediaOCILayerGzip, layer
		switch mode % layerModes {
		case layerTar:
			mediaType = "application/vnd.oci.image.layer.v1.tar"
		case layerGzip:
			var b bytes.Buffer
			w := gzip.NewWriter(&b)
			_, _ = w.Write(layer)
			_ = w.Close()
			blob = b.Bytes()
		}
		digest := sha(blob)
		if badDigest {
			digest = sha(append(blob, 0))
		}
		m, err := json.Marshal(Manifest{SchemaVersion: 2, MediaType: MediaOCIManifest,
			Layers: []Descriptor{{MediaType: mediaType, Digest: digest, Size: int64(len(blob))}}})
		if err != nil {
			t.Fatal(err)
		}
		c, ref := fuzzClient(t, &fakeRegistry{manifests: map[string][]byte{"v1": m}, blob: blob})

		calls, gotName, wrote, want := 0, "", int64(0), int64(0)
		err = c.Disk(context.Background(), ref, func(name string, size int64, r io.Reader) error {
			calls++
			gotName, want = name, size
			if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.HasPrefix(name, ".wh.") {
				t.Fatalf("disk file name %q", name)
			}
			if size > fuzzMaxDisk {
				// A tar header may claim any size (a sparse entry, which
				// has it without the bytes, is refused before this): not
				// written out here.
				return errors.New("disk too large for the fuzzer")
			}
			out, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				return err // a name no file may have (a NUL in it): refused here
			}
			defer out.Close()
			wrote, err = io.Copy(out, r)
			if wrote > size {
				t.Fatalf("read %d bytes of a %d-byte file", wrote, size)
			}
			return err
		})
		if calls > 1 {
			t.Fatalf("the callback ran %d times", calls)
		}
		if ents, _ := os.ReadDir(root); len(ents) != 1 {
			t.Fatalf("%d entries beside the disk directory: %v", len(ents)-1, ents)
		}
		ents, _ := os.ReadDir(dir)
		if len(ents) > calls || len(ents) == 1 && ents[0].Name() != gotName {
			t.Fatalf("the disk directory holds %v, the callback had %q", ents, gotName)
		}
		for _, e := range ents {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		if err != nil {
			return
		}
		if badDigest {
			t.Fatal("a layer with the wrong digest was accepted")
		}
		if calls != 1 || wrote != want {
			t.Fatalf("success with %d calls, %d of %d bytes", calls, wrote, want)
		}
	})
}
