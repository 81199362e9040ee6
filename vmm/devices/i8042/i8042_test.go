package i8042

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func rd(d *Device, off uint64) byte {
	b := []byte{0xaa}
	d.Read(off, b)
	return b[0]
}

func wr(d *Device, off uint64, v byte) { d.Write(off, []byte{v}) }

func TestResetCallsOnResetOncePerCommand(t *testing.T) {
	calls := 0
	d := New(func() { calls++ })
	wr(d, offCommand, cmdReset)
	assert.Equal(t, 1, calls)
	wr(d, offCommand, cmdReset)
	wr(d, offCommand, cmdReset)
	assert.Equal(t, 3, calls, "each 0xfe pulses reset once")
	assert.Equal(t, 3, d.ResetCnt)

	for _, v := range []byte{0x00, 0xfd, 0xff, cmdReadCtr, cmdSelfTest} {
		wr(d, offCommand, v)
	}
	wr(d, offData, cmdReset)
	assert.Equal(t, 3, calls, "other commands and 0xfe on the data port don't reset")

	wr(d, offCommand, cmdWriteCtr)
	wr(d, offData, cmdReset)
	assert.Equal(t, 3, calls, "0xfe as the data byte of a command is data")
}

func TestResetCallbackRunsOutsideTheLock(t *testing.T) {
	// The VMM's reset handler stops the VM, which may touch the device
	// (or wait for a vCPU that does): it must not run under the lock.
	var d *Device
	done := make(chan byte, 1)
	d = New(func() { done <- rd(d, offCommand) })
	go wr(d, offCommand, cmdReset)
	select {
	case st := <-done:
		assert.NotZero(t, st&statusSysFlag)
	case <-time.After(5 * time.Second):
		t.Fatal("OnReset deadlocked on the device lock")
	}
}

func TestResetWithoutHandler(t *testing.T) {
	d := New(nil)
	wr(d, offCommand, cmdReset)
	assert.Equal(t, 1, d.ResetCnt)
}

func TestStatusAndCommandByte(t *testing.T) {
	d := New(nil)
	assert.Equal(t, byte(statusSysFlag), rd(d, offCommand), "after POST: system flag, nothing to read")

	wr(d, offCommand, cmdReadCtr)
	st := rd(d, offCommand)
	assert.NotZero(t, st&statusOBF, "command byte waiting")
	assert.NotZero(t, st&statusCmdData, "last write was a command")
	assert.Equal(t, byte(0x41), rd(d, offData), "default: keyboard interrupt, translation")
	assert.Zero(t, rd(d, offCommand)&statusOBF, "reading the data port empties the buffer")

	wr(d, offCommand, cmdWriteCtr)
	wr(d, offData, 0x65)
	assert.Zero(t, rd(d, offCommand)&statusCmdData, "last write was data")
	wr(d, offCommand, cmdReadCtr)
	assert.Equal(t, byte(0x65), rd(d, offData), "command byte written through 0x60")

	wr(d, offData, 0x12) // data with no command pending is dropped
	wr(d, offCommand, cmdReadCtr)
	assert.Equal(t, byte(0x65), rd(d, offData))

	wr(d, offCommand, cmdDisableKb)
	wr(d, offCommand, cmdReadCtr)
	assert.Equal(t, byte(0x75), rd(d, offData), "disable keyboard sets bit 4")
	wr(d, offCommand, cmdEnableKb)
	wr(d, offCommand, cmdReadCtr)
	assert.Equal(t, byte(0x65), rd(d, offData), "enable keyboard clears it")

	wr(d, offCommand, cmdSelfTest)
	assert.NotZero(t, rd(d, offCommand)&statusOBF)
	assert.Equal(t, byte(selfTestOK), rd(d, offData), "controller self-test passes")
}

func TestOddAccesses(t *testing.T) {
	d := New(nil)
	require.NotPanics(t, func() {
		d.Read(offData, nil)
		d.Write(offCommand, nil)
		d.Read(1, make([]byte, 1))
		d.Write(3, []byte{cmdReset})
	})
	assert.Zero(t, d.ResetCnt, "0xfe at an offset that isn't the command port")
	wide := []byte{0xff, 0xff}
	d.Read(offCommand, wide)
	assert.Equal(t, []byte{statusSysFlag, 0}, wide, "bytes past the register read as zero")
}

func TestSaveRestore(t *testing.T) {
	d := New(nil)
	d.Write(offCommand, []byte{cmdSelfTest}) // leaves 0x55 waiting for the guest
	e := New(nil)
	require.NoError(t, e.Restore(d.Save()))
	b := []byte{0}
	e.Read(offData, b)
	assert.Equal(t, byte(selfTestOK), b[0])
	s := d.Save()
	s.Version = 7
	assert.Error(t, e.Restore(s))
}
