package serial

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type line struct {
	level bool
	edges int
}

func (l *line) set(v bool) {
	if v && !l.level {
		l.edges++
	}
	l.level = v
}

func newUART() (*Serial, *bytes.Buffer, *line) {
	var out bytes.Buffer
	irq := &line{}
	return New(&out, irq.set), &out, irq
}

func rd(u *Serial, off uint64) byte {
	b := []byte{0xaa}
	u.Read(off, b)
	return b[0]
}

func wr(u *Serial, off uint64, v byte) { u.Write(off, []byte{v}) }

func TestTransmitRaisesTHREInterruptLinuxWaitsFor(t *testing.T) {
	u, out, irq := newUART()
	// Linux's 8250 driver enables THRI and then only writes from its handler.
	wr(u, regIER, ierTHRI)
	require.True(t, irq.level, "enabling THRI with an empty THR raises the line")
	assert.Equal(t, byte(iirTHRI), rd(u, regIIR), "IIR names the THRE interrupt")
	assert.False(t, irq.level, "reading IIR acknowledges THRE")
	assert.Equal(t, byte(iirNoInt), rd(u, regIIR))

	for _, c := range []byte("hi\n") {
		wr(u, regData, c)
		require.True(t, irq.level, "each transmitted byte leaves THR empty again")
		rd(u, regIIR)
	}
	assert.Equal(t, "hi\n", out.String())
	assert.EqualValues(t, 3, u.Metrics.TxBytes.Load())
	assert.Equal(t, byte(lsrTHRE|lsrTEMT), rd(u, regLSR)&(lsrTHRE|lsrTEMT))
}

func TestReceiveOrderAndInterrupt(t *testing.T) {
	u, _, irq := newUART()
	wr(u, regIER, ierRDI)
	assert.False(t, irq.level)
	u.Input([]byte("ab"))
	assert.True(t, irq.level)
	assert.Equal(t, byte(iirRDI), rd(u, regIIR))
	assert.Equal(t, byte(lsrDR), rd(u, regLSR)&lsrDR)
	assert.Equal(t, byte('a'), rd(u, regData))
	assert.Equal(t, byte('b'), rd(u, regData))
	assert.Zero(t, rd(u, regLSR)&lsrDR, "data-ready clears once drained")
	assert.False(t, irq.level)
	assert.Zero(t, rd(u, regData), "reading an empty RBR gives 0")
	assert.EqualValues(t, 1, u.Metrics.MissedReads.Load())
}

func TestReceivedDataHasPriorityOverTHRE(t *testing.T) {
	u, _, _ := newUART()
	wr(u, regIER, ierRDI|ierTHRI)
	u.Input([]byte("x"))
	assert.Equal(t, byte(iirRDI), rd(u, regIIR))
	rd(u, regData)
	assert.Equal(t, byte(iirTHRI), rd(u, regIIR))
}

func TestInputBeyondBufferIsDroppedAndCounted(t *testing.T) {
	u, _, _ := newUART()
	u.Input(make([]byte, RxBufferSize+10))
	assert.EqualValues(t, 10, u.Metrics.RxDropped.Load())
	assert.NotZero(t, rd(u, regLSR)&lsrOE, "overrun is reported")
	assert.Zero(t, rd(u, regLSR)&lsrOE, "and cleared by reading LSR")
}

func TestDivisorLatchDoesNotTransmit(t *testing.T) {
	u, out, _ := newUART()
	wr(u, regLCR, lcrDLAB|0x03)
	wr(u, regData, 0x01)
	wr(u, regIER, 0x00)
	assert.Equal(t, byte(0x01), rd(u, regData))
	assert.Zero(t, out.Len(), "DLL writes are not output")
	wr(u, regLCR, 0x03)
	assert.Equal(t, byte(0), rd(u, regIER))
}

func TestLoopbackEchoesAndMirrorsModemLines(t *testing.T) {
	u, out, _ := newUART()
	wr(u, regMCR, mcrLoop|mcrRTS|mcrOUT2)
	assert.Equal(t, byte(msrCTS|msrDCD), rd(u, regMSR))
	wr(u, regData, 'z')
	assert.Zero(t, out.Len(), "loopback output stays inside the UART")
	assert.Equal(t, byte('z'), rd(u, regData))
}

func TestFIFOReportedAs16550A(t *testing.T) {
	u, _, _ := newUART()
	wr(u, regIIR, fcrEnable)
	assert.Equal(t, byte(iirFIFOEna|iirNoInt), rd(u, regIIR))
	u.Input([]byte("abc"))
	wr(u, regIIR, fcrEnable|fcrClearRcv)
	assert.Zero(t, rd(u, regLSR)&lsrDR, "FCR clears the receive FIFO")
}

func TestSaveRestoreKeepsPendingInput(t *testing.T) {
	u, _, _ := newUART()
	wr(u, regIER, ierRDI)
	u.Input([]byte("q"))
	s := u.Save()
	v, _, irq := newUART()
	require.NoError(t, v.Restore(s))
	assert.True(t, irq.level, "a restored pending interrupt is re-raised")
	assert.Equal(t, byte('q'), rd(v, regData))
}

func TestShortAndOutOfRangeAccessesAreHarmless(t *testing.T) {
	u, _, _ := newUART()
	u.Write(regData, nil)
	u.Read(regData, nil)
	u.Write(99, []byte{1})
	assert.Equal(t, byte(0), rd(u, 99))
}

func TestRestoreRefusesOtherVersions(t *testing.T) {
	u, _, _ := newUART()
	s := u.Save()
	s.Version = 99
	assert.ErrorContains(t, u.Restore(s), "version 99")
	s = u.Save()
	s.Rx = make([]byte, RxBufferSize+1)
	assert.Error(t, u.Restore(s))
}
