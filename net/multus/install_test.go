package multus_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubevmm/kubevmm/net/multus"
)

// TestInstall: what the node installer leaves is what the runtime and the
// plugin read: the binary, a conflist the plugin's own parser accepts
// pointing at the pod network, and a kubeconfig with a token file kept
// current.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	n := multus.Node{BinDir: filepath.Join(dir, "bin"), ConfDir: filepath.Join(dir, "net.d"), CNIDir: "/var/lib/cni/x",
		ClusterNetwork: "10-bridge.conflist", StateDir: filepath.Join(dir, "net.d", "multus.d"),
		Server: "https://10.96.0.1:443", TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt")}
	require.NoError(t, os.MkdirAll(n.BinDir, 0o755))
	require.NoError(t, os.MkdirAll(n.ConfDir, 0o755))
	require.NoError(t, os.WriteFile(n.TokenFile, []byte("tok1"), 0o600))
	require.NoError(t, os.WriteFile(n.CAFile, []byte("CA"), 0o644))
	self := filepath.Join(dir, "self")
	require.NoError(t, os.WriteFile(self, []byte("binary"), 0o700))

	require.NoError(t, multus.Install(n, self))
	b, err := os.ReadFile(filepath.Join(n.BinDir, multus.PluginType))
	require.NoError(t, err)
	assert.Equal(t, "binary", string(b))
	fi, err := os.Stat(filepath.Join(n.BinDir, multus.PluginType))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())

	list, err := libcni.ConfListFromFile(filepath.Join(n.ConfDir, multus.ConfFile))
	require.NoError(t, err)
	require.Len(t, list.Plugins, 1)
	assert.Equal(t, multus.NetworkName, list.Name)
	conf, err := multus.ParseConf(list.Plugins[0].Bytes)
	require.NoError(t, err)
	assert.Equal(t, multus.PluginType, conf.Type)
	assert.Equal(t, filepath.Join(n.ConfDir, "10-bridge.conflist"), conf.ClusterNetwork)
	assert.Equal(t, n.BinDir, conf.BinDir)
	assert.Equal(t, n.CNIDir, conf.CNIDir)

	cfg, err := clientcmd.BuildConfigFromFlags("", conf.Kubeconfig)
	require.NoError(t, err)
	assert.Equal(t, n.Server, cfg.Host)
	assert.Equal(t, filepath.Join(n.StateDir, "token"), cfg.BearerTokenFile)
	assert.Equal(t, filepath.Join(n.StateDir, "ca.crt"), cfg.CAFile)
	tok, err := os.ReadFile(cfg.BearerTokenFile)
	require.NoError(t, err)
	assert.Equal(t, "tok1", string(tok))

	changed, err := multus.RefreshToken(n)
	require.NoError(t, err)
	assert.False(t, changed, "same token")
	require.NoError(t, os.WriteFile(n.TokenFile, []byte("tok2"), 0o600))
	changed, err = multus.RefreshToken(n)
	require.NoError(t, err)
	assert.True(t, changed, "rotated token")
	tok, err = os.ReadFile(cfg.BearerTokenFile)
	require.NoError(t, err)
	assert.Equal(t, "tok2", string(tok))

	require.NoError(t, multus.Install(n, self), "again, over its own files")
	left, err := filepath.Glob(filepath.Join(dir, "*", "*.tmp"))
	require.NoError(t, err)
	assert.Empty(t, left)
}

func TestParseConf(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"not json", `{`, "configuration"},
		{"no cluster network", `{"cniVersion":"1.0.0","name":"m","type":"kubevmm-multus"}`, "clusterNetwork is required"},
		{"relative dir", `{"cniVersion":"1.0.0","name":"m","type":"kubevmm-multus","clusterNetwork":"x","binDir":"bin"}`, `binDir "bin" is not an absolute path`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := multus.ParseConf([]byte(tc.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	c, err := multus.ParseConf([]byte(`{"cniVersion":"1.0.0","name":"m","type":"kubevmm-multus","clusterNetwork":"podnet"}`))
	require.NoError(t, err)
	assert.Equal(t, multus.DefaultConfDir, c.ConfDir)
	assert.Equal(t, multus.DefaultBinDir, c.BinDir)
	assert.Equal(t, multus.DefaultCNIDir, c.CNIDir)
}
