// Command image builds a container image from files on disk, without Docker
// or a registry: one reproducible layer, written as a docker-archive tarball
// that `ctr -n k8s.io images import` (containerd, hence the kubelet) loads.
//
//	go run ./hack/image -o virt-controller.tar -t localhost/kubevmm/virt-controller:devel \
//	    -entrypoint /usr/bin/virt-controller -user 65532 \
//	    -file /usr/bin/virt-controller=bin/virt-controller:0755
//
// Every file is owned by root and stamped with time 0, so the same inputs
// give the same image ID. A minimal /etc/passwd, /etc/group and /tmp are
// always added (Go programs look up their user; many write to /tmp).
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// fileSpec is one file of the image: its path inside, its source on disk
// and its mode.
type fileSpec struct {
	Dest string
	Src  string
	Mode int64
}

// spec is everything an image is made of.
type spec struct {
	Tag        string
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
	Files      []fileSpec
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("o", "", "output tarball (docker-archive)")
	tag := fs.String("t", "", "image reference, e.g. localhost/kubevmm/virt-controller:devel")
	entrypoint := fs.String("entrypoint", "", "entrypoint, space-separated")
	cmd := fs.String("cmd", "", "default arguments, space-separated")
	user := fs.String("user", "", "user (UID[:GID]) the container runs as")
	workdir := fs.String("workdir", "/", "working directory")
	var files, env, labels listFlag
	fs.Var(&files, "file", "DEST=SRC[:MODE] (octal mode; default: the source's), repeatable")
	fs.Var(&env, "env", "KEY=VALUE, repeatable")
	fs.Var(&labels, "label", "KEY=VALUE, repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *tag == "" {
		return errors.New("-o and -t are required")
	}
	s := spec{Tag: *tag, User: *user, WorkingDir: *workdir, Labels: map[string]string{},
		Env: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin"}, env...)}
	if *entrypoint != "" {
		s.Entrypoint = strings.Fields(*entrypoint)
	}
	if *cmd != "" {
		s.Cmd = strings.Fields(*cmd)
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("-label %q: want KEY=VALUE", l)
		}
		s.Labels[k] = v
	}
	for _, f := range files {
		fsp, err := parseFile(f)
		if err != nil {
			return err
		}
		s.Files = append(s.Files, fsp)
	}
	tmp := *out + ".tmp"
	w, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("creating %s: %w", tmp, err)
	}
	id, err := build(w, s)
	if cerr := w.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("writing %s: %w", tmp, cerr)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	// Renamed into place only when complete: a half-written tarball must
	// never be mistaken for an image.
	if err := os.Rename(tmp, *out); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	fmt.Printf("%s %s sha256:%s\n", *out, *tag, id)
	return nil
}

func parseFile(f string) (fileSpec, error) {
	dest, src, ok := strings.Cut(f, "=")
	if !ok || !strings.HasPrefix(dest, "/") || src == "" {
		return fileSpec{}, fmt.Errorf("-file %q: want /DEST=SRC[:MODE]", f)
	}
	fsp := fileSpec{Dest: path.Clean(dest), Src: src, Mode: -1}
	if i := strings.LastIndex(src, ":"); i > 0 {
		if m, err := strconv.ParseInt(src[i+1:], 8, 32); err == nil {
			fsp.Src, fsp.Mode = src[:i], m
		}
	}
	return fsp, nil
}

// build writes the docker-archive of s to w and returns the image ID (the
// config digest).
func build(w io.Writer, s spec) (string, error) {
	layer, err := buildLayer(s.Files)
	if err != nil {
		return "", err
	}
	diffID := sha256.Sum256(layer)
	cfg := map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      time.Unix(0, 0).UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": s.Entrypoint,
			"Cmd":        s.Cmd,
			"Env":        s.Env,
			"User":       s.User,
			"WorkingDir": s.WorkingDir,
			"Labels":     s.Labels,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encoding image config: %w", err)
	}
	cfgSum := sha256.Sum256(cfgJSON)
	id := hex.EncodeToString(cfgSum[:])
	layerPath := hex.EncodeToString(diffID[:]) + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   id + ".json",
		"RepoTags": []string{s.Tag},
		"Layers":   []string{layerPath},
	}})
	if err != nil {
		return "", fmt.Errorf("encoding manifest: %w", err)
	}
	tw := tar.NewWriter(w)
	for _, e := range []struct {
		name string
		data []byte
	}{{id + ".json", cfgJSON}, {layerPath, layer}, {"manifest.json", manifest}} {
		if err := writeEntry(tw, &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data))}, bytes.NewReader(e.data)); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("finishing archive: %w", err)
	}
	return id, nil
}

// buildLayer makes the single layer: the base files plus the given ones,
// sorted, with every parent directory.
func buildLayer(files []fileSpec) ([]byte, error) {
	type entry struct {
		hdr  *tar.Header
		src  string
		data []byte
	}
	entries := map[string]*entry{}
	addDir := func(p string, mode int64) {
		for ; p != "/" && p != "."; p = path.Dir(p) {
			if _, ok := entries[p]; !ok {
				entries[p] = &entry{hdr: &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(p, "/") + "/", Mode: mode}}
			}
		}
	}
	addData := func(p string, data []byte, mode int64) {
		addDir(path.Dir(p), 0o755)
		entries[p] = &entry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: mode, Size: int64(len(data))}, data: data}
	}
	addDir("/tmp", 0o1777)
	addData("/etc/passwd", []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"), 0o644)
	addData("/etc/group", []byte("root:x:0:\nnonroot:x:65532:\n"), 0o644)

	for _, f := range files {
		st, err := os.Stat(f.Src)
		if err != nil {
			return nil, fmt.Errorf("adding %s: %w", f.Dest, err)
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("adding %s: %s is not a regular file", f.Dest, f.Src)
		}
		mode := f.Mode
		if mode < 0 {
			mode = int64(st.Mode().Perm())
		}
		addDir(path.Dir(f.Dest), 0o755)
		entries[f.Dest] = &entry{hdr: &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Dest, "/"), Mode: mode, Size: st.Size()}, src: f.Src}
	}

	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		if e.src == "" {
			if err := writeEntry(tw, e.hdr, bytes.NewReader(e.data)); err != nil {
				return nil, err
			}
			continue
		}
		f, err := os.Open(e.src)
		if err != nil {
			return nil, fmt.Errorf("adding %s: %w", n, err)
		}
		err = writeEntry(tw, e.hdr, f)
		_ = f.Close() // read-only
		if err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("finishing layer: %w", err)
	}
	return buf.Bytes(), nil
}

// writeEntry writes one reproducible tar entry: root-owned, time 0.
func writeEntry(tw *tar.Writer, h *tar.Header, r io.Reader) error {
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
	h.ModTime = time.Unix(0, 0)
	if h.Typeflag == 0 {
		h.Typeflag = tar.TypeReg
	}
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("writing %s: %w", h.Name, err)
	}
	if h.Typeflag == tar.TypeReg {
		n, err := io.Copy(tw, r)
		if err != nil {
			return fmt.Errorf("writing %s: %w", h.Name, err)
		}
		if n != h.Size {
			return fmt.Errorf("writing %s: size changed while reading (%d != %d)", h.Name, n, h.Size)
		}
	}
	return nil
}
