package rtc

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clock is an injectable host clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newRTC(t time.Time) (*Device, *clock) {
	return newRTCOffset(t, 0)
}

func newRTCOffset(t time.Time, offset time.Duration) (*Device, *clock) {
	c := &clock{t: t}
	d := New(offset)
	d.now = c.now
	return d, c
}

func get(d *Device, reg byte) byte {
	d.Write(0, []byte{reg})
	b := []byte{0xaa}
	d.Read(1, b)
	return b[0]
}

func set(d *Device, reg, v byte) {
	d.Write(0, []byte{reg})
	d.Write(1, []byte{v})
}

// Saturday 9 March 2024, 21:45:07 UTC.
var sat = time.Date(2024, time.March, 9, 21, 45, 7, 0, time.UTC)

func regs(d *Device) [8]byte {
	return [8]byte{get(d, regSeconds), get(d, regMinutes), get(d, regHours), get(d, regWeekday),
		get(d, regDay), get(d, regMonth), get(d, regYear), get(d, regCentury)}
}

func TestReadTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		statusB byte
		at      time.Time
		want    [8]byte // sec, min, hour, weekday, day, month, year, century
	}{
		{"BCD 24h (PC default)", statusB24h, sat, [8]byte{0x07, 0x45, 0x21, 0x07, 0x09, 0x03, 0x24, 0x20}},
		{"binary 24h", statusB24h | statusBBin, sat, [8]byte{7, 45, 21, 7, 9, 3, 24, 20}},
		{"BCD 12h PM", 0, sat, [8]byte{0x07, 0x45, 0x80 | 0x09, 0x07, 0x09, 0x03, 0x24, 0x20}},
		{"binary 12h PM", statusBBin, sat, [8]byte{7, 45, 0x80 | 9, 7, 9, 3, 24, 20}},
		{"BCD 12h midnight is 12 AM", 0, time.Date(1999, 12, 31, 0, 30, 0, 0, time.UTC), [8]byte{0x00, 0x30, 0x12, 0x06, 0x31, 0x12, 0x99, 0x19}},
		{"BCD 12h noon is 12 PM", 0, time.Date(2000, 1, 2, 12, 0, 59, 0, time.UTC), [8]byte{0x59, 0x00, 0x92, 0x01, 0x02, 0x01, 0x00, 0x20}},
		{"BCD 12h 11 AM", 0, time.Date(2000, 1, 2, 11, 0, 0, 0, time.UTC), [8]byte{0x00, 0x00, 0x11, 0x01, 0x02, 0x01, 0x00, 0x20}},
		{"host clock in another zone reads as UTC", statusB24h, sat.In(time.FixedZone("X", -5*3600)), [8]byte{0x07, 0x45, 0x21, 0x07, 0x09, 0x03, 0x24, 0x20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newRTC(tc.at)
			set(d, regStatusB, tc.statusB)
			assert.Equal(t, tc.want, regs(d))
		})
	}
}

func TestTimeFollowsTheClock(t *testing.T) {
	d, c := newRTC(sat)
	c.t = c.t.Add(3*time.Minute + 55*time.Second)
	assert.Equal(t, byte(0x02), get(d, regSeconds))
	assert.Equal(t, byte(0x49), get(d, regMinutes))
}

func TestStatusRegisters(t *testing.T) {
	d, _ := newRTC(sat)
	assert.Equal(t, byte(0x26), get(d, regStatusA), "32.768 kHz, 1024 Hz, not updating")
	assert.Equal(t, byte(statusB24h), get(d, regStatusB), "24-hour BCD")
	assert.Equal(t, byte(statusDVald), get(d, regStatusD), "battery good")
	set(d, regStatusA, 0xa6)
	assert.Equal(t, byte(0x26), get(d, regStatusA), "UIP is read-only")
	set(d, regStatusD, 0)
	assert.Equal(t, byte(statusDVald), get(d, regStatusD), "D is read-only")
	d.cmos[regStatusC] = 0xf0
	assert.Equal(t, byte(0xf0), get(d, regStatusC))
	assert.Zero(t, get(d, regStatusC), "reading C acknowledges")
}

func TestCMOSMemory(t *testing.T) {
	d, _ := newRTC(sat)
	for _, reg := range []byte{0x0e, 0x10, 0x40, 0x7f} {
		set(d, reg, reg^0x5a)
	}
	for _, reg := range []byte{0x0e, 0x10, 0x40, 0x7f} {
		assert.Equal(t, reg^0x5a, get(d, reg), "CMOS byte %#x", reg)
	}
	assert.Equal(t, get(d, 0x40), get(d, 0x80|0x40), "index bit 7 is the NMI mask, not an address bit")
	assert.Equal(t, byte(0x07), get(d, 0x80|regSeconds))
	b := []byte{0xaa}
	d.Read(0, b)
	assert.Zero(t, b[0], "the index port reads as zero")
}

func TestWriteTimeMovesOnlyTheGuestClock(t *testing.T) {
	d, c := newRTC(sat)
	set(d, regHours, 0x05)
	assert.Equal(t, sat, c.now(), "host clock untouched")
	assert.Equal(t, byte(0x05), get(d, regHours))
	assert.Equal(t, byte(0x45), get(d, regMinutes), "other fields unchanged")
	assert.Equal(t, byte(0x09), get(d, regDay))
	assert.Equal(t, -16*time.Hour, d.offset)

	c.t = c.t.Add(10 * time.Second)
	assert.Equal(t, [8]byte{0x17, 0x45, 0x05, 0x07, 0x09, 0x03, 0x24, 0x20}, regs(d), "the guest clock keeps running from the new time")

	other := New(0)
	other.now = c.now
	assert.Equal(t, byte(0x21), get(other, regHours), "another RTC on the same host clock is unaffected")
}

func TestWriteTimeModes(t *testing.T) {
	for _, tc := range []struct {
		name      string
		statusB   byte
		reg, v    byte
		wantHour  int
		wantYear  int
		wantDay   int
		wantMonth time.Month
	}{
		{"BCD year", statusB24h, regYear, 0x31, 21, 2031, 9, 3},
		{"binary year", statusB24h | statusBBin, regYear, 31, 21, 2031, 9, 3},
		{"BCD century", statusB24h, regCentury, 0x21, 21, 2124, 9, 3},
		{"12h PM hour", 0, regHours, 0x80 | 0x03, 15, 2024, 9, 3},
		{"12h 12 AM", 0, regHours, 0x12, 0, 2024, 9, 3},
		{"12h 12 PM", 0, regHours, 0x80 | 0x12, 12, 2024, 9, 3},
		{"binary 12h PM", statusBBin, regHours, 0x80 | 11, 23, 2024, 9, 3},
		{"BCD day", statusB24h, regDay, 0x28, 21, 2024, 28, 3},
		{"BCD month", statusB24h, regMonth, 0x11, 21, 2024, 9, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, c := newRTC(sat)
			set(d, regStatusB, tc.statusB)
			set(d, tc.reg, tc.v)
			g := c.now().Add(d.offset)
			assert.Equal(t, tc.wantHour, g.Hour())
			assert.Equal(t, tc.wantYear, g.Year())
			assert.Equal(t, tc.wantDay, g.Day())
			assert.Equal(t, tc.wantMonth, g.Month())
			assert.Equal(t, 45, g.Minute())
			assert.Equal(t, tc.v, get(d, tc.reg), "reads back what was written")
		})
	}
}

// setLinux writes a full date the way Linux's mc146818_set_time does:
// SET on, year, month, day, hours, minutes, seconds, SET off.
func setLinux(d *Device, t time.Time) {
	bcd := func(v int) byte { return byte(v/10<<4 | v%10) }
	b := get(d, regStatusB)
	set(d, regStatusB, b|statusBSet)
	set(d, regYear, bcd(t.Year()%100))
	set(d, regMonth, bcd(int(t.Month())))
	set(d, regDay, bcd(t.Day()))
	set(d, regHours, bcd(t.Hour()))
	set(d, regMinutes, bcd(t.Minute()))
	set(d, regSeconds, bcd(t.Second()))
	set(d, regStatusB, b)
}

func TestSetFullDate(t *testing.T) {
	for _, tc := range []struct{ from, to time.Time }{
		{time.Date(2024, 1, 31, 23, 59, 58, 0, time.UTC), time.Date(2024, 2, 1, 0, 0, 1, 0, time.UTC)},
		{time.Date(2024, 1, 31, 12, 0, 0, 0, time.UTC), time.Date(2024, 2, 15, 8, 30, 0, 0, time.UTC)},
		{time.Date(2024, 3, 31, 12, 0, 0, 0, time.UTC), time.Date(2024, 4, 30, 1, 2, 3, 0, time.UTC)},
		{time.Date(2023, 7, 4, 12, 0, 0, 0, time.UTC), time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC)},
		{sat, sat.Add(-400 * 24 * time.Hour)},
	} {
		t.Run(fmt.Sprintf("%s to %s", tc.from.Format(time.DateOnly), tc.to.Format(time.DateTime)), func(t *testing.T) {
			d, c := newRTC(tc.from)
			setLinux(d, tc.to)
			assert.Equal(t, tc.to, c.now().Add(d.offset).UTC(), "guest clock set")
			c.t = c.t.Add(time.Second)
			got := regs(d)
			want := tc.to.Add(time.Second)
			assert.Equal(t, byte(want.Second()/10<<4|want.Second()%10), got[0])
			assert.Equal(t, byte(want.Day()/10<<4|want.Day()%10), got[4], "day")
			assert.Equal(t, byte(int(want.Month())/10<<4|int(want.Month())%10), got[5], "month")
		})
	}
}

func TestSetBitHoldsTheTime(t *testing.T) {
	d, c := newRTC(sat)
	set(d, regStatusB, statusB24h|statusBSet)
	c.t = c.t.Add(5 * time.Second)
	assert.Equal(t, byte(0x07), get(d, regSeconds), "no updates while SET")
	set(d, regDay, 0x31)
	set(d, regMonth, 0x02) // "Feb 31" is fine while the guest is still writing
	assert.Equal(t, byte(0x31), get(d, regDay))
	assert.Equal(t, byte(0x02), get(d, regMonth))
	set(d, regDay, 0x28)
	set(d, regStatusB, statusB24h)
	assert.Equal(t, [8]byte{0x07, 0x45, 0x21, 0x04, 0x28, 0x02, 0x24, 0x20}, regs(d), "Wed 28 Feb 2024")
	c.t = c.t.Add(2 * time.Second)
	assert.Equal(t, byte(0x09), get(d, regSeconds), "running again")
}

func TestGarbageWrites(t *testing.T) {
	d, _ := newRTC(sat)
	require.NotPanics(t, func() {
		for reg := 0; reg < 256; reg++ {
			for _, v := range []byte{0x00, 0x7f, 0x80, 0xff} {
				set(d, byte(reg), v)
				get(d, byte(reg))
			}
		}
		d.Read(1, nil)
		d.Write(1, nil)
	})
}

func TestSaveRestoreKeepsGuestClockOffsetAndCMOS(t *testing.T) {
	d := New(0)
	d.Write(0, []byte{0x30})
	d.Write(1, []byte{0xab}) // a CMOS byte
	d.offset = 3 * time.Hour
	s := d.Save()
	e := New(0)
	require.NoError(t, e.Restore(s))
	assert.Equal(t, 3*time.Hour, e.offset)
	e.Write(0, []byte{0x30})
	b := []byte{0}
	e.Read(1, b)
	assert.Equal(t, byte(0xab), b[0])
	s.Version = 2
	assert.ErrorContains(t, e.Restore(s), "version 2")
}

// TestOffset: an RTC created with an offset (a VM's clock.utc.offsetSeconds
// or its timezone) reads host UTC plus the offset in its time registers,
// keeps running from there, and a snapshot carries it.
func TestOffset(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offset time.Duration
		want   [8]byte // sec, min, hour, weekday, day, month, year, century
	}{
		{"none", 0, [8]byte{0x07, 0x45, 0x21, 0x07, 0x09, 0x03, 0x24, 0x20}},
		{"UTC+1 (Europe/Berlin in March)", time.Hour, [8]byte{0x07, 0x45, 0x22, 0x07, 0x09, 0x03, 0x24, 0x20}},
		{"UTC+9 is Sunday", 9 * time.Hour, [8]byte{0x07, 0x45, 0x06, 0x01, 0x10, 0x03, 0x24, 0x20}},
		{"UTC-5", -5 * time.Hour, [8]byte{0x07, 0x45, 0x16, 0x07, 0x09, 0x03, 0x24, 0x20}},
		{"offsetSeconds -3600000 (six weeks back)", -3600000 * time.Second, [8]byte{0x07, 0x45, 0x05, 0x01, 0x28, 0x01, 0x24, 0x20}},
		{"a century ahead", 100 * 365 * 24 * time.Hour, [8]byte{0x07, 0x45, 0x21, 0x02, 0x14, 0x02, 0x24, 0x21}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, c := newRTCOffset(sat, tc.offset)
			assert.Equal(t, tc.want, regs(d))
			c.t = c.t.Add(90 * time.Second)
			assert.Equal(t, sat.Add(tc.offset+90*time.Second).Second(), int(get(d, regSeconds)>>4)*10+int(get(d, regSeconds)&0xf), "the clock runs on")

			e, _ := newRTCOffset(c.t, 0)
			require.NoError(t, e.Restore(d.Save()))
			e.now = c.now
			assert.Equal(t, regs(d), regs(e), "a snapshot keeps the offset")
		})
	}
}
