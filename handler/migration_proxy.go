package handler

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/kubevmm/kubevmm/api/vmispec"
)

// The migration stream between nodes is the handlers' to carry, as in
// KubeVirt: a launcher never holds a key and never listens on the pod
// network. The source launcher's VMM connects to a unix socket in its own
// socket directory, where its handler accepts and dials the target's
// handler over mutually authenticated TLS, naming the migration; the
// target's handler (MigrationServer) accepts that connection on its pod IP
// and vmispec.HandlerMigrationPort and joins it to a unix socket in the
// target launcher's directory, where the VMM waits for its guest.
//
// Both handlers present the virt-handler certificate (signed by the
// cluster's kubevmm CA, client and server usage) and accept only a peer
// whose certificate chains to that CA and is virt-handler's. Anything
// else that connects to the port (any pod on the network can) fails the
// handshake, is closed and counted, and the server goes on waiting for the
// real source: a stray or hostile connection can neither supply the guest
// nor spoil the migration.

// HandlerName is the common name of the virt-handler certificate.
const HandlerName = "kubevirt.io:system:node:virt-handler"

// proxyHandshakeTimeout bounds one TLS handshake, so a client that
// connects and stalls costs the target nothing but a goroutine for this
// long.
const proxyHandshakeTimeout = 10 * time.Second

// MigrationTLS are the handler's TLS configurations for the migration
// stream, from the same files as its server.
type MigrationTLS struct {
	Server *tls.Config // MigrationServer's
	Client *tls.Config // the source's dialer
}

// NewMigrationTLS builds both ends' configurations: TLS 1.3, the
// certificate reloaded per handshake (a rotated secret applies at once),
// and the peer verified against the CA and required to be virt-handler.
func NewMigrationTLS(f TLSFiles) (*MigrationTLS, error) {
	if _, err := caPool(f.CA); err != nil {
		return nil, err
	}
	load := func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("virt-handler certificate: %w", err)
		}
		return &c, nil
	}
	// Handlers have no fixed names or addresses (pod IPs): the peer is
	// identified by its certificate's common name, after the chain to the
	// CA was verified.
	peerIsHandler := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || cs.PeerCertificates[0].Subject.CommonName != HandlerName {
			return errors.New("peer certificate is not virt-handler's")
		}
		return nil
	}
	getCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return load() }
	server := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: getCert,
		// The CA bundle is re-read per handshake (see caPool): a source
		// whose leaf comes from the new CA or from the previous one
		// verifies while both are in the bundle.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			pool, err := caPool(f.CA)
			if err != nil {
				return nil, err
			}
			return &tls.Config{MinVersion: tls.VersionTLS13, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool,
				GetCertificate: getCert, VerifyConnection: peerIsHandler}, nil
		},
	}
	client := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return load()
		},
		// The chain is checked by hand against the CA (no server name to
		// match: a pod IP), then the name, in VerifyConnection.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the target presented no certificate")
			}
			pool, err := caPool(f.CA)
			if err != nil {
				return err
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("target certificate: %w", err)
			}
			return peerIsHandler(cs)
		},
	}
	return &MigrationTLS{Server: server, Client: client}, nil
}

// headerLimit bounds the line a source handler sends after the handshake:
// the migration's UID.
const headerLimit = 128

// MigrationServer is a handler's end of incoming migration streams: one
// TLS listener on MigrationPort for all migrations to this node. After the
// handshake the source's handler names the migration (its UID, one line);
// a migration this handler expects (its target launcher waits) gets the
// stream joined to its launcher's socket, once. Anything else is closed:
// a connection that fails the handshake is counted as refused.
type MigrationServer struct {
	TLS  *tls.Config
	Logf func(string, ...any)

	mu      sync.Mutex
	expect  map[string]expected // by migration UID
	refused int
}

type expected struct {
	pod   string
	dir   socketDir
	taken bool
}

// Expect registers a migration's target: its stream goes to the launcher
// socket vmispec.MigrationInSocket in the target pod's socket directory dir.
// pod names the target pod for Forget.
func (s *MigrationServer) Expect(uid, pod string, dir socketDir) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.expect == nil {
		s.expect = map[string]expected{}
	}
	if e, ok := s.expect[uid]; ok && e.dir == dir {
		return // level-triggered callers register again: keep taken
	}
	s.expect[uid] = expected{pod: pod, dir: dir}
}

// Forget drops what was expected for pod: its migration is over.
func (s *MigrationServer) Forget(pod string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, e := range s.expect {
		if e.pod == pod {
			delete(s.expect, uid)
		}
	}
}

// Refused is the number of connections that failed authentication.
func (s *MigrationServer) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// claim hands out the socket directory of an expected migration's
// target, once.
func (s *MigrationServer) claim(uid string) (socketDir, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.expect[uid]
	if !ok || e.taken {
		return socketDir{}, false
	}
	e.taken = true
	s.expect[uid] = e
	return e.dir, true
}

// Serve accepts streams on l until ctx ends. Each connection is handled
// on its own, so one that stalls holds up no other.
func (s *MigrationServer) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("migration server: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.handle(ctx, c)
		}()
	}
}

func (s *MigrationServer) handle(ctx context.Context, c net.Conn) {
	tc := tls.Server(c, s.TLS)
	hctx, cancel := context.WithTimeout(ctx, proxyHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		s.mu.Lock()
		s.refused++
		s.mu.Unlock()
		s.Logf("migration server: refused %s: %v", c.RemoteAddr(), err)
		c.Close()
		return
	}
	tc.SetReadDeadline(time.Now().Add(proxyHandshakeTimeout))
	uid, err := bufio.NewReaderSize(io.LimitReader(tc, headerLimit), headerLimit).ReadString('\n')
	tc.SetReadDeadline(time.Time{})
	uid = strings.TrimSuffix(uid, "\n")
	dir, ok := s.claim(uid)
	if err != nil || !ok {
		s.Logf("migration server: %s named migration %q, which this node does not expect (or already receives)", c.RemoteAddr(), uid)
		tc.Close()
		return
	}
	s.Logf("migration server: migration %s from %s", uid, c.RemoteAddr())
	dctx, cancel := context.WithTimeout(ctx, proxyHandshakeTimeout)
	vmm, err := dir.dial(dctx, vmispec.MigrationInSocket)
	cancel()
	if err != nil {
		tc.Close()
		s.Logf("migration server: migration %s: the target launcher: %v", uid, err)
		return
	}
	if err := join(ctx, tc, vmm); err != nil {
		s.Logf("migration server: migration %s ended: %v", uid, err)
	}
}

// migrationProxy is the source end of one migration's stream.
type migrationProxy struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *migrationProxy) stop() {
	p.cancel()
	<-p.done
}

// listenSource makes the unix socket vmispec.MigrationOutSocket in the source
// launcher's socket directory dir, that its VMM connects to, and joins
// that connection to a TLS connection to the target's handler at target,
// naming migration uid. The socket belongs to the launcher's user,
// launcherUID, and only it may connect: the launcher does not run as root.
func listenSource(dir socketDir, launcherUID int, target, uid string, cfg *tls.Config, logf func(string, ...any)) (*migrationProxy, error) {
	l, err := dir.listen(vmispec.MigrationOutSocket, launcherUID, launcherUID)
	if err != nil {
		return nil, fmt.Errorf("migration proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &migrationProxy{cancel: cancel, done: make(chan struct{})}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	go func() {
		defer close(p.done)
		defer cancel()
		defer dir.remove(vmispec.MigrationOutSocket)
		vmm, err := l.Accept()
		l.Close()
		if err != nil {
			return // stopped before the launcher connected
		}
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: proxyHandshakeTimeout}, Config: cfg}
		peer, err := d.DialContext(ctx, "tcp", target)
		if err == nil {
			_, err = io.WriteString(peer, uid+"\n")
		}
		if err != nil {
			// The VMM sees its stream end and fails the migration,
			// keeping its guest; this says why.
			vmm.Close()
			if peer != nil {
				peer.Close()
			}
			logf("migration proxy: connecting to the target's virt-handler at %s: %v", target, err)
			return
		}
		logf("migration proxy: migration %s to %s", uid, target)
		if err := join(ctx, vmm, peer); err != nil {
			logf("migration proxy: migration %s to %s ended: %v", uid, target, err)
		}
	}()
	return p, nil
}

// join copies both ways until either side ends, then closes both: the
// migration protocol is a conversation, so a side that is gone ends it.
func join(ctx context.Context, a, b net.Conn) error {
	stop := context.AfterFunc(ctx, func() { a.Close(); b.Close() })
	defer stop()
	errc := make(chan error, 2)
	cp := func(dst, src net.Conn) {
		_, err := io.Copy(dst, src)
		errc <- err
	}
	go cp(a, b)
	go cp(b, a)
	err := <-errc
	a.Close()
	b.Close()
	// errcheck wants the drop said; S1005 calls saying it unnecessary.
	_ = <-errc //nolint:staticcheck // the other direction's error: cut by the Close above
	return err
}

// proxies are a handler's live migration proxies, by migration UID and
// role, so a level-triggered reconcile starts each once.
type proxies struct {
	mu sync.Mutex
	m  map[string]*migrationProxy
}

// get returns the proxy under key, starting it with start if there is
// none. An ended proxy stays until drop: a migration gets one stream.
func (ps *proxies) get(key string, start func() (*migrationProxy, error)) (*migrationProxy, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p, ok := ps.m[key]; ok {
		return p, nil
	}
	p, err := start()
	if err != nil {
		return nil, err
	}
	if ps.m == nil {
		ps.m = map[string]*migrationProxy{}
	}
	ps.m[key] = p
	return p, nil
}

// drop stops and forgets the proxy under key.
func (ps *proxies) drop(key string) {
	ps.mu.Lock()
	p, ok := ps.m[key]
	delete(ps.m, key)
	ps.mu.Unlock()
	if ok {
		p.stop()
	}
}
