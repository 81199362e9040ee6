package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readTar returns the regular files and the headers of a tar stream.
func readTar(t *testing.T, data []byte) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, hdrs := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, hdrs
		}
		require.NoError(t, err)
		hdrs[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			files[h.Name] = b
		}
	}
}

func TestBuildDockerArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	require.NoError(t, os.WriteFile(bin, []byte("#!binary"), 0o600))
	s := spec{
		Tag: "localhost/kubevmm/test:devel", Entrypoint: []string{"/usr/bin/prog"}, User: "65532",
		Env: []string{"PATH=/usr/bin"}, WorkingDir: "/", Labels: map[string]string{"a": "b"},
		Files: []fileSpec{{Dest: "/usr/bin/prog", Src: bin, Mode: 0o755}},
	}
	var out bytes.Buffer
	id, err := build(&out, s)
	require.NoError(t, err)

	files, _ := readTar(t, out.Bytes())
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	require.NoError(t, json.Unmarshal(files["manifest.json"], &manifest))
	require.Len(t, manifest, 1)
	assert.Equal(t, []string{s.Tag}, manifest[0].RepoTags)
	assert.Equal(t, id+".json", manifest[0].Config)

	cfgBytes := files[manifest[0].Config]
	sum := sha256.Sum256(cfgBytes)
	assert.Equal(t, id, hex.EncodeToString(sum[:]), "the image ID is the config digest")
	var cfg struct {
		Architecture, OS string
		Config           struct {
			Entrypoint []string
			User       string
		}
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	require.NoError(t, json.Unmarshal(cfgBytes, &cfg))
	assert.Equal(t, "amd64", cfg.Architecture)
	assert.Equal(t, []string{"/usr/bin/prog"}, cfg.Config.Entrypoint)
	assert.Equal(t, "65532", cfg.Config.User)

	layer := files[manifest[0].Layers[0]]
	lsum := sha256.Sum256(layer)
	assert.Equal(t, []string{"sha256:" + hex.EncodeToString(lsum[:])}, cfg.RootFS.DiffIDs, "diff_id is the layer digest")

	lfiles, lhdrs := readTar(t, layer)
	assert.Equal(t, []byte("#!binary"), lfiles["usr/bin/prog"])
	assert.Equal(t, int64(0o755), lhdrs["usr/bin/prog"].Mode, "mode from -file, not the source's")
	assert.Equal(t, 0, lhdrs["usr/bin/prog"].Uid)
	assert.Equal(t, int64(0), lhdrs["usr/bin/prog"].ModTime.Unix())
	assert.Contains(t, lhdrs, "usr/", "parent directories are present")
	assert.Contains(t, lhdrs, "usr/bin/")
	assert.Equal(t, int64(0o1777), lhdrs["tmp/"].Mode)
	assert.Contains(t, string(lfiles["etc/passwd"]), "nonroot:x:65532")

	// Same inputs, same image.
	var again bytes.Buffer
	id2, err := build(&again, s)
	require.NoError(t, err)
	assert.Equal(t, id, id2)
	assert.Equal(t, out.Bytes(), again.Bytes())
}

func TestParseFile(t *testing.T) {
	tests := []struct {
		in      string
		want    fileSpec
		wantErr bool
	}{
		{in: "/usr/bin/x=bin/x:0755", want: fileSpec{Dest: "/usr/bin/x", Src: "bin/x", Mode: 0o755}},
		{in: "/x=bin/x", want: fileSpec{Dest: "/x", Src: "bin/x", Mode: -1}},
		{in: "/x=C:notamode", want: fileSpec{Dest: "/x", Src: "C:notamode", Mode: -1}},
		{in: "relative=bin/x", wantErr: true},
		{in: "/x", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseFile(tc.in)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestMissingSource(t *testing.T) {
	_, err := build(io.Discard, spec{Tag: "x", Files: []fileSpec{{Dest: "/x", Src: "/does/not/exist", Mode: -1}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "adding /x")
}
