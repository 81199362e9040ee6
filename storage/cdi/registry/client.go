package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Options are a client's: how it reaches and authenticates to registries.
type Options struct {
	// Username and Password (a DataVolume secretRef's accessKeyId and
	// secretKey) answer a Basic challenge, or are sent to the token
	// service of a Bearer one.
	Username, Password string
	// CAs are PEM certificates trusted besides the system's
	// (certConfigMap).
	CAs [][]byte
	// Insecure skips TLS verification, and speaks plain http to a
	// registry that answers TLS with http (CDIConfig insecureRegistries).
	Insecure bool
	// Architecture picks the manifest from an image index (default
	// amd64; the OS is always linux).
	Architecture string
	// Timeout bounds connecting, the TLS handshake and the wait for a
	// response's headers (default 30s), so that an unreachable registry
	// is an error, not a hang; bodies stream for as long as they flow.
	Timeout time.Duration
}

// Client talks to registries. It is safe for concurrent use.
type Client struct {
	o    Options
	http *http.Client

	mu     sync.Mutex
	tokens map[string]string // "host repo" -> bearer token
	plain  map[string]bool   // hosts that spoke http to an insecure client
}

// New makes a client.
func New(o Options) (*Client, error) {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Architecture == "" {
		o.Architecture = "amd64"
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.Insecure {
		tc.InsecureSkipVerify = true //nolint:gosec // the cluster admin listed this registry as insecure (CDIConfig insecureRegistries)
	} else if len(o.CAs) > 0 {
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		for i, pem := range o.CAs {
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("registry CA %d: no PEM certificate in it", i)
			}
		}
		tc.RootCAs = pool
	}
	d := &net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   o.Timeout,
		ResponseHeaderTimeout: o.Timeout,
		MaxIdleConnsPerHost:   4,
	}
	return &Client{o: o, http: &http.Client{Transport: tr}, tokens: map[string]string{}, plain: map[string]bool{}}, nil
}

// apiError is a registry's error answer.
type apiError struct {
	Status int
	Errors []struct {
		Code, Message string
	} `json:"errors"`
}

func (e *apiError) Error() string {
	var msgs []string
	for _, x := range e.Errors {
		msgs = append(msgs, x.Code+": "+x.Message)
	}
	s := fmt.Sprintf("status %d %s", e.Status, http.StatusText(e.Status))
	if len(msgs) > 0 {
		s += " (" + strings.Join(msgs, "; ") + ")"
	}
	return s
}

// ErrNotFound is returned (wrapped) for an image, manifest or blob the
// registry does not have.
var ErrNotFound = errors.New("not found")

// ErrUnauthorized is returned (wrapped) when the registry refuses the
// credentials (or their absence).
var ErrUnauthorized = errors.New("unauthorized")

func readAPIError(resp *http.Response) error {
	e := &apiError{Status: resp.StatusCode}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = json.Unmarshal(body, e)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrNotFound, e)
	case http.StatusUnauthorized, http.StatusForbidden:
		return fmt.Errorf("%w: %w", ErrUnauthorized, e)
	}
	return e
}

// do sends one API request for repository ref.Repo at path (after /v2/),
// answering an authentication challenge once. body, if any, must be
// replayable: getBody makes it anew for the retry. The caller closes the
// response's body; a status outside want is returned as an error.
func (c *Client) do(ctx context.Context, ref Ref, method, path string, hdr http.Header, getBody func() (io.Reader, error), want ...int) (*http.Response, error) {
	key := ref.Host + " " + ref.Repo
	for attempt := 0; ; attempt++ {
		req, err := c.request(ctx, ref.Host, method, path, hdr, getBody)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		tok := c.tokens[key]
		c.mu.Unlock()
		switch {
		case tok == "basic":
			req.SetBasicAuth(c.o.Username, c.o.Password)
		case tok != "":
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.http.Do(req)
		if err != nil && c.o.Insecure && isHTTPAnswer(err) && !c.isPlain(ref.Host) {
			c.mu.Lock()
			c.plain[ref.Host] = true
			c.mu.Unlock()
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, req.URL.Redacted(), err)
		}
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 {
			ch := resp.Header.Get("WWW-Authenticate")
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			if err := c.authenticate(ctx, key, ch, ref); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, req.URL.Redacted(), err)
			}
			continue
		}
		for _, w := range want {
			if resp.StatusCode == w {
				return resp, nil
			}
		}
		defer func() { _ = resp.Body.Close() }()
		return nil, fmt.Errorf("%s %s: %w", method, req.URL.Redacted(), readAPIError(resp))
	}
}

func (c *Client) isPlain(host string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.plain[host]
}

// isHTTPAnswer reports whether a TLS handshake failed because the server
// answered in plain http.
func isHTTPAnswer(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

func (c *Client) request(ctx context.Context, host, method, path string, hdr http.Header, getBody func() (io.Reader, error)) (*http.Request, error) {
	scheme := "https"
	if c.isPlain(host) {
		scheme = "http"
	}
	u := path
	if !strings.HasPrefix(path, "http://") && !strings.HasPrefix(path, "https://") {
		u = scheme + "://" + host + "/v2/" + path
	}
	var body io.Reader
	if getBody != nil {
		var err error
		if body, err = getBody(); err != nil {
			return nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("registry request %s %s: %w", method, u, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if sk, ok := body.(interface{ Size() int64 }); ok {
		req.ContentLength = sk.Size()
	}
	return req, nil
}

// authenticate answers a WWW-Authenticate challenge: Basic with the
// credentials, or Bearer with a token from the realm it names, scoped to
// pull and push on the repository.
func (c *Client) authenticate(ctx context.Context, key, challenge string, ref Ref) error {
	scheme, params := parseChallenge(challenge)
	switch strings.ToLower(scheme) {
	case "basic":
		if c.o.Username == "" && c.o.Password == "" {
			return fmt.Errorf("%w: the registry asks for credentials (Basic) and none were given", ErrUnauthorized)
		}
		c.mu.Lock()
		c.tokens[key] = "basic"
		c.mu.Unlock()
		return nil
	case "bearer":
	default:
		return fmt.Errorf("%w: unsupported authentication challenge %q", ErrUnauthorized, challenge)
	}
	realm := params["realm"]
	u, err := url.Parse(realm)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("%w: bearer challenge with an unusable realm %q", ErrUnauthorized, realm)
	}
	q := u.Query()
	if s := params["service"]; s != "" {
		q.Set("service", s)
	}
	scope := params["scope"]
	if scope == "" {
		scope = "repository:" + ref.Repo + ":pull"
	}
	q.Set("scope", scope)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fmt.Errorf("token request: %w", err)
	}
	if c.o.Username != "" || c.o.Password != "" {
		req.SetBasicAuth(c.o.Username, c.o.Password)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("token from %s: %w", u.Redacted(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("token from %s: %w", u.Redacted(), readAPIError(resp))
	}
	var t struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&t); err != nil {
		return fmt.Errorf("token from %s: %w", u.Redacted(), err)
	}
	tok := t.Token
	if tok == "" {
		tok = t.AccessToken
	}
	if tok == "" {
		return fmt.Errorf("%w: token service %s gave no token", ErrUnauthorized, u.Redacted())
	}
	c.mu.Lock()
	c.tokens[key] = tok
	c.mu.Unlock()
	return nil
}

// parseChallenge splits `Scheme k="v", k2="v2"`.
func parseChallenge(s string) (string, map[string]string) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(s), " ")
	params := map[string]string{}
	for rest = strings.TrimSpace(rest); rest != ""; {
		k, after, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		k = strings.ToLower(strings.TrimSpace(k))
		var v string
		if strings.HasPrefix(after, `"`) {
			end := strings.Index(after[1:], `"`)
			if end < 0 {
				break
			}
			v, after = after[1:1+end], after[2+end:]
		} else {
			v, after, _ = strings.Cut(after, ",")
			after = "," + after
		}
		params[k] = v
		rest = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(after), ","))
	}
	return scheme, params
}
