package registry

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"strings"
)

// ErrNoDisk is returned (wrapped) for an image without a regular file
// under disk/.
var ErrNoDisk = errors.New("no disk image under disk/ in the image")

// DiskDir is where a containerDisk image keeps its disk (CDI's and
// KubeVirt's layout: one file in /disk/).
const DiskDir = "disk"

// Disk streams ref's layers, in order, and calls fn with the first
// regular file found directly under disk/ (its base name, its size and
// its bytes, valid during the call only). The layer it was in is read to
// its end and checked against its digest after fn returns: fn's result
// stands only if that check passes too. Layers are gzip-compressed or
// plain tar.
func (c *Client) Disk(ctx context.Context, ref Ref, fn func(name string, size int64, r io.Reader) error) error {
	m, err := c.Image(ctx, ref)
	if err != nil {
		return err
	}
	for _, l := range m.Layers {
		found, err := c.layerDisk(ctx, ref, l, fn)
		if err != nil {
			return fmt.Errorf("image %s: layer %s: %w", ref, l.Digest, err)
		}
		if found {
			return nil
		}
	}
	return fmt.Errorf("image %s: %w", ref, ErrNoDisk)
}

func (c *Client) layerDisk(ctx context.Context, ref Ref, l Descriptor, fn func(string, int64, io.Reader) error) (bool, error) {
	if !digestRE.MatchString(l.Digest) {
		return false, fmt.Errorf("digest %q is not sha256", l.Digest)
	}
	var gz bool
	switch l.MediaType {
	case MediaOCILayerGzip, "application/vnd.docker.image.rootfs.diff.tar.gzip":
		gz = true
	case "application/vnd.oci.image.layer.v1.tar", "application/vnd.docker.image.rootfs.diff.tar":
	default:
		return false, fmt.Errorf("unsupported layer type %q (gzip or plain tar only)", l.MediaType)
	}
	resp, err := c.do(ctx, ref, http.MethodGet, ref.Repo+"/blobs/"+l.Digest, nil, nil, http.StatusOK)
	if err != nil {
		return false, err
	}
	defer func() { _ = resp.Body.Close() }()
	v := &verifier{r: resp.Body, h: sha256.New(), want: l.Digest}
	var tr io.Reader = bufio.NewReaderSize(v, 1<<20)
	if gz {
		z, err := gzip.NewReader(tr)
		if err != nil {
			return false, fmt.Errorf("gzip: %w", err)
		}
		defer func() { _ = z.Close() }()
		tr = z
	}
	t := tar.NewReader(tr)
	found := false
	for !found {
		h, err := t.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("tar: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		dir, base := path.Split(name)
		if h.Typeflag != tar.TypeReg || dir != DiskDir+"/" || strings.HasPrefix(base, ".wh.") {
			continue
		}
		if sparse(h) {
			// archive/tar reads a sparse file's holes as zeros: a few
			// bytes of layer could stand for exabytes of disk, read to
			// the end before the importer could refuse the size.
			return false, fmt.Errorf("tar: %s is a sparse file; container disks hold plain files", h.Name)
		}
		if err := fn(base, h.Size, t); err != nil {
			return false, err
		}
		found = true
	}
	// The whole blob, to its end, must match its digest: what fn was given
	// is only trusted then.
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return false, fmt.Errorf("reading to the end: %w", err)
	}
	if err := v.check(); err != nil {
		return false, err
	}
	return found, nil
}

// verifier hashes what it reads; check compares with the digest once the
// stream is drained.
type verifier struct {
	r    io.Reader
	h    hash.Hash
	want string
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	return n, err
}

func (v *verifier) check() error {
	if _, err := io.Copy(v.h, v.r); err != nil {
		return fmt.Errorf("reading to the end: %w", err)
	}
	if got := "sha256:" + hex.EncodeToString(v.h.Sum(nil)); got != v.want {
		return fmt.Errorf("content has digest %s, not the one the manifest names", got)
	}
	return nil
}

// sparse says h is a PAX (GNU 1.0) sparse file, which archive/tar hands
// on as a regular one. An old-style GNU sparse entry keeps its own type
// and is skipped as not regular.
func sparse(h *tar.Header) bool {
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}
