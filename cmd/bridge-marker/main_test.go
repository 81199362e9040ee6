package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// install-plugins puts bridge and tuning into the bin directory,
// executable, replacing what was there; a missing plugin is named; the
// bin directory is required.
func TestInstallPlugins(t *testing.T) {
	from, bin := t.TempDir(), t.TempDir()
	for _, p := range Plugins {
		require.NoError(t, os.WriteFile(filepath.Join(from, p), []byte("new "+p), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(bin, "bridge"), []byte("old bridge"), 0o755))
	require.NoError(t, installPlugins([]string{"--from", from, "--bin-dir", bin}))
	for _, p := range Plugins {
		b, err := os.ReadFile(filepath.Join(bin, p))
		require.NoError(t, err)
		assert.Equal(t, "new "+p, string(b))
		st, err := os.Stat(filepath.Join(bin, p))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o755), st.Mode().Perm(), p)
	}

	require.NoError(t, os.Remove(filepath.Join(from, "tuning")))
	assert.ErrorContains(t, installPlugins([]string{"--from", from, "--bin-dir", bin}), "installing the tuning plugin")
	assert.ErrorContains(t, installPlugins([]string{"--from", from}), "usage: bridge-marker install-plugins --bin-dir DIR")
}
