// Package rtc emulates the MC146818 CMOS real-time clock at ports 0x70/0x71:
// the wall-clock time a guest reads at boot, plus 128 bytes of CMOS.
package rtc

import (
	"fmt"
	"sync"
	"time"
)

// Ports relative to Base: index at 0, data at 1.
const (
	Base = 0x70
	Size = 2

	regSeconds  = 0x00
	regMinutes  = 0x02
	regHours    = 0x04
	regWeekday  = 0x06
	regDay      = 0x07
	regMonth    = 0x08
	regYear     = 0x09
	regStatusA  = 0x0a
	regStatusB  = 0x0b
	regStatusC  = 0x0c
	regStatusD  = 0x0d
	regCentury  = 0x32
	statusBBin  = 0x04 // binary (not BCD) values
	statusB24h  = 0x02
	statusBSet  = 0x80 // SET: the clock is halted while the guest writes it
	statusDVald = 0x80 // RTC has power, time is valid
)

// Device is the RTC. The guest sees host UTC plus an offset it can move by
// writing the time registers.
type Device struct {
	mu     sync.Mutex
	index  byte
	cmos   [128]byte
	offset time.Duration
	now    func() time.Time
	// held is the time the guest is writing while SET is on. Fields are
	// written one at a time (Linux: year, month, day, hours, minutes,
	// seconds), so applying each to the running clock would normalise
	// passing dates: from Jan 31, writing month 2 gives "Feb 31" = Mar 3.
	held *fields
}

// fields is a broken-down time; it may be invalid until all are written.
type fields struct {
	year, day, hour, min, sec, nsec int
	month                           time.Month
}

func split(t time.Time) fields {
	f := fields{nsec: t.Nanosecond()}
	f.year, f.month, f.day = t.Date()
	f.hour, f.min, f.sec = t.Clock()
	return f
}

func (f fields) time() time.Time {
	return time.Date(f.year, f.month, f.day, f.hour, f.min, f.sec, f.nsec, time.UTC)
}

// guestTime is what the guest's clock reads now.
func (d *Device) guestTime() time.Time { return d.now().UTC().Add(d.offset) }

// New returns an RTC in 24-hour BCD mode, the PC default, reading host
// UTC plus offset: a VM's clock set to another time (KubeVirt's
// clock.utc.offsetSeconds) or zone (clock.timezone: local time, as
// Windows keeps its RTC). The guest moves it from there by writing the
// time registers; snapshots and migrations carry it as any offset.
func New(offset time.Duration) *Device {
	d := &Device{now: time.Now, offset: offset}
	d.cmos[regStatusA] = 0x26 // 32.768 kHz time base, 1024 Hz rate; UIP never set
	d.cmos[regStatusB] = statusB24h
	d.cmos[regStatusD] = statusDVald
	return d
}

func (d *Device) encode(v int) byte {
	if d.cmos[regStatusB]&statusBBin != 0 {
		return byte(v)
	}
	return byte(v/10<<4 | v%10)
}

func (d *Device) decode(b byte) int {
	if d.cmos[regStatusB]&statusBBin != 0 {
		return int(b)
	}
	return int(b>>4)*10 + int(b&0xf)
}

func (d *Device) timeRegister(reg byte) (byte, bool) {
	t := split(d.guestTime())
	if d.held != nil {
		t = *d.held
	}
	switch reg {
	case regSeconds:
		return d.encode(t.sec), true
	case regMinutes:
		return d.encode(t.min), true
	case regHours:
		h := t.hour
		if d.cmos[regStatusB]&statusB24h == 0 {
			pm := h >= 12
			h %= 12
			if h == 0 {
				h = 12
			}
			b := d.encode(h)
			if pm {
				b |= 0x80
			}
			return b, true
		}
		return d.encode(h), true
	case regWeekday:
		return d.encode(int(t.time().Weekday()) + 1), true
	case regDay:
		return d.encode(t.day), true
	case regMonth:
		return d.encode(int(t.month)), true
	case regYear:
		return d.encode(t.year % 100), true
	case regCentury:
		return d.encode(t.year / 100), true
	}
	return 0, false
}

// Read implements bus.Device.
func (d *Device) Read(off uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(data)
	if off != 1 || len(data) == 0 {
		return
	}
	if v, ok := d.timeRegister(d.index); ok {
		data[0] = v
		return
	}
	data[0] = d.cmos[d.index]
	if d.index == regStatusC {
		d.cmos[regStatusC] = 0 // reading C acknowledges interrupts
	}
}

// Write implements bus.Device.
func (d *Device) Write(off uint64, data []byte) {
	if len(data) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v := data[0]
	if off == 0 {
		d.index = v & 0x7f // bit 7 masks NMI; nothing to mask here
		return
	}
	switch d.index {
	case regSeconds, regMinutes, regHours, regDay, regMonth, regYear, regCentury:
		d.setTime(d.index, v)
	case regStatusA:
		d.cmos[regStatusA] = v &^ 0x80 // UIP is read-only
	case regStatusB:
		switch {
		case v&statusBSet != 0 && d.held == nil:
			f := split(d.guestTime())
			d.held = &f
		case v&statusBSet == 0 && d.held != nil:
			// the clock restarts from the time the guest wrote
			d.offset = d.held.time().Sub(d.now().UTC())
			d.held = nil
		}
		d.cmos[regStatusB] = v
	case regStatusC, regStatusD:
		// read-only
	case regWeekday:
		// derived from the date
	default:
		d.cmos[d.index] = v
	}
}

// setTime makes the written field read back v: in the held time while
// SET is on, else by moving the guest's clock.
func (d *Device) setTime(reg, v byte) {
	if d.held != nil {
		d.setField(d.held, reg, v)
		return
	}
	t := d.guestTime()
	f := split(t)
	d.setField(&f, reg, v)
	d.offset += f.time().Sub(t)
}

func (d *Device) setField(f *fields, reg, v byte) {
	n := d.decode(v & 0x7f)
	switch reg {
	case regSeconds:
		f.sec = n
	case regMinutes:
		f.min = n
	case regHours:
		f.hour = n
		if d.cmos[regStatusB]&statusB24h == 0 {
			f.hour %= 12
			if v&0x80 != 0 {
				f.hour += 12
			}
		}
	case regDay:
		f.day = n
	case regMonth:
		f.month = time.Month(n)
	case regYear:
		f.year = f.year/100*100 + n
	case regCentury:
		f.year = n*100 + f.year%100
	}
}

// StateVersion is the version of State this code writes and reads.
const StateVersion = 1

// State is the RTC's state for snapshots. The guest's clock is kept as its
// offset from host UTC, so a restored guest reads the right wall time (a
// snapshot restored a day later shows the current day, as a real RTC on
// battery would).
type State struct {
	Version  int
	Index    byte
	CMOS     [128]byte
	OffsetNs int64
}

// Save returns the RTC's state.
func (d *Device) Save() State {
	d.mu.Lock()
	defer d.mu.Unlock()
	return State{Version: StateVersion, Index: d.index, CMOS: d.cmos, OffsetNs: int64(d.offset)}
}

// Restore loads a saved state.
func (d *Device) Restore(s State) error {
	if s.Version != StateVersion {
		return fmt.Errorf("rtc state version %d, this VMM reads %d", s.Version, StateVersion)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.index, d.cmos, d.offset, d.held = s.Index&0x7f, s.CMOS, time.Duration(s.OffsetNs), nil
	return nil
}
