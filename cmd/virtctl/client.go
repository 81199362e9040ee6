package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// apiClient talks to the API server, in one namespace.
type apiClient struct {
	cfg *rest.Config
	ns  string
}

// newAPIClient talks to the cluster kubeconfig (or the default loading
// rules) names, in namespace ns or the kubeconfig's.
func newAPIClient(ns, kubeconfig string) (*apiClient, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	overrides := &clientcmd.ConfigOverrides{}
	overrides.Context.Namespace = ns
	return clientFromConfig(clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides))
}

func clientFromConfig(cc clientcmd.ClientConfig) (*apiClient, error) {
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("namespace: %w", err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return &apiClient{cfg: cfg, ns: ns}, nil
}

// inNamespace is the same client in namespace ns ("": its own).
func (c *apiClient) inNamespace(ns string) *apiClient {
	if ns == "" || ns == c.ns {
		return c
	}
	return &apiClient{cfg: c.cfg, ns: ns}
}

func (c *apiClient) url(kind, name, sub string) string {
	return fmt.Sprintf("%s/apis/%s/namespaces/%s/%s/%s/%s", strings.TrimSuffix(c.cfg.Host, "/"), v1.SubresourceGroupVersion.String(), c.ns, kind, name, sub)
}

func (c *apiClient) do(ctx context.Context, method, url string, body io.Reader) ([]byte, error) {
	hc, err := rest.HTTPClientFor(c.cfg)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }() // read side: nothing to lose
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return nil, statusError(resp.StatusCode, b)
	}
	return b, nil
}

// apiError is the server's refusal: its HTTP status and message.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

// statusError prints the server's metav1.Status message, as virtctl does.
func statusError(code int, body []byte) error {
	var st metav1.Status
	if err := jsonUnmarshal(body, &st); err == nil && st.Message != "" {
		return &apiError{code: code, msg: st.Message}
	}
	return &apiError{code: code, msg: fmt.Sprintf("the server answered %d: %s", code, strings.TrimSpace(string(body)))}
}

// isStatus says whether err is the server's answer code.
func isStatus(err error, code int) bool {
	var e *apiError
	return errors.As(err, &e) && e.code == code
}

// put asks for the subresource sub of kind/name, for the command cmd (its
// errors' prefix).
func (c *apiClient) put(ctx context.Context, cmd, kind, name, sub string) error {
	_, err := c.do(ctx, http.MethodPut, c.url(kind, name, sub), bytes.NewReader([]byte("{}")))
	if err != nil {
		return fmt.Errorf("%s %s: %w", cmd, name, err)
	}
	return nil
}

func (c *apiClient) get(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, strings.TrimSuffix(c.cfg.Host, "/")+path, nil)
}

// dial opens the websocket of a streaming subresource (console,
// portforward/...) of kind/name through the API server.
func (c *apiClient) dial(kind, name, sub string) (*websocket.Conn, error) {
	tlsCfg, err := rest.TLSConfigFor(c.cfg)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{}
	if c.cfg.BearerToken != "" {
		hdr.Set("Authorization", "Bearer "+c.cfg.BearerToken)
	} else if c.cfg.BearerTokenFile != "" {
		if b, err := os.ReadFile(c.cfg.BearerTokenFile); err == nil {
			hdr.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
		}
	}
	d := websocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{v1.ConsoleSubprotocol}, HandshakeTimeout: 30 * time.Second, Proxy: http.ProxyFromEnvironment}
	url := "wss" + strings.TrimPrefix(c.url(kind, name, sub), "https")
	ws, resp, err := d.Dial(url, hdr)
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			return nil, statusError(resp.StatusCode, b)
		}
		return nil, err
	}
	return ws, nil
}
