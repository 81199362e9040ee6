// Package rtc emulates the MC146818 CMOS real-time clock at ports 0x70/0x71:
// the wall-clock time a guest reads at boot, plus 128 bytes of CMOS.
package rtc

import (
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
}

// New returns an RTC in 24-hour BCD mode, the PC default.
func New() *Device {
	d := &Device{now: time.Now}
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
	t := d.now().UTC().Add(d.offset)
	switch reg {
	case regSeconds:
		return d.encode(t.Second()), true
	case regMinutes:
		return d.encode(t.Minute()), true
	case regHours:
		h := t.Hour()
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
		return d.encode(int(t.Weekday()) + 1), true
	case regDay:
		return d.encode(t.Day()), true
	case regMonth:
		return d.encode(int(t.Month())), true
	case regYear:
		return d.encode(t.Year() % 100), true
	case regCentury:
		return d.encode(t.Year() / 100), true
	}
	return 0, false
}

// Read implements bus.Device.
func (d *Device) Read(off uint64, data []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(data)
	if off != 1 {
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
	case regStatusC, regStatusD:
		// read-only
	case regWeekday:
		// derived from the date
	default:
		d.cmos[d.index] = v
	}
}

// setTime moves the guest's clock so that the written field reads back v.
func (d *Device) setTime(reg, v byte) {
	t := d.now().UTC().Add(d.offset)
	year, month, day := t.Date()
	hour, min, sec := t.Clock()
	n := d.decode(v & 0x7f)
	switch reg {
	case regSeconds:
		sec = n
	case regMinutes:
		min = n
	case regHours:
		hour = n
		if d.cmos[regStatusB]&statusB24h == 0 {
			hour %= 12
			if v&0x80 != 0 {
				hour += 12
			}
		}
	case regDay:
		day = n
	case regMonth:
		month = time.Month(n)
	case regYear:
		year = year/100*100 + n
	case regCentury:
		year = n*100 + year%100
	}
	want := time.Date(year, month, day, hour, min, sec, t.Nanosecond(), time.UTC)
	d.offset += want.Sub(t)
}
