package dhcp

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	guestMAC = net.HardwareAddr{0x02, 0x6b, 0x76, 1, 2, 3}
	lease    = Lease{
		IP: net.IPv4(10, 244, 0, 7), Mask: net.CIDRMask(24, 32), Router: net.IPv4(10, 244, 0, 1),
		ServerID: net.IPv4(169, 254, 75, 10), DNS: []net.IP{net.IPv4(10, 96, 0, 10)},
		Search: []string{"ns.svc.cluster.local", "svc.cluster.local"}, Hostname: "vm1", MTU: 1450,
		Routes: []Route{
			{Dst: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Gateway: net.IPv4(10, 244, 0, 1)},
			{Dst: net.IPNet{IP: net.IPv4(169, 254, 75, 10).To4(), Mask: net.CIDRMask(32, 32)}},
		},
		Time: time.Hour,
	}
)

// request is a client's message: type t from mac, with raw options after
// the message type.
func request(mac net.HardwareAddr, t byte, opts ...byte) []byte {
	b := make([]byte, headerLen)
	b[0], b[1], b[2] = 1, 1, 6
	binary.BigEndian.PutUint32(b[4:], 0xdeadbeef)
	binary.BigEndian.PutUint16(b[10:], flagBroadcast)
	copy(b[28:], mac)
	b = append(b, magic...)
	b = append(b, optMessageType, 1, t)
	b = append(b, opts...)
	return append(b, optEnd)
}

// options reads a reply's options (instances of one code concatenated).
func options(t *testing.T, r []byte) map[byte][]byte {
	t.Helper()
	require.Greater(t, len(r), headerLen+4)
	require.Equal(t, magic, r[headerLen:headerLen+4])
	out := map[byte][]byte{}
	o := r[headerLen+4:]
	for len(o) > 0 && o[0] != optEnd {
		require.GreaterOrEqual(t, len(o), 2+int(o[1]))
		out[o[0]] = append(out[o[0]], o[2:2+int(o[1])]...)
		o = o[2+int(o[1]):]
	}
	require.NotEmpty(t, o, "an end option")
	return out
}

func TestReply(t *testing.T) {
	other := net.HardwareAddr{0x02, 0, 0, 0, 0, 9}
	for _, tc := range []struct {
		name string
		req  []byte
		want byte // 0: no reply
	}{
		{"discover", request(guestMAC, Discover), Offer},
		{"request from selecting", request(guestMAC, Request, optRequestedIP, 4, 10, 244, 0, 7, optServerID, 4, 169, 254, 75, 10), Ack},
		{"request in init-reboot", request(guestMAC, Request, optRequestedIP, 4, 10, 244, 0, 7), Ack},
		{"request for another address", request(guestMAC, Request, optRequestedIP, 4, 10, 244, 0, 8), Nak},
		{"request to another server", request(guestMAC, Request, optRequestedIP, 4, 10, 244, 0, 7, optServerID, 4, 10, 0, 0, 1), 0},
		{"discover from another MAC", request(other, Discover), 0},
		{"release", request(guestMAC, 7), 0},
		{"inform", request(guestMAC, 8), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Parse(tc.req)
			require.NoError(t, err)
			r := Reply(m, guestMAC, &lease)
			if tc.want == 0 {
				assert.Nil(t, r)
				return
			}
			require.NotNil(t, r)
			assert.Equal(t, byte(bootReply), r[0])
			assert.Equal(t, uint32(0xdeadbeef), binary.BigEndian.Uint32(r[4:]), "the client's transaction")
			assert.Equal(t, []byte(guestMAC), r[28:34])
			o := options(t, r)
			assert.Equal(t, []byte{tc.want}, o[optMessageType])
			if tc.want == Nak {
				assert.Equal(t, []byte{0, 0, 0, 0}, r[16:20], "a NAK offers nothing")
				return
			}
			assert.Equal(t, []byte{10, 244, 0, 7}, r[16:20], "yiaddr")
			assert.Equal(t, []byte{255, 255, 255, 0}, o[optSubnetMask])
			assert.Equal(t, []byte{10, 244, 0, 1}, o[optRouter])
			assert.Equal(t, []byte{169, 254, 75, 10}, o[optServerID])
			assert.Equal(t, []byte{10, 96, 0, 10}, o[optDNS])
			assert.Equal(t, []byte{0, 0, 0x0e, 0x10}, o[optLeaseTime])
			assert.Equal(t, []byte{0x05, 0xaa}, o[optMTU])
			assert.Equal(t, []byte("vm1"), o[optHostname])
			assert.Equal(t, []byte("ns.svc.cluster.local"), o[optDomainName])
			assert.Equal(t, append([]byte("\x02ns\x03svc\x07cluster\x05local\x00"), "\x03svc\x07cluster\x05local\x00"...), o[optDomainSrch])
			assert.Equal(t, []byte{0, 10, 244, 0, 1, 32, 169, 254, 75, 10, 0, 0, 0, 0}, o[optClassless])
		})
	}
}

func TestParseRefuses(t *testing.T) {
	good := request(guestMAC, Discover)
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "shorter than a message"},
		{"header only", good[:headerLen], "shorter than a message"},
		{"a reply", append([]byte{2}, good[1:]...), "not a request"},
		{"not ethernet", append([]byte{1, 6}, good[2:]...), "not Ethernet"},
		{"no cookie", append(append([]byte(nil), good[:headerLen]...), 1, 2, 3, 4, optEnd), "no magic cookie"},
		{"option past the end", append(append([]byte(nil), good[:headerLen+4]...), optMessageType, 9, 1), "runs past the message"},
		{"length byte missing", append(append([]byte(nil), good[:headerLen+4]...), optMessageType), "runs past the message"},
		{"long message type", append(append([]byte(nil), good[:headerLen+4]...), optMessageType, 2, 1, 1, optEnd), "message type of 2 bytes"},
		{"short requested IP", append(append([]byte(nil), good[:headerLen+4]...), optMessageType, 1, 3, optRequestedIP, 3, 1, 2, 3, optEnd), "not an IPv4 address"},
		{"BOOTP", append(append([]byte(nil), good[:headerLen+4]...), optEnd), "no message type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.b)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// Long option values are split over several instances (RFC 3396), and
// bad search domains are left out.
func TestLongOptions(t *testing.T) {
	l := lease
	l.DNS = nil
	for i := range 70 {
		l.DNS = append(l.DNS, net.IPv4(10, 0, 0, byte(i)))
	}
	l.Search = []string{"ok.example", "bad..example", string(make([]byte, 64)) + ".example"}
	m, err := Parse(request(guestMAC, Discover))
	require.NoError(t, err)
	o := options(t, Reply(m, guestMAC, &l))
	assert.Len(t, o[optDNS], 280)
	assert.Equal(t, []byte("\x02ok\x07example\x00"), o[optDomainSrch])
}

func FuzzParse(f *testing.F) {
	f.Add(request(guestMAC, Discover))
	f.Add(request(guestMAC, Request, optRequestedIP, 4, 10, 244, 0, 7, optServerID, 4, 169, 254, 75, 10))
	f.Add(request(guestMAC, Request, optPad, optPad, 99, 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		if r := Reply(m, guestMAC, &lease); r != nil {
			if _, err := Parse(append([]byte{1}, r[1:]...)); err != nil {
				t.Fatalf("a reply does not parse back: %v", err)
			}
		}
	})
}
