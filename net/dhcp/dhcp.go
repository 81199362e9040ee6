// Package dhcp is a DHCPv4 server for exactly one client: the guest of a
// NIC bound by bridge to the pod network, which gets the pod's address
// (RFC 2131 messages, RFC 2132 options, RFC 3442 classless routes, RFC
// 3397 domain search). Requests are guest-controlled: Parse checks every
// length against the packet and never panics; the server answers only
// DISCOVER and REQUEST from the one MAC it serves.
package dhcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Message types (option 53).
const (
	Discover = 1
	Offer    = 2
	Request  = 3
	Ack      = 5
	Nak      = 6
)

// Option codes used here.
const (
	optPad         = 0
	optSubnetMask  = 1
	optRouter      = 3
	optDNS         = 6
	optHostname    = 12
	optDomainName  = 15
	optMTU         = 26
	optRequestedIP = 50
	optLeaseTime   = 51
	optMessageType = 53
	optServerID    = 54
	optDomainSrch  = 119
	optClassless   = 121
	optEnd         = 255
)

const (
	headerLen = 236
	bootReply = 2
	// flagBroadcast asks for a broadcast reply (the client cannot take
	// unicast before it has an address).
	flagBroadcast = 0x8000
)

var magic = []byte{99, 130, 83, 99}

// Message is what the server reads of a client's request.
type Message struct {
	XID    uint32
	Flags  uint16
	CIAddr net.IP
	CHAddr net.HardwareAddr
	Type   byte
	// RequestedIP (option 50) and ServerID (option 54), nil when absent.
	RequestedIP net.IP
	ServerID    net.IP
}

// Parse reads a BOOTREQUEST with an Ethernet client address. Options in
// the sname and file fields (option 52) are not read: the server needs
// only the few a client puts in the options field.
func Parse(b []byte) (*Message, error) {
	if len(b) < headerLen+len(magic) {
		return nil, fmt.Errorf("dhcp: %d bytes, shorter than a message", len(b))
	}
	if b[0] != 1 {
		return nil, fmt.Errorf("dhcp: op %d is not a request", b[0])
	}
	if b[1] != 1 || b[2] != 6 {
		return nil, fmt.Errorf("dhcp: hardware type %d length %d is not Ethernet", b[1], b[2])
	}
	if string(b[headerLen:headerLen+4]) != string(magic) {
		return nil, errors.New("dhcp: no magic cookie")
	}
	m := &Message{
		XID:    binary.BigEndian.Uint32(b[4:]),
		Flags:  binary.BigEndian.Uint16(b[10:]),
		CIAddr: net.IP(append([]byte(nil), b[12:16]...)),
		CHAddr: net.HardwareAddr(append([]byte(nil), b[28:34]...)),
	}
	opts := b[headerLen+4:]
	for len(opts) > 0 {
		code := opts[0]
		if code == optEnd {
			break
		}
		if code == optPad {
			opts = opts[1:]
			continue
		}
		if len(opts) < 2 || len(opts) < 2+int(opts[1]) {
			return nil, fmt.Errorf("dhcp: option %d runs past the message", code)
		}
		val := opts[2 : 2+int(opts[1])]
		opts = opts[2+int(opts[1]):]
		switch code {
		case optMessageType:
			if len(val) != 1 {
				return nil, fmt.Errorf("dhcp: message type of %d bytes", len(val))
			}
			m.Type = val[0]
		case optRequestedIP, optServerID:
			if len(val) != 4 {
				return nil, fmt.Errorf("dhcp: option %d of %d bytes, not an IPv4 address", code, len(val))
			}
			ip := net.IP(append([]byte(nil), val...))
			if code == optRequestedIP {
				m.RequestedIP = ip
			} else {
				m.ServerID = ip
			}
		}
	}
	if m.Type == 0 {
		return nil, errors.New("dhcp: no message type (BOOTP is not served)")
	}
	return m, nil
}

// Route is a classless static route (option 121); a nil or unspecified
// Gateway is on-link.
type Route struct {
	Dst     net.IPNet
	Gateway net.IP
}

// Lease is everything the one client is given.
type Lease struct {
	IP       net.IP
	Mask     net.IPMask
	Router   net.IP // nil: none
	ServerID net.IP // the server's own address (option 54)
	DNS      []net.IP
	Search   []string
	Hostname string
	MTU      uint16 // 0: not sent
	// Routes go in option 121, which a client prefers to the router
	// option: with routes, the default route (if any) must be among
	// them.
	Routes []Route
	Time   time.Duration
}

// Reply is the server's answer to m for the client mac holding lease l:
// an OFFER to a DISCOVER, an ACK to a REQUEST for l.IP (or renewing with
// it), a NAK to a REQUEST for another address; nil for everything else
// (another client, another server's REQUEST, other message types).
func Reply(m *Message, mac net.HardwareAddr, l *Lease) []byte {
	if m.CHAddr.String() != mac.String() {
		return nil
	}
	switch m.Type {
	case Discover:
		return encode(m, l, Offer)
	case Request:
		if m.ServerID != nil && !m.ServerID.Equal(l.ServerID) {
			return nil // the client chose another server
		}
		want := m.RequestedIP
		if want == nil {
			want = m.CIAddr
		}
		if !want.Equal(l.IP) {
			return encode(m, nil, Nak)
		}
		return encode(m, l, Ack)
	}
	return nil
}

// encode builds a BOOTREPLY of type t; l nil (a NAK) carries no lease.
func encode(m *Message, l *Lease, t byte) []byte {
	b := make([]byte, headerLen, 576)
	b[0], b[1], b[2] = bootReply, 1, 6
	binary.BigEndian.PutUint32(b[4:], m.XID)
	binary.BigEndian.PutUint16(b[10:], m.Flags)
	copy(b[28:], m.CHAddr)
	b = append(b, magic...)
	b = append(b, optMessageType, 1, t)
	if l == nil {
		return append(b, optEnd)
	}
	copy(b[16:20], l.IP.To4())
	b = appendOpt(b, optServerID, l.ServerID.To4())
	b = appendOpt(b, optLeaseTime, binary.BigEndian.AppendUint32(nil, uint32(l.Time/time.Second)))
	b = appendOpt(b, optSubnetMask, l.Mask)
	if l.Router != nil {
		b = appendOpt(b, optRouter, l.Router.To4())
	}
	if len(l.DNS) > 0 {
		var v []byte
		for _, ip := range l.DNS {
			v = append(v, ip.To4()...)
		}
		b = appendOpt(b, optDNS, v)
	}
	if len(l.Search) > 0 {
		b = appendOpt(b, optDomainName, []byte(l.Search[0]))
		if v := searchList(l.Search); len(v) > 0 {
			b = appendOpt(b, optDomainSrch, v)
		}
	}
	if l.Hostname != "" {
		b = appendOpt(b, optHostname, []byte(l.Hostname))
	}
	if l.MTU != 0 {
		b = appendOpt(b, optMTU, binary.BigEndian.AppendUint16(nil, l.MTU))
	}
	if len(l.Routes) > 0 {
		var v []byte
		for _, r := range l.Routes {
			ones, _ := r.Dst.Mask.Size()
			v = append(v, byte(ones))
			v = append(v, r.Dst.IP.To4()[:(ones+7)/8]...)
			gw := r.Gateway.To4()
			if gw == nil {
				gw = net.IPv4zero.To4()
			}
			v = append(v, gw...)
		}
		b = appendOpt(b, optClassless, v)
	}
	return append(b, optEnd)
}

// appendOpt appends option code with value v, split into several
// instances of at most 255 bytes when longer (RFC 3396).
func appendOpt(b []byte, code byte, v []byte) []byte {
	for {
		n := min(len(v), 255)
		b = append(b, code, byte(n))
		b = append(b, v[:n]...)
		v = v[n:]
		if len(v) == 0 {
			return b
		}
	}
}

// searchList encodes domains as DNS names (RFC 1035 labels, without
// compression). Labels that are empty or longer than 63 bytes are
// dropped: a resolv.conf is the pod's, not trusted to be well formed.
func searchList(domains []string) []byte {
	var v []byte
	for _, d := range domains {
		var name []byte
		for _, label := range strings.Split(strings.TrimSuffix(d, "."), ".") {
			if label == "" || len(label) > 63 {
				name = nil
				break
			}
			name = append(name, byte(len(label)))
			name = append(name, label...)
		}
		if name != nil {
			v = append(append(v, name...), 0)
		}
	}
	return v
}
