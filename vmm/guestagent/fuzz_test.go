package guestagent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"testing"
	"time"

	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// guestConn is the guest's end of an agent connection, as the client sees
// it: the guest answers guest-sync-delimited with pre (whatever stale or
// hostile bytes it likes), then the delimiter and the right reply, so that
// the command after it is reached; the command is answered with reply,
// followed, if endless, by spaces that never end in a newline.
type guestConn struct {
	pre, reply []byte
	endless    bool

	out     []byte // what the client has yet to read
	sent    bool   // the command (after the sync) was written
	replied int    // bytes of the command's answer the client read
}

func (g *guestConn) Write(b []byte) (int, error) {
	if len(b) > 0 && b[0] == ga.Delimiter {
		var req struct {
			Arguments ga.SyncArgs `json:"arguments"`
		}
		if err := json.Unmarshal(b[1:], &req); err != nil {
			return 0, err
		}
		g.out = append(g.out, g.pre...)
		g.out = append(g.out, ga.Delimiter)
		g.out = fmt.Appendf(g.out, "{\"return\": %d}\n", req.Arguments.ID)
		return len(b), nil
	}
	g.sent = true
	g.out = append(g.out, g.reply...)
	return len(b), nil
}

func (g *guestConn) Read(p []byte) (int, error) {
	if len(g.out) == 0 {
		if !g.sent || !g.endless {
			return 0, io.EOF
		}
		for i := range p {
			p[i] = ' '
		}
		g.replied += len(p)
		return len(p), nil
	}
	n := copy(p, g.out)
	g.out = g.out[n:]
	if g.sent {
		g.replied += n
	}
	return n, nil
}

func (g *guestConn) Close() error                     { return nil }
func (g *guestConn) LocalAddr() net.Addr              { return nil }
func (g *guestConn) RemoteAddr() net.Addr             { return nil }
func (g *guestConn) SetDeadline(time.Time) error      { return nil }
func (g *guestConn) SetReadDeadline(time.Time) error  { return nil }
func (g *guestConn) SetWriteDeadline(time.Time) error { return nil }

// fuzzCommands are the commands the launcher runs, with the types it
// decodes their replies into.
var fuzzCommands = []struct {
	name string
	out  any // a pointer to the reply's type; nil: the reply is ignored
}{
	{ga.CmdPing, nil},
	{ga.CmdInfo, &ga.AgentInfo{}},
	{ga.CmdOSInfo, &ga.OSInfo{}},
	{ga.CmdHostName, &ga.HostName{}},
	{ga.CmdTimezone, &ga.Timezone{}},
	{ga.CmdInterfaces, &[]ga.Interface{}},
	{ga.CmdUsers, &[]ga.User{}},
	{ga.CmdFSInfo, &[]ga.Filesystem{}},
	{ga.CmdFreezeStatus, new(string)},
	{ga.CmdFreeze, new(int)},
}

// FuzzClient is a hostile guest agent: stale bytes and replies of any
// shape before the sync reply, then any bytes as the answer to one of the
// commands the launcher runs, optionally never ending its line. Nothing
// may panic or hang; the client reads at most MaxReply (plus a buffer)
// of a reply; and the result is what the protocol says: the guest's own
// error (which the launcher tells from a broken connection with
// errors.As) only for an "error" reply, a decoded value only for a
// "return" reply of the right type, an error for anything else.
func FuzzClient(f *testing.F) {
	replies := []string{
		`{"return": {}}`,
		`{"return": {"version": "8.2.2", "supported_commands": [{"enabled": true, "name": "guest-ping", "success-response": true}, {"enabled": false, "name": "guest-exec", "success-response": true}]}}`,
		`{"return": {"name": "Fedora Linux", "kernel-release": "6.8.5-301.fc40.x86_64", "version": "40 (Cloud Edition)", "pretty-name": "Fedora Linux 40 (Cloud Edition)", "version-id": "40", "kernel-version": "#1 SMP PREEMPT_DYNAMIC Thu Apr 11 20:00:10 UTC 2024", "machine": "x86_64", "id": "fedora", "variant": "Cloud Edition", "variant-id": "cloud"}}`,
		`{"return": {"host-name": "vm1"}}`,
		`{"return": {"zone": "UTC", "offset": 0}}`,
		`{"return": [{"name": "lo", "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}], "hardware-address": "00:00:00:00:00:00"}, {"name": "eth0", "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "10.0.2.2", "prefix": 24}, {"ip-address-type": "ipv6", "ip-address": "fe80::5054:ff:fe12:3456", "prefix": 64}], "hardware-address": "52:54:00:12:34:56", "statistics": {"rx-bytes": 1}}]}`,
		`{"return": [{"user": "fedora", "login-time": 1718000000.123456}, {"user": "Administrator", "domain": "WIN", "login-time": 1.7e9}]}`,
		`{"return": [{"name": "vda1", "mountpoint": "/", "type": "ext4", "used-bytes": 1073741824, "total-bytes": 10737418240, "disk": [{"pci-controller": {"domain": -1, "bus": -1, "slot": -1, "function": -1}, "bus-type": "virtio", "bus": 0, "target": 0, "unit": 0, "serial": "disk0", "dev": "/dev/vda1"}]}]}`,
		`{"return": "thawed"}`,
		`{"return": 2}`,
		`{"error": {"class": "CommandNotFound", "desc": "The command guest-get-users has not been found"}}`,
		`{"error": {"class": "GenericError", "desc": "Command guest-fsfreeze-freeze has been disabled"}}`,
		`{}`,
	}
	for i, r := range replies {
		f.Add([]byte{}, []byte(r+"\n"), uint8(i), false)
	}
	// A stale reply and garbage before the sync, a delimited reply, a
	// reply the guest never ends.
	f.Add([]byte("{\"return\": 1}\n\xff{\"return\": 7}\n"), []byte(replies[3]+"\n"), uint8(3), false)
	f.Add([]byte("garbage"), []byte("\xff"+replies[4]+"\r\n"), uint8(4), false)
	f.Add([]byte{}, []byte(replies[3]), uint8(3), true)
	f.Fuzz(func(t *testing.T, pre, reply []byte, cmd uint8, endless bool) {
		c := fuzzCommands[int(cmd)%len(fuzzCommands)]
		var out any
		if c.out != nil {
			out = reflect.New(reflect.TypeOf(c.out).Elem()).Interface()
		}
		g := &guestConn{pre: pre, reply: reply, endless: endless}
		cl := ga.NewClient(g)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := cl.Execute(ctx, c.name, nil, out)

		var guestErr *ga.Error
		if !g.sent {
			// The sync failed: the connection is broken, never the
			// guest's refusal of a command.
			if err == nil || errors.As(err, &guestErr) {
				t.Fatalf("sync failed with %v", err)
			}
			return
		}
		if limit := len(reply) + ga.MaxReply + 2*4096; g.replied > limit {
			t.Fatalf("the client read %d bytes of a reply, more than %d", g.replied, limit)
		}
		want := expected(reply, c.out)
		switch {
		case want.guest != nil:
			if !errors.As(err, &guestErr) || *guestErr != *want.guest {
				t.Fatalf("reply %q: got %v, want the guest's error %v", reply, err, want.guest)
			}
		case want.ok:
			if err != nil {
				t.Fatalf("reply %q: %v", reply, err)
			}
		default:
			if err == nil || errors.As(err, &guestErr) {
				t.Fatalf("reply %q: got %v, want a (non-guest) error", reply, err)
			}
		}
	})
}

type outcome struct {
	ok    bool
	guest *ga.Error
}

// expected is what the protocol makes of reply: its first line (it must
// have one), less a leading delimiter and spaces, is one JSON object with
// "error" (the guest's error) or "return" (decoded into a fresh value of
// out's type).
func expected(reply []byte, out any) outcome {
	line, _, found := bytes.Cut(reply, []byte("\n"))
	if !found || len(line) >= ga.MaxReply {
		return outcome{}
	}
	var r ga.Response
	if json.Unmarshal(bytes.TrimSpace(bytes.TrimLeft(line, "\xff")), &r) != nil {
		return outcome{}
	}
	switch {
	case r.Error != nil:
		return outcome{guest: r.Error}
	case r.Return == nil:
		return outcome{}
	case out == nil:
		return outcome{ok: true}
	}
	v := reflect.New(reflect.TypeOf(out).Elem()).Interface()
	return outcome{ok: json.Unmarshal(r.Return, v) == nil}
}
