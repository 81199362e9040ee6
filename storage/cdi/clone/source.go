// Package clone is CDI's host-assisted clone. Source side (Send, run by
// cdi-cloner in the clone source pod): the source claim's image (disk.img
// of a Filesystem volume, the device of a Block one) streamed to the
// target's upload server over mutual TLS, the client certificate's common
// name being ClientNameFor the target, which that target's server accepts
// and no other client: not cdi-uploadproxy's certificate, and not another
// clone's (its Secret is readable in its source's namespace, and one
// tenant's clone must not write into another's; CDI's per-pair
// uploadClientName).
package clone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/storage/cdi/importer"
	"github.com/kubevmm/kubevmm/storage/cdi/uploadserver"
)

// ClientName is the prefix of the clone sources' client certificates'
// common names.
const ClientName = "cdi-clone-source"

// ClientNameFor is the common name of the client certificate of the clone
// into the target claim of that UID (which no user chooses).
func ClientNameFor(target types.UID) string { return ClientName + "-" + string(target) }

// ClientTLS is the client side of the mutual TLS: certFile/keyFile
// presented, the server verified against caFile.
func ClientTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("server CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("server CA %s: no certificates", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, Certificates: []tls.Certificate{cert}}, nil
}

// SourcePath is the image of a source volume mounted at dir (Filesystem)
// or attached as device (Block; dir is then empty).
func SourcePath(dir, device string) string {
	if device != "" {
		return device
	}
	return filepath.Join(dir, uploadserver.DiskImage)
}

// Send streams the image at path to the upload server at url (its
// PathUpload is appended), recording the share sent in p. The server
// answers only once the image is written and synced: a nil error means
// the target holds the image.
func Send(ctx context.Context, path, url string, tlsCfg *tls.Config, p *importer.Progress) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening the source: %w", err)
	}
	defer func() { _ = f.Close() }()
	// A device's size is where its end is (Stat says 0).
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("sizing the source %s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rewinding the source %s: %w", path, err)
	}
	body := &counter{r: f, size: size, p: p}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(url, "/")+uploadserver.PathUpload, body)
	if err != nil {
		return fmt.Errorf("the upload request: %w", err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("sending %s to %s: %w", path, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the upload server answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	p.Set(100)
	return nil
}

// counter records the share of size read in p.
type counter struct {
	r    io.Reader
	n    int64
	size int64
	p    *importer.Progress
}

func (c *counter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if c.size > 0 {
		// 99 at most until the server says the image is written.
		c.p.Set(min(99, float64(c.n)*100/float64(c.size)))
	}
	return n, err
}
