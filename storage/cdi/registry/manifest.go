package registry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Media types of manifests and indexes, OCI and Docker.
const (
	MediaOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	MediaOCIIndex       = "application/vnd.oci.image.index.v1+json"
	MediaDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	MediaDockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	MediaOCIConfig      = "application/vnd.oci.image.config.v1+json"
	MediaOCILayerGzip   = "application/vnd.oci.image.layer.v1.tar+gzip"
)

var acceptManifests = strings.Join([]string{MediaOCIManifest, MediaOCIIndex, MediaDockerManifest, MediaDockerList}, ", ")

// maxManifest bounds a manifest read into memory.
const maxManifest = 4 << 20

// Descriptor points at a blob or manifest.
type Descriptor struct {
	MediaType string    `json:"mediaType"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	Platform  *Platform `json:"platform,omitempty"`
}

// Platform is an index entry's.
type Platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

// Manifest is an image manifest or an index (Manifests set).
type Manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Config        *Descriptor  `json:"config,omitempty"`
	Layers        []Descriptor `json:"layers,omitempty"`
	Manifests     []Descriptor `json:"manifests,omitempty"`
}

// Digest is the digest of the manifest ref names, as the registry serves
// it (Docker-Content-Digest of a HEAD, else the sha256 of the manifest
// itself): for a multi-platform image, the index's. Pinning a DataVolume
// to ref@Digest imports the same bytes for as long as the registry keeps
// them.
func (c *Client) Digest(ctx context.Context, ref Ref) (string, error) {
	hdr := http.Header{"Accept": {acceptManifests}}
	resp, err := c.do(ctx, ref, http.MethodHead, ref.Repo+"/manifests/"+ref.Reference(), hdr, nil, http.StatusOK)
	if err != nil {
		return "", fmt.Errorf("digest of %s: %w", ref, err)
	}
	_ = resp.Body.Close()
	if d := resp.Header.Get("Docker-Content-Digest"); digestRE.MatchString(d) {
		return d, nil
	}
	// No (usable) header: the digest is the manifest's own.
	_, _, d, err := c.manifest(ctx, ref, ref.Reference())
	if err != nil {
		return "", fmt.Errorf("digest of %s: %w", ref, err)
	}
	return d, nil
}

// manifest fetches and parses one manifest, checking it against its
// digest when reference is one.
func (c *Client) manifest(ctx context.Context, ref Ref, reference string) (*Manifest, string, string, error) {
	hdr := http.Header{"Accept": {acceptManifests}}
	resp, err := c.do(ctx, ref, http.MethodGet, ref.Repo+"/manifests/"+reference, hdr, nil, http.StatusOK)
	if err != nil {
		return nil, "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxManifest+1))
	if err != nil {
		return nil, "", "", fmt.Errorf("reading manifest %s: %w", reference, err)
	}
	if len(body) > maxManifest {
		return nil, "", "", fmt.Errorf("manifest %s is larger than %d bytes", reference, maxManifest)
	}
	sum := sha256.Sum256(body)
	d := "sha256:" + hex.EncodeToString(sum[:])
	if strings.HasPrefix(reference, "sha256:") && d != reference {
		return nil, "", "", fmt.Errorf("manifest %s: its content has digest %s", reference, d)
	}
	var m Manifest
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&m); err != nil {
		return nil, "", "", fmt.Errorf("manifest %s: %w", reference, err)
	}
	mt := m.MediaType
	if mt == "" {
		mt = strings.TrimSpace(strings.Split(resp.Header.Get("Content-Type"), ";")[0])
	}
	if mt == "" && len(m.Manifests) > 0 {
		mt = MediaOCIIndex
	}
	if mt == "" {
		mt = MediaOCIManifest
	}
	return &m, mt, d, nil
}

// Image resolves ref to one image manifest: an index is followed to the
// linux manifest of the client's architecture.
func (c *Client) Image(ctx context.Context, ref Ref) (*Manifest, error) {
	m, mt, _, err := c.manifest(ctx, ref, ref.Reference())
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	if mt == MediaOCIIndex || mt == MediaDockerList {
		var pick *Descriptor
		var have []string
		for i, d := range m.Manifests {
			if d.Platform == nil {
				continue
			}
			have = append(have, d.Platform.OS+"/"+d.Platform.Architecture)
			if d.Platform.OS == "linux" && d.Platform.Architecture == c.o.Architecture && pick == nil {
				pick = &m.Manifests[i]
			}
		}
		if pick == nil {
			return nil, fmt.Errorf("image %s: no linux/%s manifest in its index (has %s)", ref, c.o.Architecture, strings.Join(have, ", "))
		}
		if !digestRE.MatchString(pick.Digest) {
			return nil, fmt.Errorf("image %s: index entry digest %q is not sha256", ref, pick.Digest)
		}
		if m, mt, _, err = c.manifest(ctx, ref, pick.Digest); err != nil {
			return nil, fmt.Errorf("image %s: %w", ref, err)
		}
	}
	if mt != MediaOCIManifest && mt != MediaDockerManifest {
		return nil, fmt.Errorf("image %s: unsupported manifest type %q", ref, mt)
	}
	return m, nil
}
