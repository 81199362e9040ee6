package sleep

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSleepControl(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  uint64
		data []byte
		want []uint8
	}{
		{"S5 with SLP_EN", offControl, []byte{5<<2 | 1<<5}, []uint8{5}},
		{"sleep type without SLP_EN", offControl, []byte{5 << 2}, nil},
		{"S3", offControl, []byte{3<<2 | 1<<5}, []uint8{3}},
		{"wider access: the low byte counts", offControl, []byte{5<<2 | 1<<5, 0xff}, []uint8{5}},
		{"status register write", offStatus, []byte{0xff}, nil},
		{"empty access", offControl, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint8
			d := New(func(typ uint8) { got = append(got, typ) })
			d.Write(tc.off, tc.data)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestStatusReadsZero(t *testing.T) {
	d := New(func(uint8) { t.Fatal("a read must not sleep") })
	b := []byte{0xaa, 0xbb}
	d.Read(offStatus, b)
	assert.Equal(t, []byte{0, 0}, b)
}
