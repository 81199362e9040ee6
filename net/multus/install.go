package multus

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ConfFile is the meta-plugin's conflist in the node's CNI configuration
// directory: first in name order, so the runtime takes it as the node's
// network.
const ConfFile = "00-multus.conflist"

// Node says where a node's CNI files are. The installer runs in a pod
// that mounts these host directories at the same paths, so every path it
// writes means the same on the host.
type Node struct {
	BinDir, ConfDir, CNIDir string
	// ClusterNetwork is the pod network's conf file, in ConfDir.
	ClusterNetwork string
	// StateDir holds the kubeconfig the plugin reads the cluster with,
	// and copies of the service account's token and CA it names.
	StateDir string
	// Server is the API server's URL as the host reaches it.
	Server string
	// TokenFile and CAFile are the installer pod's service account's.
	TokenFile, CAFile string
}

// Install puts the meta-plugin on the node: the binary self (the running
// installer's own executable) as BinDir/kubevmm-multus, the kubeconfig,
// token and CA under StateDir, then ConfDir/00-multus.conflist, last, so
// the runtime switches to the meta-plugin only once all it needs is there,
// and only if ConfDir holds a usable ClusterNetwork to delegate to.
// Every file is replaced whole (written aside, renamed), so a CNI call
// running meanwhile reads the old file or the new one.
func Install(n Node, self string) error {
	// The node would lose its pod network to a meta-plugin without one:
	// refuse before anything changes.
	cn := filepath.Join(n.ConfDir, n.ClusterNetwork)
	b, err := os.ReadFile(cn)
	if err != nil {
		return fmt.Errorf("the cluster network: %w", err)
	}
	if _, err := confList(b, ""); err != nil {
		return fmt.Errorf("the cluster network %s: %w", cn, err)
	}
	if err := copyFile(self, filepath.Join(n.BinDir, PluginType), 0o755); err != nil {
		return fmt.Errorf("installing the plugin binary: %w", err)
	}
	if err := os.MkdirAll(n.StateDir, 0o700); err != nil {
		return err
	}
	if _, err := RefreshToken(n); err != nil {
		return err
	}
	if err := copyFile(n.CAFile, filepath.Join(n.StateDir, "ca.crt"), 0o644); err != nil {
		return fmt.Errorf("copying the CA: %w", err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{Server: n.Server, CertificateAuthority: filepath.Join(n.StateDir, "ca.crt")}
	// A token file, not the token: the installer keeps it current as the
	// kubelet rotates the pod's (RefreshToken) and client-go rereads it.
	kc.AuthInfos["multus"] = &clientcmdapi.AuthInfo{TokenFile: filepath.Join(n.StateDir, "token")}
	kc.Contexts["multus"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "multus"}
	kc.CurrentContext = "multus"
	b, err = clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(n.StateDir, "kubeconfig"), b, 0o600); err != nil {
		return err
	}
	conf, err := ConfList(n)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(n.ConfDir, ConfFile), conf, 0o644)
}

// ConfList is the node's 00-multus.conflist.
func ConfList(n Node) ([]byte, error) {
	plugin := map[string]any{
		"type":           PluginType,
		"kubeconfig":     filepath.Join(n.StateDir, "kubeconfig"),
		"clusterNetwork": filepath.Join(n.ConfDir, n.ClusterNetwork),
		"confDir":        n.ConfDir,
		"cniDir":         n.CNIDir,
		"binDir":         n.BinDir,
	}
	return json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": NetworkName, "plugins": []any{plugin}}, "", "  ")
}

// RefreshToken copies the service account token to StateDir when it
// changed; it reports whether it did.
func RefreshToken(n Node) (bool, error) {
	tok, err := os.ReadFile(n.TokenFile)
	if err != nil {
		return false, fmt.Errorf("reading the service account token: %w", err)
	}
	dst := filepath.Join(n.StateDir, "token")
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, tok) {
		return false, nil
	}
	return true, writeFile(dst, tok, 0o600)
}

// InstallFile replaces dst whole with a copy of src (written beside it,
// renamed over it): a runtime running the old dst meanwhile is unharmed.
func InstallFile(src, dst string, mode os.FileMode) error { return copyFile(src, dst, mode) }

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return writeFile(dst, b, mode)
}

// writeFile replaces path whole: written beside it, then renamed over it.
func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing %s: %w", path, err)
	}
	return nil
}
