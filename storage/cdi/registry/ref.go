// Package registry is a small client of the OCI distribution API (Docker
// Registry HTTP API v2): what CDI's registry imports and DataImportCron's
// polling need, and pushing a containerDisk image. It resolves a
// reference to its manifest digest, follows an image index to one
// platform's manifest, and streams an image's layers to find the disk
// under disk/, as CDI's containerDisk layout puts it. TLS trusts extra
// CAs or, for a registry CDIConfig lists as insecure, nothing (and plain
// http when the registry speaks it); Basic and Bearer-token
// authentication answer the registry's challenge.
//
// It is our own code, not go-containerregistry: the protocol subset is
// small, and that module would have moved golang.org/x/* for the whole
// project.
package registry

import (
	"fmt"
	"regexp"
	"strings"
)

// Ref is an image reference: a registry host (with its port, if any), a
// repository, and a tag or a digest.
type Ref struct {
	Host, Repo string
	// Tag is "" when Digest is set.
	Tag string
	// Digest is "sha256:<64 hex>", or "" for a tag.
	Digest string
}

var (
	hostRE   = regexp.MustCompile(`^(\[[0-9a-fA-F:.]+\]|[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?)(:[0-9]{1,5})?$`)
	repoRE   = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagRE    = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
	digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

// ParseURL parses a DataVolume registry URL,
// docker://host[:port]/repo[:tag|@sha256:hex]. The host is required (an
// image without one would mean Docker Hub, which this cluster does not
// reach); a reference without tag or digest means :latest.
func ParseURL(s string) (Ref, error) {
	rest, ok := strings.CutPrefix(s, "docker://")
	if !ok {
		return Ref{}, fmt.Errorf("registry url %q: want docker://host[:port]/repository[:tag|@sha256:digest]", s)
	}
	return parse(s, rest)
}

// ParseImage parses an image name without the docker:// scheme, as a
// containerDisk's image is written: host[:port]/repo[:tag|@sha256:hex].
func ParseImage(s string) (Ref, error) { return parse(s, s) }

func parse(orig, rest string) (Ref, error) {
	bad := func(why string, args ...any) (Ref, error) {
		return Ref{}, fmt.Errorf("registry url %q: %s", orig, fmt.Sprintf(why, args...))
	}
	host, path, ok := strings.Cut(rest, "/")
	if !ok || host == "" {
		return bad("no registry host: want host[:port]/repository")
	}
	if !hostRE.MatchString(host) {
		return bad("host %q is not a host name or address with an optional port", host)
	}
	var r Ref
	r.Host = host
	if name, dg, ok := strings.Cut(path, "@"); ok {
		if !digestRE.MatchString(dg) {
			return bad("digest %q: want sha256: and 64 lower-case hex digits", dg)
		}
		path, r.Digest = name, dg
	}
	// A tag is after the last colon of the last path element.
	if i := strings.LastIndex(path, ":"); i > strings.LastIndex(path, "/") {
		if r.Digest != "" {
			return bad("both a tag and a digest")
		}
		path, r.Tag = path[:i], path[i+1:]
		if !tagRE.MatchString(r.Tag) {
			return bad("tag %q: want up to 128 of [A-Za-z0-9_.-], not starting with . or -", r.Tag)
		}
	}
	if path == "" {
		return bad("no repository")
	}
	if !repoRE.MatchString(path) {
		return bad("repository %q: want lower-case path components of [a-z0-9] joined by . _ __ or -", path)
	}
	if len(path) > 255 {
		return bad("repository longer than 255 characters")
	}
	r.Repo = path
	if r.Tag == "" && r.Digest == "" {
		r.Tag = "latest"
	}
	return r, nil
}

// Reference is the tag or digest the registry API takes.
func (r Ref) Reference() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}

// Image is the reference as a containerDisk image names it (no scheme).
func (r Ref) Image() string {
	if r.Digest != "" {
		return r.Host + "/" + r.Repo + "@" + r.Digest
	}
	return r.Host + "/" + r.Repo + ":" + r.Tag
}

// String is the reference as a DataVolume URL.
func (r Ref) String() string { return "docker://" + r.Image() }
