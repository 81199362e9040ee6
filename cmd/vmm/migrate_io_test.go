package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/test/guestimage"
)

// ioScript keeps a memory writer running (so pre-copy cannot converge while
// the guest does I/O), then on "io" reads its whole disk through the page
// cache and receives a TCP stream into tmpfs, stops the writer and says
// so; on "sum" it checksums both from memory. Everything the devices wrote
// during pre-copy must therefore have reached the target.
const ioScript = `
kv() { echo "KV $1=$2"; }
ip addr add 10.199.2.2/24 dev eth0 && ip link set eth0 up
awk 'BEGIN { while (1) { for (i = 0; i < 100000; i++) a[i] = i + n; n++ } }' &
writer=$!
kv ready 1
while read -r line; do
  case "$line" in
    io)
      dd if=/dev/vda of=/dev/null bs=64k 2>/dev/null
      nc 10.199.2.1 7003 < /dev/null > /tmp/rx
      kill $writer
      kv io_done 1 ;;
    sum)
      set -- $(sha256sum /dev/vda); kv disk_sha $1
      set -- $(sha256sum /tmp/rx); kv rx_sha $1 ;;
    quit) reboot -f ;;
  esac
done
`

var kvRE = func(key string) *regexp.Regexp { return regexp.MustCompile(`KV ` + key + `=(\S+)\r?\n`) }

// TestMigrationDuringDiskAndNetIO migrates a guest, over a stream capped
// at 1 MiB/s, while its virtio disk fills the page cache and its NIC
// receives a TCP stream: the devices write guest pages that pre-copy has
// already sent. On the target the guest checksums both from memory; they
// match what the host has, so every device write reached the target (and
// the target's disk and NIC still answer). Two vCPUs and two queues on the
// disk and the NIC: the multi-queue paths run under the VMM's seccomp
// filter (the driver attaches the tap's second queue) and migrate. (On a
// loaded host pre-copy may converge before the I/O ends; it then ends on
// the target, checked the same, and the log says so.)
func TestMigrationDuringDiskAndNetIO(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root for the tap and its network namespace")
	}
	t.Parallel()
	dir := t.TempDir()
	sock := func(name string) string { return filepath.Join(dir, name) }
	disk := make([]byte, 8<<20)
	_, err := rand.Read(disk)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(sock("data.img"), disk, 0o644))
	payload := make([]byte, 512<<10)
	_, err = rand.Read(payload)
	require.NoError(t, err)

	// The source's tap goes into a namespace of its own with the host end
	// of the TCP stream; the target creates a tap of the same name in
	// this namespace when it takes over the VM.
	tapName := fmt.Sprintf("kvm%d", os.Getpid()%100000)
	a := startVMM(t, "run", "--kernel", guestimage.Kernel(t), "--initrd", guestimage.InitrdWithRun(t, ioScript, nil),
		"--cpus", "2", "--memory", "256M", "--disk", sock("data.img")+",ro,queues=2", "--net", "tap="+tapName+",mac=52:54:00:ab:cd:02,queues=2",
		"--console", "socket:"+sock("a.con"), "--api", sock("a.api"))
	ca := attach(t, sock("a.con"), a)
	ns, err := link.NewNetns("kvmmig-" + tapName)
	require.NoError(t, err)
	t.Cleanup(func() { ns.Delete() })
	require.NoError(t, link.MoveTo(tapName, ns))
	h, err := ns.Handle()
	require.NoError(t, err)
	require.NoError(t, link.Up(h, tapName, "10.199.2.1/24"))
	h.Close()
	var ln net.Listener
	require.NoError(t, ns.Do(func() (err error) {
		ln, err = net.Listen("tcp4", "10.199.2.1:7003")
		return err
	}))
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(payload)
	}()

	_, pos := ca.waitFor(kvRE("ready"), 0)
	b := startVMM(t, "run", "--incoming", "unix:"+sock("b.mig"), "--console", "socket:"+sock("b.con"), "--api", sock("b.api"))
	waitForFile(t, sock("b.mig"), b)
	// Pre-copy must outlast the guest's I/O however slow the host: by
	// default it is cut short after 30 rounds (stop-and-copy forced, the
	// I/O would finish on the target) or fails after 150 s without
	// progress (the writer keeps the dirty set level). Rounds take ~7 s
	// here; under `make test`'s load the I/O has taken longer than 30.
	mig := vmmCommand("migrate", "--api", sock("a.api"), "--to", "unix:"+sock("b.mig"), "--bandwidth", "1M",
		"--max-rounds", "100000", "--progress-timeout", "30m")
	var migOut bytes.Buffer
	mig.Stdout, mig.Stderr = &migOut, &migOut
	require.NoError(t, mig.Start())
	migDone := make(chan error, 1)
	go func() { migDone <- mig.Wait() }()
	waitMigrating(t, sock("a.api"))

	// The I/O runs, and ends, while the source is still in pre-copy: the
	// memory writer keeps it from converging until the guest stops it.
	// On a loaded host (`make test` on two cores) the guest's vCPUs may
	// get so little time that pre-copy converges all the same (seen in
	// CI): the I/O then ends on the target, which is checked just the
	// same, and the log says so.
	ca.send("io")
	_, _, duringPreCopy := ca.waitOrEnd(kvRE("io_done"), pos)
	if duringPreCopy {
		r := vmm(t, "status", "--api", sock("a.api"))
		require.Contains(t, r.stdout, `"Migrating"`, "the guest's I/O finished during pre-copy")
	}

	select {
	case err := <-migDone:
		require.NoError(t, err, "migrate: %s", migOut.String())
	case <-time.After(10 * time.Minute): // a hang guard: the stream runs at 1 MiB/s
		mig.Process.Kill()
		<-migDone
		t.Fatalf("the migration did not finish: %s", migOut.String())
	}
	t.Log(migOut.String())
	assert.Equal(t, 0, a.wait(time.Minute), "the source exits once its guest runs on the target; stderr: %s", a.stderr.String())

	cb := attach(t, sock("b.con"), b)
	if !duringPreCopy {
		out := ca.String()
		t.Logf("pre-copy converged before the guest's I/O ended (the source's console ends %q): the I/O ends on the target", out[max(0, len(out)-80):])
		// The target's tap was made in this namespace: into the stream's
		// namespace with the host's address, where the listener waits
		// (the guest's connect retries its SYN meanwhile).
		require.NoError(t, link.MoveTo(tapName, ns))
		h, err := ns.Handle()
		require.NoError(t, err)
		require.NoError(t, link.Up(h, tapName, "10.199.2.1/24"))
		h.Close()
		cb.waitFor(kvRE("io_done"), 0)
	}
	bpos := cb.len()
	cb.send("sum")
	m, bpos := cb.waitFor(kvRE("disk_sha"), bpos)
	assert.Equal(t, sha256hex(disk), m[1], "the disk as the guest read it (during pre-copy, or across the switch), from its page cache on the target")
	m, _ = cb.waitFor(kvRE("rx_sha"), bpos)
	assert.Equal(t, sha256hex(payload), m[1], "the TCP stream the guest received")
	cb.send("quit")
	assert.Equal(t, 0, b.wait(3*time.Minute), "the migrated guest powers off cleanly; stderr: %s", b.stderr.String())
}

func sha256hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
