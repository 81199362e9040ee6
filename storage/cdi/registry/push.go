package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"time"
)

// DiskOwner is the UID and GID of a containerDisk's disk: KubeVirt's
// qemu user (107), as its containerDisk documentation asks.
const DiskOwner = 107

// PushContainerDisk pushes a containerDisk image to ref: one gzip layer
// holding disk/<name> (the bytes of src, owned 107:107, mode 0444: the launcher's
// user, whoever it is, reads it), a
// linux/<architecture> config and an OCI manifest. It returns the
// manifest's digest. The layer is built in a temporary file beside
// nothing of the caller's (os.TempDir), since its digest must be known
// before the upload.
func (c *Client) PushContainerDisk(ctx context.Context, ref Ref, name string, src *os.File) (string, error) {
	if ref.Digest != "" {
		return "", fmt.Errorf("push %s: push to a tag, not a digest", ref)
	}
	if name == "" || name != path.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("push %s: disk name %q must be a plain file name", ref, name)
	}
	layer, err := os.CreateTemp("", "containerdisk-*.tar.gz")
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	defer os.Remove(layer.Name())
	defer func() { _ = layer.Close() }()
	diffID, err := writeDiskLayer(layer, name, src)
	if err != nil {
		return "", fmt.Errorf("push %s: building the layer: %w", ref, err)
	}
	lsize, err := layer.Seek(0, io.SeekEnd)
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(layer, 0, lsize)); err != nil {
		return "", fmt.Errorf("push %s: hashing the layer: %w", ref, err)
	}
	ldigest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	cfg, err := json.Marshal(map[string]any{
		"architecture": c.o.Architecture,
		"os":           "linux",
		"config":       map[string]any{},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	cdigest := digestOf(cfg)
	if err := c.putBlob(ctx, ref, ldigest, io.NewSectionReader(layer, 0, lsize)); err != nil {
		return "", fmt.Errorf("push %s: layer: %w", ref, err)
	}
	if err := c.putBlob(ctx, ref, cdigest, io.NewSectionReader(bytes.NewReader(cfg), 0, int64(len(cfg)))); err != nil {
		return "", fmt.Errorf("push %s: config: %w", ref, err)
	}
	m, err := json.Marshal(Manifest{
		SchemaVersion: 2,
		MediaType:     MediaOCIManifest,
		Config:        &Descriptor{MediaType: MediaOCIConfig, Digest: cdigest, Size: int64(len(cfg))},
		Layers:        []Descriptor{{MediaType: MediaOCILayerGzip, Digest: ldigest, Size: lsize}},
	})
	if err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	hdr := http.Header{"Content-Type": {MediaOCIManifest}}
	body := func() (io.Reader, error) { return io.NewSectionReader(bytes.NewReader(m), 0, int64(len(m))), nil }
	resp, err := c.do(ctx, ref, http.MethodPut, ref.Repo+"/manifests/"+ref.Tag, hdr, body, http.StatusCreated)
	if err != nil {
		return "", fmt.Errorf("push %s: manifest: %w", ref, err)
	}
	_ = resp.Body.Close()
	return digestOf(m), nil
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// writeDiskLayer writes the gzip'd tar of disk/ and disk/<name> to w and
// returns the digest of the uncompressed tar (the config's diff_id).
// Times are 0 and the gzip header empty: the same file gives the same
// layer.
func writeDiskLayer(w io.Writer, name string, src *os.File) (string, error) {
	st, err := src.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", src.Name())
	}
	z := gzip.NewWriter(w)
	h := sha256.New()
	t := tar.NewWriter(io.MultiWriter(z, h))
	epoch := time.Unix(0, 0)
	if err := t.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: DiskDir + "/", Mode: 0o555,
		Uid: DiskOwner, Gid: DiskOwner, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	if err := t.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: DiskDir + "/" + name,
		Mode: 0o444, Size: st.Size(), Uid: DiskOwner, Gid: DiskOwner, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	if _, err := io.Copy(t, io.NewSectionReader(src, 0, st.Size())); err != nil {
		return "", fmt.Errorf("reading %s: %w", src.Name(), err)
	}
	if err := t.Close(); err != nil {
		return "", err
	}
	if err := z.Close(); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// putBlob uploads one blob monolithically unless the registry has it.
func (c *Client) putBlob(ctx context.Context, ref Ref, digest string, r *io.SectionReader) error {
	resp, err := c.do(ctx, ref, http.MethodHead, ref.Repo+"/blobs/"+digest, nil, nil, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	resp, err = c.do(ctx, ref, http.MethodPost, ref.Repo+"/blobs/uploads/", nil, nil, http.StatusAccepted)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("upload session without a usable Location %q", resp.Header.Get("Location"))
	}
	u := resp.Request.URL.ResolveReference(loc)
	q := u.Query()
	q.Set("digest", digest)
	u.RawQuery = q.Encode()
	hdr := http.Header{"Content-Type": {"application/octet-stream"}}
	body := func() (io.Reader, error) { return io.NewSectionReader(r, 0, r.Size()), nil }
	resp, err = c.do(ctx, ref, http.MethodPut, u.String(), hdr, body, http.StatusCreated)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	return nil
}
