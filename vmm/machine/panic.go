package machine

import (
	"bytes"
	"io"
	"sync"
)

// panicMarker is what Linux prints first when it panics.
var panicMarker = []byte("Kernel panic - not syncing")

// panicWatch passes guest console output through and remembers the line
// of a kernel panic. The VM has no PCI for a pvpanic device (and its ACPI
// tables describe none), and with panic=-1 a panic ends in the same reset
// as a requested reboot; the console is the one place that tells them
// apart. A guest that prints the marker itself only changes how its own
// end is reported.
type panicWatch struct {
	w     io.Writer
	mu    sync.Mutex
	tail  []byte // last bytes, to match the marker across writes
	line  []byte // the panic line, once seen
	found bool
	done  bool // the line is complete
}

func (p *panicWatch) Write(b []byte) (int, error) {
	p.mu.Lock()
	if !p.done {
		p.scan(b)
	}
	p.mu.Unlock()
	return p.w.Write(b)
}

func (p *panicWatch) scan(b []byte) {
	if p.found {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b, p.done = b[:i], true
		}
		if len(p.line) < 256 {
			p.line = append(p.line, b...)
		}
		return
	}
	p.tail = append(p.tail, b...)
	if i := bytes.Index(p.tail, panicMarker); i >= 0 {
		p.found = true
		rest := p.tail[i:]
		p.tail = nil
		p.scan(rest)
		return
	}
	if keep := len(panicMarker) - 1; len(p.tail) > keep {
		p.tail = append(p.tail[:0], p.tail[len(p.tail)-keep:]...)
	}
}

// panicked returns the panic line, if the guest printed one.
func (p *panicWatch) panicked() (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(bytes.TrimRight(p.line, "\r")), p.found
}
