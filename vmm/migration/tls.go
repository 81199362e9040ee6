package migration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"
)

// TLSFiles are one end's credentials for a mutually authenticated stream
// (TLS 1.3): its certificate and key, and the CA that must have signed
// the peer's certificate. Paths are read by the process that opens the
// stream.
type TLSFiles struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
	CA   string `json:"ca"`
	// PeerName is the name the peer's certificate must carry (a DNS, IP
	// or URI SAN, or the CN). On the source it is the target's server
	// name (default: the host of the address dialled); on the target,
	// the source's name (default: any certificate the CA signed).
	PeerName string `json:"peer_name,omitempty"`
}

// handshakeTimeout bounds a TLS handshake, so a client that connects and
// stalls costs the target no more than this (a variable for tests).
var handshakeTimeout = 10 * time.Second

// maxHandshakes bounds the handshakes a target runs at once (each holds a
// file descriptor); connections beyond are closed at once.
const maxHandshakes = 256

func (f *TLSFiles) load() (tls.Certificate, *x509.CertPool, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return tls.Certificate{}, nil, errors.New("TLS needs a certificate, its key and a CA")
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("TLS certificate: %w", err)
	}
	pem, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("TLS CA %s: no PEM certificate in it", f.CA)
	}
	return cert, pool, nil
}

// ServerConfig is the target's TLS configuration: TLS 1.3, a client
// certificate signed by the CA required, and carrying PeerName if set.
func (f *TLSFiles) ServerConfig() (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}
	if name := f.PeerName; name != "" {
		// Runs after the chain was verified against the CA.
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !certNames(cs.PeerCertificates[0], name) {
				return fmt.Errorf("migration source certificate is not for %q", name)
			}
			return nil
		}
	}
	return cfg, nil
}

// certNames reports whether c is issued to name: a DNS or IP SAN (as for
// a server), a URI SAN, or the subject's CN.
func certNames(c *x509.Certificate, name string) bool {
	if c.VerifyHostname(name) == nil || c.Subject.CommonName == name {
		return true
	}
	return slices.ContainsFunc(c.URIs, func(u *url.URL) bool { return u.String() == name })
}

// ClientConfig is the source's TLS configuration for dialling addr
// (host:port): TLS 1.3, the target's certificate signed by the CA and
// issued to PeerName, or to addr's host.
func (f *TLSFiles) ClientConfig(addr string) (*tls.Config, error) {
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	name := f.PeerName
	if name == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("TLS server name from %q: %w", addr, err)
		}
		name = host
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   name,
	}, nil
}

// Dial connects a source to its target: over TLS when files is set (the
// handshake included in timeout), else plain.
func Dial(ctx context.Context, network, addr string, files *TLSFiles, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if files == nil {
		return d.DialContext(ctx, network, addr)
	}
	if network != "tcp" {
		return nil, fmt.Errorf("TLS is for tcp: addresses, not %s", network)
	}
	cfg, err := files.ClientConfig(addr)
	if err != nil {
		return nil, err
	}
	return (&tls.Dialer{NetDialer: d, Config: cfg}).DialContext(ctx, network, addr)
}

// authListener hands out only connections whose TLS handshake succeeded.
// Handshakes run in their own goroutines under handshakeTimeout, so a
// client that stalls or fails never holds up the next one.
type authListener struct {
	net.Listener
	cfg      *tls.Config
	onReject func(addr net.Addr, err error)
	ready    chan net.Conn
	slots    chan struct{}
	timeout  time.Duration   // of each handshake
	ctx      context.Context // cancelled by Close
	cancel   context.CancelFunc
	err      error // why the accept loop ended, read after ready is closed
}

// Authenticate wraps a target's listener: Accept returns only TLS
// connections from clients with a certificate that files accept.
// Rejected connections are closed and passed to onReject (may be nil).
func Authenticate(l net.Listener, files *TLSFiles, onReject func(addr net.Addr, err error)) (net.Listener, error) {
	cfg, err := files.ServerConfig()
	if err != nil {
		return nil, err
	}
	if onReject == nil {
		onReject = func(net.Addr, error) {}
	}
	a := &authListener{Listener: l, cfg: cfg, onReject: onReject, ready: make(chan net.Conn),
		slots: make(chan struct{}, maxHandshakes), timeout: handshakeTimeout}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	go a.acceptLoop()
	return a, nil
}

func (a *authListener) acceptLoop() {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		close(a.ready)
	}()
	for {
		c, err := a.Listener.Accept()
		if err != nil {
			a.err = err
			return
		}
		select {
		case a.slots <- struct{}{}:
		default:
			c.Close()
			a.onReject(c.RemoteAddr(), fmt.Errorf("more than %d TLS handshakes at once", maxHandshakes))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc, err := a.handshake(c)
			<-a.slots
			if err != nil {
				c.Close()
				a.onReject(c.RemoteAddr(), err)
				return
			}
			select {
			case a.ready <- tc:
			case <-a.ctx.Done():
				tc.Close()
			}
		}()
	}
}

// handshake authenticates c; HandshakeContext closes c when the deadline
// passes or the listener is closed.
func (a *authListener) handshake(c net.Conn) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	tc := tls.Server(c, a.cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return tc, nil
}

// Accept returns the next authenticated connection.
func (a *authListener) Accept() (net.Conn, error) {
	c, ok := <-a.ready
	if !ok {
		return nil, a.err
	}
	return c, nil
}

// Close stops accepting; connections in their handshake are closed.
func (a *authListener) Close() error {
	a.cancel()
	return a.Listener.Close()
}
