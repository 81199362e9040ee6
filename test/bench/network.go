package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/kubevmm/kubevmm/net/link"
)

// The network section: TCP throughput between the guest and the host over
// a tap, both directions.

const (
	hostIP   = "10.0.0.1"
	guestIP  = "10.0.0.2"
	guestMAC = "52:54:00:12:34:56"
	// netMiB is moved each way; the first netWarmMiB are not timed (TCP
	// slow start and the guest starting its command).
	netMiB     = 4
	netWarmMiB = 1
)

// netns is the network namespace the bench creates for the guests' taps
// and the host end of the transfers.
type netns struct {
	ns   *link.Netns
	taps []string // tap0 has hostIP; the others carry no address
}

// newNetns creates a namespace with taps tap0..tap<n-1>, persistent so
// each VMM in turn attaches to them, and registers their removal.
func (e *env) newNetns(n int) (*netns, error) {
	name := fmt.Sprintf("kubevmm-bench-%d-%d", os.Getpid(), e.netnsSeq) // one per section that needs it
	e.netnsSeq++
	ns, err := link.NewNetns(name)
	if err != nil {
		return nil, err
	}
	e.cl.add(func() {
		if err := ns.Delete(); err != nil {
			log("cleanup: %v", err)
		}
	})
	h, err := ns.Handle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := link.Up(h, "lo", ""); err != nil {
		return nil, err
	}
	nn := &netns{ns: ns}
	for i := 0; i < n; i++ {
		tap := fmt.Sprintf("tap%d", i)
		// A tap is created through /dev/net/tun in the creating thread's
		// namespace, not through the netlink handle's.
		err := ns.Do(func() error {
			return netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: tap},
				Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR})
		})
		if err != nil {
			return nil, fmt.Errorf("create %s in netns %s: %w", tap, name, err)
		}
		e.cl.add(func() { deleteTap(ns, tap) })
		cidr := ""
		if i == 0 {
			cidr = hostIP + "/24"
		}
		if err := link.Up(h, tap, cidr); err != nil {
			return nil, err
		}
		nn.taps = append(nn.taps, tap)
	}
	return nn, nil
}

func deleteTap(ns *link.Netns, tap string) {
	h, err := ns.Handle()
	if err != nil {
		log("cleanup: %v", err)
		return
	}
	defer h.Close()
	l, err := h.LinkByName(tap)
	if err == nil {
		err = h.LinkDel(l)
	}
	if err != nil {
		log("cleanup: delete %s in netns %s: %v", tap, ns.Name, err)
	}
}

// netResult is one VMM's network numbers: timed bytes and time each way.
type netResult struct {
	txBytes, rxBytes int64 // guest → host, host → guest
	tx, rx           time.Duration
	txCPU, rxCPU     time.Duration // kubevmm only
}

// measureNet configures the guest's eth0 and moves netMiB each way with
// busybox nc: the guest connects to the host, whose end is Go code in the
// namespace. cpu, if set, reads the VMM's CPU time.
func measureNet(ctx context.Context, con *console, nn *netns, cpu func() time.Duration) (netResult, error) {
	var r netResult
	setup := fmt.Sprintf("ip addr add %s/24 dev eth0 && ip link set eth0 up && dd if=/dev/zero of=/tmp/blob bs=1M count=%d 2>/dev/null", guestIP, netMiB)
	if _, err := con.run(ctx, setup); err != nil {
		return r, fmt.Errorf("network setup: %w", err)
	}
	dirs := []struct {
		name  string
		guest string // %s host, %d port
		host  func(net.Conn) (int64, time.Duration, error)
		bytes *int64
		d     *time.Duration
		c     *time.Duration
	}{
		// cat sends the file with sendfile(2): one system call, not one per KiB
		{"guest → host", "nc %s %d -e cat /tmp/blob", receive, &r.txBytes, &r.tx, &r.txCPU},
		{"host → guest", "nc %s %d -e dd of=/dev/null bs=1M", send, &r.rxBytes, &r.rx, &r.rxCPU},
	}
	for _, d := range dirs {
		var before time.Duration
		if cpu != nil {
			before = cpu()
		}
		n, dur, err := transfer(ctx, con, nn, d.guest, d.host)
		if err != nil {
			return r, fmt.Errorf("network %s: %w", d.name, err)
		}
		*d.bytes, *d.d = n, dur
		if cpu != nil {
			*d.c = cpu() - before
		}
		log("net: %s %d bytes in %v (%s)", d.name, n, dur.Round(time.Millisecond), mbps(n, dur))
	}
	return r, nil
}

// transfer runs the host end of one connection while the guest runs its
// nc command line.
func transfer(ctx context.Context, con *console, nn *netns, guestCmd string, host func(net.Conn) (int64, time.Duration, error)) (int64, time.Duration, error) {
	var l net.Listener
	// a socket opened inside the namespace stays there
	if err := nn.ns.Do(func() (err error) {
		l, err = net.Listen("tcp4", hostIP+":0")
		return err
	}); err != nil {
		return 0, 0, fmt.Errorf("listen in netns: %w", err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	type result struct {
		n   int64
		d   time.Duration
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- result{err: fmt.Errorf("accept: %w", err)}
			return
		}
		defer c.Close()
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
		defer stop()
		n, d, err := host(c)
		done <- result{n, d, err}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	if _, err := con.run(ctx, fmt.Sprintf(guestCmd, hostIP, port)); err != nil {
		l.Close()
		return 0, 0, err
	}
	select {
	case r := <-done:
		return r.n, r.d, r.err
	case <-ctx.Done():
		return 0, 0, context.Cause(ctx)
	}
}

// receive reads to EOF and times from the end of the warm-up to EOF.
func receive(c net.Conn) (int64, time.Duration, error) {
	buf := make([]byte, 256<<10)
	var total int64
	var start time.Time
	for {
		n, err := c.Read(buf)
		total += int64(n)
		if start.IsZero() && total >= netWarmMiB<<20 {
			start = time.Now()
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("receive after %d bytes: %w", total, err)
		}
	}
	if total < netMiB<<20 {
		return 0, 0, fmt.Errorf("received %d bytes, want %d", total, netMiB<<20)
	}
	return total - netWarmMiB<<20, time.Since(start), nil
}

// send writes netMiB, half-closes, and waits for the guest to close after
// reading everything; it times from the end of the warm-up.
func send(c net.Conn) (int64, time.Duration, error) {
	buf := make([]byte, 64<<10)
	var start time.Time
	for sent := 0; sent < netMiB<<20; sent += len(buf) {
		if sent >= netWarmMiB<<20 && start.IsZero() {
			start = time.Now()
		}
		if _, err := c.Write(buf); err != nil {
			return 0, 0, fmt.Errorf("send after %d bytes: %w", sent, err)
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, 0, fmt.Errorf("half-close: %w", err)
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		return 0, 0, fmt.Errorf("waiting for the guest to close: %w", err)
	}
	return (netMiB - netWarmMiB) << 20, time.Since(start), nil
}

func renderNetwork(b *strings.Builder, ours, theirs ioResult, qname string) {
	fmt.Fprintf(b, "## Network: TCP over a tap, guest ↔ host, %d MiB each way\n\n", netMiB)
	fmt.Fprintf(b, "Method: the 1-vCPU 128 MiB guest's virtio-net NIC is on a tap in a network namespace the bench creates; the guest's busybox `nc` connects to "+
		"a Go listener in that namespace and sends a %d MiB tmpfs file (`nc -e cat`, which uses sendfile) or receives %d MiB into `dd of=/dev/null bs=1M`; "+
		"the host times from the end of the first MiB to the end of the stream.\n\n", netMiB, netMiB)
	if ours.err != nil || theirs.err != nil {
		writeErrs(b, ours.err, theirs.err)
	}
	fmt.Fprintf(b, "| direction | kubevmm | %s | kubevmm VMM CPU outside the guest |\n|---|---|---|---|\n", qname)
	fmt.Fprintf(b, "| guest → host | %s | %s | %s |\n", rate(ours.netOK, ours.net.txBytes, ours.net.tx),
		rate(theirs.netOK, theirs.net.txBytes, theirs.net.tx), cpuCell(ours.netOK, ours.net.txCPU, netMiB))
	fmt.Fprintf(b, "| host → guest | %s | %s | %s |\n", rate(ours.netOK, ours.net.rxBytes, ours.net.rx),
		rate(theirs.netOK, theirs.net.rxBytes, theirs.net.rx), cpuCell(ours.netOK, ours.net.rxCPU, netMiB))
}
