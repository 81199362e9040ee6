// Package serial emulates a 16550A UART as found at the PC's COM1 (port
// 0x3f8, IRQ 4): what a Linux guest needs for its console, including the
// transmit-holding-register-empty interrupt its tty layer transmits from.
package serial

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// Register offsets from the base port.
const (
	regData = 0 // RBR (read) / THR (write); DLL when DLAB
	regIER  = 1 // DLM when DLAB
	regIIR  = 2 // IIR (read) / FCR (write)
	regLCR  = 3
	regMCR  = 4
	regLSR  = 5
	regMSR  = 6
	regSCR  = 7

	// Size is the number of ports the UART occupies.
	Size = 8

	ierRDI  = 0x01 // received data available
	ierTHRI = 0x02 // transmit holding register empty
	ierRLSI = 0x04 // receiver line status
	ierMSI  = 0x08 // modem status

	iirNoInt   = 0x01
	iirTHRI    = 0x02
	iirRDI     = 0x04
	iirFIFOEna = 0xc0

	fcrEnable   = 0x01
	fcrClearRcv = 0x02

	lcrDLAB = 0x80

	mcrDTR  = 0x01
	mcrRTS  = 0x02
	mcrOUT1 = 0x04
	mcrOUT2 = 0x08
	mcrLoop = 0x10

	lsrDR   = 0x01
	lsrOE   = 0x02
	lsrTHRE = 0x20
	lsrTEMT = 0x40

	msrCTS = 0x10
	msrDSR = 0x20
	msrRI  = 0x40
	msrDCD = 0x80

	// RxBufferSize bounds input waiting for the guest to read it.
	RxBufferSize = 64 << 10
)

// Metrics counts what the UART did.
type Metrics struct {
	TxBytes      atomic.Uint64
	RxBytes      atomic.Uint64
	RxDropped    atomic.Uint64
	MissedReads  atomic.Uint64 // RBR read with nothing received
	InterruptsUp atomic.Uint64
}

// StateVersion is the version of State this code writes and reads.
const StateVersion = 1

// State is the UART's register state (for snapshots).
type State struct {
	Version                                     int
	IER, LCR, MCR, LSR, MSR, SCR, DLL, DLM, FCR uint8
	THRPending                                  bool
	Rx                                          []byte
}

// Serial is one 16550A.
type Serial struct {
	mu      sync.Mutex
	s       State
	out     io.Writer
	irq     func(level bool)
	irqUp   bool
	Metrics Metrics
}

// New creates a UART that writes guest output to out and raises its
// interrupt line through irq (called with the UART's lock held; it must
// not call back into the UART).
func New(out io.Writer, irq func(level bool)) *Serial {
	return &Serial{
		s:   State{LSR: lsrTHRE | lsrTEMT, MSR: msrDCD | msrDSR | msrCTS, DLL: 0x0c, MCR: mcrOUT2},
		out: out,
		irq: irq,
	}
}

// Read implements bus.Device.
func (u *Serial) Read(off uint64, data []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	clear(data)
	if len(data) == 0 {
		return
	}
	s := &u.s
	var v byte
	switch off {
	case regData:
		if s.LCR&lcrDLAB != 0 {
			v = s.DLL
			break
		}
		if len(s.Rx) == 0 {
			u.Metrics.MissedReads.Add(1)
			break
		}
		v = s.Rx[0]
		s.Rx = s.Rx[1:]
		if len(s.Rx) == 0 {
			s.LSR &^= lsrDR
			s.Rx = nil
		}
	case regIER:
		if s.LCR&lcrDLAB != 0 {
			v = s.DLM
		} else {
			v = s.IER
		}
	case regIIR:
		v = u.iir()
		if v&0x0f == iirTHRI {
			// reading IIR acknowledges the THRE interrupt
			s.THRPending = false
		}
		if s.FCR&fcrEnable != 0 {
			v |= iirFIFOEna
		}
	case regLCR:
		v = s.LCR
	case regMCR:
		v = s.MCR
	case regLSR:
		v = s.LSR
		s.LSR &^= lsrOE
	case regMSR:
		if s.MCR&mcrLoop != 0 {
			// loopback: modem outputs appear as modem inputs
			m := s.MCR
			v = (m&mcrDTR)<<5 | (m&mcrRTS)<<3 | (m&mcrOUT1)<<4 | (m&mcrOUT2)<<4
		} else {
			v = s.MSR
		}
	case regSCR:
		v = s.SCR
	}
	data[0] = v
	u.update()
}

// Write implements bus.Device.
func (u *Serial) Write(off uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	s := &u.s
	v := data[0]
	switch off {
	case regData:
		if s.LCR&lcrDLAB != 0 {
			s.DLL = v
			break
		}
		if s.MCR&mcrLoop != 0 {
			u.receive([]byte{v})
		} else {
			u.Metrics.TxBytes.Add(1)
			// A console nobody reads must not stall the guest: write
			// errors are dropped here and surfaced by the writer itself.
			_, _ = u.out.Write([]byte{v})
		}
		// transmission is instantaneous: THR is empty again at once
		s.THRPending = true
	case regIER:
		if s.LCR&lcrDLAB != 0 {
			s.DLM = v
			break
		}
		old := s.IER
		s.IER = v & 0x0f
		if s.IER&ierTHRI != 0 && old&ierTHRI == 0 {
			s.THRPending = true
		}
	case regIIR:
		s.FCR = v & 0xc9
		if v&fcrClearRcv != 0 {
			s.Rx = nil
			s.LSR &^= lsrDR
		}
	case regLCR:
		s.LCR = v
	case regMCR:
		s.MCR = v & 0x1f
	case regLSR, regMSR:
		// read-only
	case regSCR:
		s.SCR = v
	}
	u.update()
}

// iir computes the interrupt identification, highest priority first.
func (u *Serial) iir() byte {
	s := &u.s
	switch {
	case s.IER&ierRDI != 0 && s.LSR&lsrDR != 0:
		return iirRDI
	case s.IER&ierTHRI != 0 && s.THRPending:
		return iirTHRI
	}
	return iirNoInt
}

func (u *Serial) update() {
	up := u.iir() != iirNoInt
	if up == u.irqUp {
		return
	}
	u.irqUp = up
	if up {
		u.Metrics.InterruptsUp.Add(1)
	}
	if u.irq != nil {
		u.irq(up)
	}
}

func (u *Serial) receive(b []byte) int {
	s := &u.s
	room := RxBufferSize - len(s.Rx)
	if room < len(b) {
		u.Metrics.RxDropped.Add(uint64(len(b) - room))
		s.LSR |= lsrOE
		b = b[:room]
	}
	if len(b) == 0 {
		return 0
	}
	s.Rx = append(s.Rx, b...)
	s.LSR |= lsrDR
	u.Metrics.RxBytes.Add(uint64(len(b)))
	return len(b)
}

// Input queues bytes typed at the console for the guest to read. Bytes past
// RxBufferSize are dropped and counted.
func (u *Serial) Input(b []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.receive(b)
	u.update()
}

// Save returns a copy of the register state.
func (u *Serial) Save() State {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.s
	s.Version = StateVersion
	s.Rx = append([]byte(nil), u.s.Rx...)
	return s
}

// Restore loads a saved register state and re-evaluates the interrupt line.
func (u *Serial) Restore(s State) error {
	if s.Version != StateVersion {
		return fmt.Errorf("serial state version %d, this VMM reads %d", s.Version, StateVersion)
	}
	if len(s.Rx) > RxBufferSize {
		return fmt.Errorf("serial state holds %d bytes of input, more than the %d-byte buffer", len(s.Rx), RxBufferSize)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.s = s
	u.s.Rx = append([]byte(nil), s.Rx...)
	u.irqUp = false
	if u.irq != nil {
		u.irq(false)
	}
	u.update()
	return nil
}
