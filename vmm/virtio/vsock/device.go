// Package vsock is virtio-vsock (virtio 1.2 section 5.10) with a host side
// like Firecracker's: one unix socket multiplexes the guest's streams. A
// host client connects to it and sends "CONNECT <port>\n" to reach the
// guest's port (answered "OK <host port>\n"); a guest connecting to the
// host (CID 2) on port P reaches the unix socket "<path>_P".
//
// All connection state lives on the device's worker goroutine; unix-socket
// I/O runs on per-connection goroutines that hand results to the worker
// through an inbox (closures run on the worker) and an eventfd.
package vsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/unixsock"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/event"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

const (
	rxQueue    = 0
	txQueue    = 1
	eventQueue = 2
	queueSize  = 256
	// bufAlloc is the receive buffer the host side advertises per
	// connection: the guest may have this much unforwarded data in flight.
	bufAlloc = 256 << 10
	// firstHostPort is where ports for host-initiated connections start.
	firstHostPort = 1 << 30
)

// MaxConnections bounds the streams of one device, in both directions
// together: each holds a host socket and two goroutines, and a guest can
// ask for new ones in a loop. Past it, a guest's REQUEST is answered RST
// and a host client is hung up on, counted as refused_connections. As
// many host clients again may be between accept and their CONNECT line.
const MaxConnections = 1024

// Config describes the device.
type Config struct {
	CID    uint64
	Socket string // host unix socket path
}

// Device is a virtio-vsock device.
type Device struct {
	virtio.Worker
	cid      uint64
	path     string
	listener *net.UnixListener
	config   [8]byte

	mu     sync.Mutex // activation, against Reset and Close
	rxq    *queue.Queue
	txq    *queue.Queue
	evq    *queue.Queue
	irq    virtio.Interrupt
	broken bool

	handshakes atomic.Int32 // host clients not yet past their CONNECT line

	wake    *event.FD
	inboxMu sync.Mutex
	inbox   []func()
	active  bool // guarded by inboxMu: posts are dropped while inactive

	// worker-owned
	conns    map[connKey]*conn
	ready    []*conn // connections with data for the guest
	ctrl     []ctrlPkt
	nextPort uint32
	rxChain  queue.Chain
	txChain  queue.Chain
	evChain  queue.Chain
	// resetDue: a transport reset waits for the guest to post an event
	// buffer.
	resetDue bool
	hdr      [HdrSize]byte

	Metrics Metrics
}

type connKey struct{ local, peer uint32 } // host port, guest port

type ctrlPkt struct {
	key   connKey
	op    uint16
	flags uint32
}

// New creates the device and starts listening on cfg.Socket.
func New(cfg Config) (*Device, error) {
	if cfg.CID < 3 || cfg.CID > 0xffffffff {
		return nil, fmt.Errorf("virtio-vsock: guest CID %d: must be 3..2^32-1", cfg.CID)
	}
	l, err := unixsock.Listen(cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("virtio-vsock: %w", err)
	}
	wake, err := event.NewFD()
	if err != nil {
		l.Close()
		return nil, err
	}
	d := &Device{cid: cfg.CID, path: cfg.Socket, listener: l, wake: wake, conns: map[connKey]*conn{}, nextPort: firstHostPort}
	binary.LittleEndian.PutUint64(d.config[:], cfg.CID)
	go d.accept()
	return d, nil
}

// Close stops listening and removes the socket. Reset the device first.
func (d *Device) Close() error {
	err := d.listener.Close()
	d.wake.Close()
	return err
}

// Type is virtio.TypeVsock.
func (d *Device) Type() virtio.DeviceType { return virtio.TypeVsock }

// Features offered (stream sockets only).
func (d *Device) Features() uint64 {
	return virtio.FVersion1 | virtio.FRingEventIdx | virtio.FRingIndirectDesc
}

// QueueMaxSizes is rx, tx, event.
func (d *Device) QueueMaxSizes() []uint16 { return []uint16{queueSize, queueSize, queueSize} }

// ReadConfig reads guest_cid.
func (d *Device) ReadConfig(off uint64, data []byte) { virtio.ReadConfigBytes(d.config[:], off, data) }

// WriteConfig ignores writes.
func (d *Device) WriteConfig(uint64, []byte) {}

// CID is the guest's context ID.
func (d *Device) CID() uint64 { return d.cid }

// Activate starts the worker.
func (d *Device) Activate(a virtio.Activation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(a.Queues) != 3 || len(a.Notify) != 3 {
		return fmt.Errorf("virtio-vsock: want 3 queues, got %d", len(a.Queues))
	}
	d.rxq, d.txq, d.evq, d.irq, d.broken = a.Queues[rxQueue], a.Queues[txQueue], a.Queues[eventQueue], a.Interrupt, false
	rxKick, txKick, evKick := a.Notify[rxQueue], a.Notify[txQueue], a.Notify[eventQueue]
	d.inboxMu.Lock()
	d.active = true
	d.inboxMu.Unlock()
	err := d.StartWorker(
		virtio.Watch{FD: rxKick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { rxKick.Drain(); d.rx() }},
		virtio.Watch{FD: txKick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { txKick.Drain(); d.tx() }},
		// the event queue only holds buffers for transport resets: a
		// kick matters only while one waits for a buffer
		virtio.Watch{FD: evKick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { evKick.Drain(); d.sendReset() }},
		virtio.Watch{FD: d.wake.Int(), Events: unix.EPOLLIN, Handle: func(uint32) { d.wake.Drain(); d.runInbox() }},
	)
	if err != nil {
		d.inboxMu.Lock()
		d.active = false
		d.inboxMu.Unlock()
	}
	return err
}

// post runs f on the worker; it reports false (and drops f) while the
// device is not active.
func (d *Device) post(f func()) bool {
	d.inboxMu.Lock()
	defer d.inboxMu.Unlock()
	if !d.active {
		return false
	}
	d.inbox = append(d.inbox, f)
	_ = d.wake.Signal() // fails only once closed, at teardown
	return true
}

func (d *Device) runInbox() {
	d.inboxMu.Lock()
	fs := d.inbox
	d.inbox = nil
	d.inboxMu.Unlock()
	for _, f := range fs {
		f()
	}
	d.rx()
}

// Reset stops the worker and drops every connection.
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.inboxMu.Lock()
	d.active = false
	d.inbox = nil
	d.inboxMu.Unlock()
	d.StopWorker()
	for _, c := range d.conns {
		c.close()
	}
	d.conns = map[connKey]*conn{}
	d.ready, d.ctrl = nil, nil
	d.rxq, d.txq, d.evq, d.irq = nil, nil, nil, nil
	d.resetDue = false
}

func (d *Device) fail(err error) {
	d.broken = true
	d.irq.Fail(err)
}

// TransportReset tells the guest driver that every stream it had is gone
// (VIRTIO_VSOCK_EVENT_TRANSPORT_RESET): after a restore or a migration
// their host ends stayed with the old VMM. The driver then resets its
// sockets and rereads the CID, so applications see a closed connection
// instead of one that hangs. A no-op unless the device is active.
func (d *Device) TransportReset() {
	d.post(func() {
		d.resetDue = true
		d.sendReset()
	})
}

// sendReset places a due reset event in the guest's next event buffer;
// without one it stays due until the guest posts one. Spare buffers stay
// with the device for later resets.
func (d *Device) sendReset() {
	if d.broken {
		return
	}
	returned := false
	for d.resetDue {
		ok, err := d.evq.Next(&d.evChain)
		if errors.Is(err, queue.ErrChain) {
			d.Metrics.MalformedChains.Add(1)
			d.evq.Push(&d.evChain, 0)
			returned = true
			continue
		}
		if err != nil {
			d.fail(fmt.Errorf("event queue: %w", err))
			return
		}
		if !ok {
			break
		}
		returned = true
		if d.evChain.WritableLen < EventSize {
			d.Metrics.MalformedChains.Add(1)
			d.evq.Push(&d.evChain, 0)
			continue
		}
		var ev [EventSize]byte // id 0: VIRTIO_VSOCK_EVENT_TRANSPORT_RESET
		d.evChain.Writable.WriteAt(ev[:], 0)
		d.evq.Push(&d.evChain, EventSize)
		d.resetDue = false
		d.Metrics.TransportResets.Add(1)
	}
	if returned && d.evq.NeedsInterrupt() {
		d.irq.UsedBuffer()
	}
}

// --- guest -> host ---

func (d *Device) tx() {
	if d.broken {
		return
	}
	d.broken = !virtio.Drain(d.txq, &d.txChain, d.irq, &d.Metrics.MalformedChains, "tx queue",
		func(c *queue.Chain) uint32 { d.handleTX(c); return 0 })
	d.rx()
}

func (d *Device) handleTX(ch *queue.Chain) {
	if ch.ReadableLen < HdrSize {
		d.Metrics.BadPackets.Add(1)
		return
	}
	ch.Readable.ReadAt(d.hdr[:], 0)
	h := ParseHdr(d.hdr[:])
	if err := CheckTX(h, d.cid, ch.ReadableLen-HdrSize); err != nil {
		d.Metrics.BadPackets.Add(1)
		return
	}
	d.Metrics.TxPackets.Add(1)
	k := connKey{local: h.DstPort, peer: h.SrcPort}
	c := d.conns[k]
	if c != nil {
		c.peerBufAlloc, c.peerFwdCnt = h.BufAlloc, h.FwdCnt
		d.schedule(c)
	}
	switch {
	case h.Op == OpRequest && c == nil && len(d.conns) >= MaxConnections:
		d.Metrics.RefusedConnections.Add(1)
		d.reply(k, OpRst, 0)
	case h.Op == OpRequest && c == nil:
		d.dial(k)
	case h.Op == OpRst:
		if c != nil {
			d.drop(c)
		}
	case c == nil:
		d.reply(k, OpRst, 0) // nothing here by that name
	case h.Op == OpResponse && c.state == stateConnecting:
		c.state = stateEstablished
		c.queueWrite([]byte(fmt.Sprintf("OK %d\n", c.key.local)))
		c.start(d)
	case h.Op == OpRW && c.state == stateEstablished:
		if c.rxCnt+h.Len-c.fwdCnt > bufAlloc {
			d.Metrics.CreditViolations.Add(1) // the guest ignored our credit
			d.reply(k, OpRst, 0)
			d.drop(c)
			return
		}
		payload := make([]byte, h.Len)
		ch.Readable.ReadAt(payload, HdrSize)
		c.rxCnt += h.Len
		c.queueWrite(payload)
		d.Metrics.TxBytes.Add(uint64(h.Len))
	case h.Op == OpCreditUpdate:
	case h.Op == OpCreditRequest:
		d.reply(k, OpCreditUpdate, 0)
	case h.Op == OpShutdown:
		if h.Flags&ShutdownSend != 0 {
			c.closeWrite() // after what the guest sent reaches the host
		}
		if h.Flags&(ShutdownSend|ShutdownRcv) == ShutdownSend|ShutdownRcv {
			d.reply(k, OpRst, 0)
			d.drop(c)
		}
	default:
		d.reply(k, OpRst, 0)
		d.drop(c)
	}
}

// dial connects a guest-initiated stream to the host's "<path>_<port>".
func (d *Device) dial(k connKey) {
	c := newConn(k, false)
	c.state = stateDialing
	d.conns[k] = c
	go func() {
		uds, err := net.Dial("unix", fmt.Sprintf("%s_%d", d.path, k.local))
		if !d.post(func() {
			if d.conns[k] != c {
				if uds != nil {
					uds.Close()
				}
				return
			}
			if err != nil {
				d.Metrics.ConnectFailures.Add(1)
				delete(d.conns, k)
				d.reply(k, OpRst, 0)
				return
			}
			c.uds = uds
			c.state = stateEstablished
			d.reply(k, OpResponse, 0)
			c.start(d)
			d.Metrics.Connections.Add(1)
		}) && uds != nil {
			uds.Close()
		}
	}()
}

// drop forgets a connection and closes its host side.
func (d *Device) drop(c *conn) {
	if d.conns[c.key] == c {
		delete(d.conns, c.key)
	}
	c.close()
}

// --- host -> guest ---

func (d *Device) reply(k connKey, op uint16, flags uint32) {
	d.ctrl = append(d.ctrl, ctrlPkt{key: k, op: op, flags: flags})
}

// schedule puts c on the ready list if it has data the guest can take.
func (d *Device) schedule(c *conn) {
	if !c.queued && len(c.pending) > 0 && c.credit() > 0 {
		c.queued = true
		d.ready = append(d.ready, c)
	}
}

func (d *Device) header(k connKey, op uint16, flags, n uint32) Hdr {
	h := Hdr{SrcCID: HostCID, DstCID: d.cid, SrcPort: k.local, DstPort: k.peer, Len: n, Type: TypeStream, Op: op, Flags: flags, BufAlloc: bufAlloc}
	if c := d.conns[k]; c != nil {
		h.FwdCnt = c.fwdCnt
		c.lastFwdSent = c.fwdCnt
	}
	return h
}

// rx fills the guest's receive buffers: control packets first, then data
// from the ready connections, as far as their credit allows.
func (d *Device) rx() {
	if d.broken || d.rxq == nil {
		return
	}
	q := d.rxq
	returned := 0
	for len(d.ctrl) > 0 || len(d.ready) > 0 {
		ok, err := q.Next(&d.rxChain)
		if errors.Is(err, queue.ErrChain) {
			d.Metrics.MalformedChains.Add(1)
			q.Push(&d.rxChain, 0)
			returned++
			continue
		}
		if err != nil {
			d.fail(fmt.Errorf("rx queue: %w", err))
			break
		}
		if !ok {
			break
		}
		ch := &d.rxChain
		if ch.WritableLen < HdrSize {
			d.Metrics.MalformedChains.Add(1)
			q.Push(ch, 0)
			returned++
			continue
		}
		var h Hdr
		var payload []byte
		if len(d.ctrl) > 0 {
			p := d.ctrl[0]
			d.ctrl = d.ctrl[1:]
			h = d.header(p.key, p.op, p.flags, 0)
		} else {
			c := d.ready[0]
			n := min(uint64(len(c.pending)), uint64(c.credit()), ch.WritableLen-HdrSize, MaxPayload)
			payload = c.pending[:n]
			c.pending = c.pending[n:]
			c.txCnt += uint32(n)
			h = d.header(c.key, OpRW, 0, uint32(n))
			if len(c.pending) == 0 || c.credit() == 0 {
				d.ready = d.ready[1:]
				c.queued = false
				if len(c.pending) == 0 {
					c.drained(d)
				}
			}
			d.Metrics.RxBytes.Add(n)
		}
		h.Put(d.hdr[:])
		ch.Writable.WriteAt(d.hdr[:], 0)
		ch.Writable.WriteAt(payload, HdrSize)
		q.Push(ch, uint32(HdrSize+len(payload)))
		d.Metrics.RxPackets.Add(1)
		returned++
	}
	if returned > 0 && q.NeedsInterrupt() {
		d.irq.UsedBuffer()
	}
}

// --- the host's unix socket ---

func (d *Device) accept() {
	for {
		uds, err := d.listener.Accept()
		if err != nil {
			return // listener closed
		}
		if d.handshakes.Add(1) > MaxConnections {
			d.handshakes.Add(-1)
			d.Metrics.RefusedConnections.Add(1)
			uds.Close()
			continue
		}
		go d.hostConnect(uds)
	}
}

// hostConnect reads "CONNECT <port>\n" and asks the guest for a stream.
func (d *Device) hostConnect(uds net.Conn) {
	port, err := readConnect(uds)
	d.handshakes.Add(-1)
	if err != nil {
		d.Metrics.BadConnects.Add(1)
		uds.Close()
		return
	}
	if !d.post(func() {
		if len(d.conns) >= MaxConnections {
			d.Metrics.RefusedConnections.Add(1)
			uds.Close()
			return
		}
		for d.conns[connKey{d.nextPort, port}] != nil {
			d.nextPort++
		}
		k := connKey{local: d.nextPort, peer: port}
		d.nextPort++
		if d.nextPort == 0 {
			d.nextPort = firstHostPort
		}
		c := newConn(k, true)
		c.uds = uds
		c.state = stateConnecting
		d.conns[k] = c
		d.reply(k, OpRequest, 0)
		d.Metrics.Connections.Add(1)
	}) {
		uds.Close() // no driver yet
	}
}

// readConnect reads the command line one byte at a time, so nothing the
// client sends after it is consumed here.
func readConnect(uds net.Conn) (uint32, error) {
	var line []byte
	b := make([]byte, 1)
	for len(line) < 32 {
		if _, err := uds.Read(b); err != nil {
			return 0, err
		}
		if b[0] == '\n' {
			var port uint32
			if _, err := fmt.Sscanf(string(line), "CONNECT %d", &port); err != nil {
				return 0, fmt.Errorf("bad command %q", line)
			}
			return port, nil
		}
		line = append(line, b[0])
	}
	return 0, errors.New("command too long")
}
