package vsock

import (
	"net"
	"sync"
)

type connState int

const (
	stateDialing     connState = iota // guest asked; dialing the host socket
	stateConnecting                   // host asked; waiting for the guest's RESPONSE
	stateEstablished                  //
)

// conn is one stream. Fields without a comment belong to the worker.
type conn struct {
	key      connKey
	hostInit bool
	state    connState
	uds      net.Conn

	peerBufAlloc, peerFwdCnt uint32 // the guest's credit
	txCnt                    uint32 // bytes sent to the guest
	rxCnt                    uint32 // bytes received from the guest
	fwdCnt                   uint32 // of those, written to the host socket
	lastFwdSent              uint32
	skip                     int // bytes the writer sends that aren't the guest's ("OK <port>\n")

	pending      []byte // host data waiting for guest buffers or credit
	queued       bool   // on the device's ready list
	eof          bool   // the host closed its sending side
	shutdownSent bool
	closed       bool

	more      chan struct{} // the reader may read its next chunk
	done      chan struct{}
	closeOnce sync.Once

	// writer side, shared with the writer goroutine
	wmu    sync.Mutex
	wcond  *sync.Cond
	wbuf   []byte
	wclose bool // CloseWrite once wbuf is empty
	wstop  bool
}

func newConn(k connKey, hostInit bool) *conn {
	c := &conn{key: k, hostInit: hostInit, more: make(chan struct{}, 1), done: make(chan struct{})}
	c.wcond = sync.NewCond(&c.wmu)
	return c
}

// credit is how many more bytes the guest can take.
func (c *conn) credit() uint32 {
	inflight := c.txCnt - c.peerFwdCnt
	if inflight >= c.peerBufAlloc {
		return 0
	}
	return c.peerBufAlloc - inflight
}

func (c *conn) queueWrite(b []byte) {
	c.wmu.Lock()
	c.wbuf = append(c.wbuf, b...)
	c.wmu.Unlock()
	c.wcond.Signal()
}

func (c *conn) closeWrite() {
	c.wmu.Lock()
	c.wclose = true
	c.wmu.Unlock()
	c.wcond.Signal()
}

// close ends both goroutines and the host socket.
func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.closed = true
		close(c.done)
		c.wmu.Lock()
		c.wstop = true
		c.wmu.Unlock()
		c.wcond.Broadcast()
		if c.uds != nil {
			c.uds.Close()
		}
	})
}

// drained is called on the worker when pending has been sent.
func (c *conn) drained(d *Device) {
	if c.eof {
		if !c.shutdownSent {
			c.shutdownSent = true
			d.reply(c.key, OpShutdown, ShutdownSend)
		}
		return
	}
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// start runs the reader and writer goroutines of an established stream.
func (c *conn) start(d *Device) {
	c.wmu.Lock()
	c.skip = len(c.wbuf) // the "OK <port>\n" queued before start
	c.wmu.Unlock()
	go c.reader(d)
	go c.writer(d)
}

func (c *conn) reader(d *Device) {
	buf := make([]byte, MaxPayload)
	for {
		n, err := c.uds.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			if !d.post(func() {
				if c.closed {
					return
				}
				c.pending = append(c.pending, data...)
				d.schedule(c)
			}) {
				return
			}
			select {
			case <-c.more:
			case <-c.done:
				return
			}
		}
		if err != nil {
			d.post(func() {
				if c.closed {
					return
				}
				c.eof = true
				if len(c.pending) == 0 {
					c.drained(d)
				}
			})
			return
		}
	}
}

func (c *conn) writer(d *Device) {
	for {
		c.wmu.Lock()
		for len(c.wbuf) == 0 && !c.wclose && !c.wstop {
			c.wcond.Wait()
		}
		if c.wstop {
			c.wmu.Unlock()
			return
		}
		b := c.wbuf
		c.wbuf = nil
		closeW := c.wclose && len(b) == 0
		c.wmu.Unlock()
		if closeW {
			if cw, ok := c.uds.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite() // the peer may be gone already
			}
			return
		}
		if _, err := c.uds.Write(b); err != nil {
			d.post(func() {
				if !c.closed {
					d.reply(c.key, OpRst, 0)
					d.drop(c)
				}
			})
			return
		}
		n := len(b)
		d.post(func() {
			if c.closed {
				return
			}
			s := min(n, c.skip)
			c.skip -= s
			c.fwdCnt += uint32(n - s)
			if c.fwdCnt-c.lastFwdSent >= bufAlloc/4 {
				d.reply(c.key, OpCreditUpdate, 0)
			}
		})
	}
}
