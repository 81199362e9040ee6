package migration

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/migration/tlstest"
)

func issue(t *testing.T, ca *tlstest.CA, name string) *TLSFiles {
	l := ca.Issue(t, name)
	return &TLSFiles{Cert: l.Cert, Key: l.Key, CA: l.CA}
}

// firstBytes records the first bytes each accepted connection sends.
type firstBytes struct {
	net.Listener
	mu   sync.Mutex
	seen [][]byte
}

func (l *firstBytes) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, nil)
	return &recConn{Conn: c, l: l, i: len(l.seen) - 1}, nil
}

type recConn struct {
	net.Conn
	l *firstBytes
	i int
}

func (c *recConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.l.mu.Lock()
	if got := c.l.seen[c.i]; len(got) < 16 {
		c.l.seen[c.i] = append(got, b[:min(n, 16-len(got))]...)
	}
	c.l.mu.Unlock()
	return n, err
}

type rejection struct {
	addr net.Addr
	err  error
}

// tlsTarget listens on loopback TCP for authenticated sources.
func tlsTarget(t *testing.T, files *TLSFiles) (net.Listener, *firstBytes, chan rejection) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	fb := &firstBytes{Listener: raw}
	rejected := make(chan rejection, 16)
	l, err := Authenticate(fb, files, func(a net.Addr, err error) { rejected <- rejection{a, err} })
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, fb, rejected
}

func TestTLSMigrationAdmitsOnlyTheAuthenticatedSource(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = time.Hour
	ca, rogueCA := tlstest.NewCA(t, "cluster"), tlstest.NewCA(t, "rogue")
	targetFiles := issue(t, ca, "127.0.0.1")
	targetFiles.PeerName = "source.example"
	l, fb, rejected := tlsTarget(t, targetFiles)
	addr := l.Addr().String()

	// A client that connects and says nothing holds no one up: with no
	// deadline to save it (see handshakeTimeout above), a target that
	// waited for it would hang here.
	stuck, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer stuck.Close()

	// A plaintext source is refused: it gets no migration target.
	plain, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = plain.Write(append(Magic[:], make([]byte, 300)...))
	require.NoError(t, err)
	r := <-rejected
	assert.Equal(t, plain.LocalAddr().String(), r.addr.String())
	assert.ErrorContains(t, r.err, "TLS handshake")
	plain.Close()

	// A certificate from another CA, and one from the right CA for
	// another name, are refused once the target has seen them.
	for _, files := range []*TLSFiles{
		issue(t, rogueCA, "source.example"),
		issue(t, ca, "intruder.example"),
	} {
		files.CA = ca.File // they trust the target
		c, err := Dial(context.Background(), "tcp", addr, files, 10*time.Second)
		require.NoError(t, err, "TLS 1.3: the client finishes first, the server judges its certificate after")
		c.SetReadDeadline(time.Now().Add(time.Minute)) // an admitted client would wait forever
		_, err = io.ReadAll(c)
		assert.Error(t, err, "the target answers a refused client with an alert")
		c.Close()
		r := <-rejected
		assert.Equal(t, c.LocalAddr().String(), r.addr.String())
	}

	// The real source migrates, over TLS.
	const size = 1 << 20
	src := newMemSource(t, size)
	require.NoError(t, src.mem.WriteAt([]byte("guest data"), 3*pageSize))
	tgt := &memTarget{size: size}
	received := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			received <- err
			return
		}
		defer c.Close()
		_, err = Receive(context.Background(), c, tgt)
		received <- err
	}()
	sourceFiles := issue(t, ca, "source.example")
	conn, err := Dial(context.Background(), "tcp", addr, sourceFiles, 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint16(tls.VersionTLS13), conn.(*tls.Conn).ConnectionState().Version)
	st, err := Send(context.Background(), conn, src, Options{})
	conn.Close()
	require.NoError(t, err)
	require.NoError(t, <-received)
	defer tgt.mem.Close()
	assert.Equal(t, "completed", st.Phase)
	assert.True(t, tgt.started)
	assert.Equal(t, src.mem.Regions()[0].Data, tgt.mem.Regions()[0].Data)

	// On the wire, the stream that carried the VM began with a TLS
	// handshake record, not the migration magic.
	fb.mu.Lock()
	defer fb.mu.Unlock()
	last := fb.seen[len(fb.seen)-1]
	require.GreaterOrEqual(t, len(last), 2)
	assert.Equal(t, []byte{0x16, 0x03}, last[:2])
	assert.NotContains(t, string(last), string(Magic[:6]))
}

func TestTLSSourceVerifiesTheTargetName(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster")
	l, _, rejected := tlsTarget(t, issue(t, ca, "target-a.example"))
	go func() {
		for range rejected {
		}
	}()
	files := issue(t, ca, "source.example")
	files.PeerName = "target-b.example"
	_, err := Dial(context.Background(), "tcp", l.Addr().String(), files, 10*time.Second)
	assert.ErrorContains(t, err, "target-b.example")

	// by default the name is the address's host: 127.0.0.1 is not in
	// target-a's certificate either
	files.PeerName = ""
	_, err = Dial(context.Background(), "tcp", l.Addr().String(), files, 10*time.Second)
	assert.ErrorContains(t, err, "127.0.0.1")
}

func TestTLSFilesErrors(t *testing.T) {
	ca := tlstest.NewCA(t, "cluster")
	good := issue(t, ca, "x.example")
	for name, f := range map[string]TLSFiles{
		"no key":        {Cert: good.Cert, CA: good.CA},
		"missing cert":  {Cert: "/nonexistent.pem", Key: good.Key, CA: good.CA},
		"CA not PEM":    {Cert: good.Cert, Key: good.Key, CA: good.Key},
		"key for other": {Cert: good.Cert, Key: issue(t, ca, "y.example").Key, CA: good.CA},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.ServerConfig()
			assert.Error(t, err)
			_, err = f.ClientConfig("h:1")
			assert.Error(t, err)
		})
	}
	_, err := Dial(context.Background(), "unix", "/x.sock", good, time.Second)
	assert.ErrorContains(t, err, "TLS is for tcp")
}

func TestTLSHandshakeDeadlineDropsAStalledClient(t *testing.T) {
	defer func(d time.Duration) { handshakeTimeout = d }(handshakeTimeout)
	handshakeTimeout = 50 * time.Millisecond
	ca := tlstest.NewCA(t, "cluster")
	l, _, rejected := tlsTarget(t, issue(t, ca, "127.0.0.1"))
	stuck, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer stuck.Close()
	r := <-rejected
	assert.Equal(t, stuck.LocalAddr().String(), r.addr.String())
	assert.ErrorIs(t, r.err, context.DeadlineExceeded)
	_, err = stuck.Read(make([]byte, 1))
	assert.Error(t, err, "the target closed it")
}
