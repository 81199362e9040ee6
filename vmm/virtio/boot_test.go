package virtio_test

// Linux boots with the virtio devices: few boots (each costs a minute of
// emulated kernel time on nested-KVM hosts), many checks per boot, driven
// by the guest's /etc/kubevmm/run script and reported as "KV key=value"
// lines on the serial console.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/test/guestimage"
	"github.com/kubevmm/kubevmm/test/hosttools"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

// console collects guest output (and copies it to the file named by
// $KUBEVMM_CONSOLE_LOG, to watch a slow boot as it happens).
type console struct {
	mu  sync.Mutex
	buf bytes.Buffer
	tee io.Writer
}

func newConsole(t *testing.T) *console {
	c := &console{}
	if p := os.Getenv("KUBEVMM_CONSOLE_LOG"); p != "" {
		f, err := os.Create(p)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		c.tee = f
	}
	return c
}

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tee != nil {
		c.tee.Write(p)
	}
	return c.buf.Write(p)
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// results parses "KV key=value" lines.
func results(out string) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if i := strings.Index(line, "KV "); i >= 0 {
			if k, v, ok := strings.Cut(line[i+3:], "="); ok {
				kv[k] = v
			}
		}
	}
	return kv
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func randomFile(t *testing.T, n int) []byte {
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

func mkfsExt4(t *testing.T, path string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	f.Close()
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

func debugfsCat(t *testing.T, img, path string) []byte {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, img).Output()
	require.NoError(t, err)
	return out
}

// guestScript is the first boot's workload: the data disk (ext4, found by
// serial) gets a file from the network, the scratch disk a dd run, the
// read-only disk a refused write; the NIC pings and moves a file both ways.
const guestScript = `#!/bin/sh
kv() { echo "KV $1=$2"; }
now() { read -r up _ < /proc/uptime; echo $up; }
# CPU ticks: idle and total, to tell a guest waiting on the VMM from a busy one
ticks() { read -r _ u n s i w q sq _ < /proc/stat; echo "$i/$((u + n + s + i + w + q + sq))"; }
for d in /sys/block/vd*; do
  read -r s < $d/serial
  case "$s" in
    data) data=/dev/${d##*/} ;;
    scratch) scratch=/dev/${d##*/} ;;
    ro-disk) rodisk=/dev/${d##*/} ;;
  esac
done
kv disks "$data,$scratch,$rodisk"
read -r rng < /sys/class/misc/hw_random/rng_current
kv rng "$rng"
kv rngbytes $(head -c 4096 /dev/hwrng | wc -c)
kv rodisk_ro $(blockdev --getro $rodisk)
if dd if=/dev/zero of=$rodisk bs=4096 count=1 oflag=direct 2>/dev/null; then kv rodisk_write ok; else kv rodisk_write refused; fi

ip addr add 10.199.1.2/24 dev eth0 && ip link set eth0 up
read -r mac < /sys/class/net/eth0/address
kv mac $mac
if ping -c 3 -W 5 10.199.1.1 > /tmp/ping; then kv ping ok; else kv ping failed; fi
kv ping_rtt "$(tail -1 /tmp/ping)"
kv down_start $(now)
kv down_ticks0 $(ticks)
nc 10.199.1.1 7002 < /dev/null > /tmp/down.bin
kv down_ticks1 $(ticks)
kv down_end $(now)
kv down_sha $(sha256sum /tmp/down.bin | cut -d' ' -f1)
kv up_start $(now)
nc 10.199.1.1 7001 < /tmp/down.bin
kv up_end $(now)

mount -t ext4 $data /mnt || kv mount failed
echo "hello from the kubevmm guest" > /mnt/hello.txt
cp /tmp/down.bin /mnt/down.bin
sync
kv disk_sha $(sha256sum /mnt/down.bin | cut -d' ' -f1)
umount /mnt
kv ddw_start $(now)
dd if=/dev/zero of=$scratch bs=1M count=8 oflag=direct 2>/dev/null
kv ddw_end $(now)
dd if=$scratch of=/dev/null bs=1M count=8 iflag=direct 2>/dev/null
kv ddr_end $(now)
kv done 1
`

func TestLinuxDiskNetRNG(t *testing.T) {
	kernel := guestimage.Kernel(t)
	for _, p := range []string{"mkfs.ext4", "debugfs"} {
		hosttools.Require(t, p)
	}
	dir := t.TempDir()
	dataImg := filepath.Join(dir, "data.img")
	mkfsExt4(t, dataImg, 64<<20)
	scratch := filepath.Join(dir, "scratch.img")
	require.NoError(t, os.WriteFile(scratch, nil, 0o644))
	require.NoError(t, os.Truncate(scratch, 64<<20))
	roImg := filepath.Join(dir, "ro.img")
	roData := randomFile(t, 1<<20)
	require.NoError(t, os.WriteFile(roImg, roData, 0o644))

	// network: a tap (created by the VMM) moved into our namespace
	tapName := fmt.Sprintf("kvb%d", os.Getpid()%100000)
	ns, err := link.NewNetns("kvmboot-" + tapName)
	require.NoError(t, err)
	defer ns.Delete()
	mac, _ := net.ParseMAC("52:54:00:ab:cd:01")

	payload := randomFile(t, 512<<10)
	con := newConsole(t)
	m, err := machine.New(machine.Config{
		CPUs: 1, MemoryBytes: 256 << 20,
		Kernel:  mustRead(t, kernel),
		Initrd:  mustRead(t, guestimage.InitrdWithRun(t, guestScript, nil)),
		Console: con,
		Disks: []machine.DiskConfig{
			{Path: dataImg, Serial: "data"},
			{Path: scratch, Serial: "scratch"},
			{Path: roImg, ReadOnly: true, Serial: "ro-disk"},
		},
		NICs: []machine.NICConfig{{Tap: tapName, MAC: mac}},
		RNG:  true,
	})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, link.MoveTo(tapName, ns))
	h, err := ns.Handle()
	require.NoError(t, err)
	require.NoError(t, link.Up(h, tapName, "10.199.1.1/24"))
	h.Close()

	var up, down net.Listener
	require.NoError(t, ns.Do(func() error {
		var err error
		if up, err = net.Listen("tcp4", "10.199.1.1:7001"); err != nil {
			return err
		}
		down, err = net.Listen("tcp4", "10.199.1.1:7002")
		return err
	}))
	var wg sync.WaitGroup
	var upData []byte
	wg.Add(2)
	go func() { // guest -> host
		defer wg.Done()
		c, err := up.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		upData, _ = io.ReadAll(c)
	}()
	go func() { // host -> guest
		defer wg.Done()
		c, err := down.Accept()
		if err != nil {
			return
		}
		c.Write(payload)
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c) // until the guest closes too
		c.Close()
	}()

	exit := m.Run()
	up.Close()
	down.Close()
	wg.Wait()
	out := con.String()
	t.Logf("guest console:\n%s", out)
	t.Logf("virtio stats: %v", m.Stats()["virtio"])
	require.False(t, exit.Failed(), "guest ended with %v", exit)
	kv := results(out)
	require.Equal(t, "1", kv["done"], "guest script did not finish")

	assert.Equal(t, "/dev/vda,/dev/vdb,/dev/vdc", kv["disks"], "disks found by serial")
	assert.Equal(t, "virtio_rng.0", kv["rng"])
	assert.Equal(t, "4096", kv["rngbytes"])
	assert.Equal(t, "1", kv["rodisk_ro"])
	assert.Equal(t, "refused", kv["rodisk_write"])
	assert.Equal(t, mustRead(t, roImg), roData, "read-only disk unchanged")
	assert.Equal(t, mac.String(), kv["mac"])
	assert.Equal(t, "ok", kv["ping"])
	assert.Equal(t, sha(payload), kv["down_sha"], "host -> guest transfer")
	assert.Equal(t, sha(payload), sha(upData), "guest -> host transfer")
	assert.Equal(t, sha(payload), kv["disk_sha"])
	assert.Equal(t, "hello from the kubevmm guest\n", string(debugfsCat(t, dataImg, "/hello.txt")))
	assert.Equal(t, sha(payload), sha(debugfsCat(t, dataImg, "/down.bin")), "host reads what the guest wrote")
	rate := func(mb float64, from, to string) string { // mb: kilobytes here
		var a, b float64
		fmt.Sscan(kv[from], &a)
		fmt.Sscan(kv[to], &b)
		if b <= a {
			return "n/a"
		}
		return fmt.Sprintf("%.0f KB/s", mb/(b-a))
	}
	kb := float64(len(payload)) / 1e3
	t.Logf("throughput (guest clock): net host->guest %s, guest->host %s; disk dd write %s, read %s (8 MiB, O_DIRECT, 1 MiB blocks); ping %s; guest idle/total ticks during download %s -> %s",
		rate(kb, "down_start", "down_end"), rate(kb, "up_start", "up_end"),
		rate(8<<20/1e3, "ddw_start", "ddw_end"), rate(8<<20/1e3, "ddw_end", "ddr_end"),
		kv["ping_rtt"], kv["down_ticks0"], kv["down_ticks1"])

	// The overlay's backing file is this VM's data disk: let it go first
	// (its image lock would refuse the second VMM, rightly).
	m.Close()
	t.Run("qcow2 overlay and vsock via the vmm binary", func(t *testing.T) { qcow2Boot(t, dataImg, payload) })
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

const overlayScript = `#!/bin/sh
kv() { echo "KV $1=$2"; }
/bin/guestvsock echo 5000 &
echo_pid=$!
read -r s < /sys/block/vda/serial
kv serial "$s"
mount -t ext4 /dev/vda /mnt || kv mount failed
kv hello "$(cat /mnt/hello.txt)"
kv base_sha $(sha256sum /mnt/down.bin | cut -d' ' -f1)
echo "written through the overlay" > /mnt/overlay.txt
dd if=/mnt/down.bin of=/mnt/copy.bin bs=64k 2>/dev/null
sync
head -c 65536 /mnt/down.bin > /tmp/v.bin
umount /mnt
/bin/guestvsock send 2 6000 < /tmp/v.bin
wait $echo_pid
kv done 1
`

// qcow2Boot boots the built vmm binary with a qcow2 overlay over the
// first boot's disk: the guest sees the old files, writes new ones into
// the overlay, and qemu-img finds the overlay consistent.
func qcow2Boot(t *testing.T, base string, payload []byte) {
	hosttools.Require(t, "qemu-img")
	dir := t.TempDir()
	vmm := filepath.Join(dir, "vmm")
	out, err := exec.Command("go", "build", "-o", vmm, "github.com/kubevmm/kubevmm/cmd/vmm").CombinedOutput()
	require.NoError(t, err, "%s", out)
	ov := filepath.Join(dir, "overlay.qcow2")
	hosttools.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", ov)
	baseSum := sha(mustRead(t, base))

	// the guest's vsock tool: busybox has none
	tool := filepath.Join(dir, "guestvsock")
	build := exec.Command("go", "build", "-o", tool, "./vsock/testdata/guestvsock")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	initrd := guestimage.InitrdWithRun(t, overlayScript, map[string]string{"bin/guestvsock": string(mustRead(t, tool))})

	sock := filepath.Join(dir, "vsock.sock")
	fromGuest, err := net.Listen("unix", sock+"_6000") // the guest connects to host port 6000
	require.NoError(t, err)
	defer fromGuest.Close()
	var received []byte
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		if c, err := fromGuest.Accept(); err == nil {
			received, _ = io.ReadAll(c)
			c.Close()
		}
	}()

	cmd := exec.Command(vmm, "run", "--kernel", guestimage.Kernel(t), "--initrd", initrd,
		"--memory", "256M", "--console", "stdio",
		"--disk", strings.ReplaceAll(ov, ",", ",,")+",format=qcow2,serial=overlay", "--rng",
		"--vsock", "cid=7,socket="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with a timed-out test
	if p := os.Getenv("KUBEVMM_CONSOLE_LOG"); p != "" {
		cmd.Args = append(cmd.Args, "--report", p+".report.json")
	}
	pipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	con := newConsole(t)
	listening := make(chan struct{})
	consoleDone := make(chan struct{})
	require.NoError(t, cmd.Start())
	go func() { // collect the console; tell when the guest's echo server listens
		defer close(consoleDone)
		sc := bufio.NewScanner(pipe)
		once := sync.Once{}
		for sc.Scan() {
			con.Write(append(sc.Bytes(), '\n'))
			if strings.Contains(sc.Text(), "KV vsock_listening=1") {
				once.Do(func() { close(listening) })
			}
		}
	}()
	echo := randomFile(t, 32<<10)
	var echoed []byte
	echoDone := make(chan error, 1)
	go func() { // host -> guest: CONNECT through the mux, get our bytes back
		select {
		case <-listening:
		case <-consoleDone:
			echoDone <- fmt.Errorf("guest ended before its vsock server listened")
			return
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			echoDone <- err
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT 5000\n")
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "OK ") {
			echoDone <- fmt.Errorf("CONNECT answered %q, %v", line, err)
			return
		}
		go func() { c.Write(echo); c.(*net.UnixConn).CloseWrite() }()
		echoed, err = io.ReadAll(r)
		echoDone <- err
	}()
	<-consoleDone
	err = cmd.Wait()
	stdout := con
	t.Logf("guest console:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	require.NoError(t, err)
	require.NoError(t, <-echoDone)
	fromGuest.Close()
	<-recvDone
	assert.Equal(t, sha(echo), sha(echoed), "host -> guest -> host over vsock")
	assert.Equal(t, sha(payload[:65536]), sha(received), "guest -> host over vsock")
	kv := results(stdout.String())
	require.Equal(t, "1", kv["done"])
	assert.Equal(t, "overlay", kv["serial"])
	assert.Equal(t, "hello from the kubevmm guest", kv["hello"])
	assert.Equal(t, sha(payload), kv["base_sha"])

	hosttools.Run(t, "qemu-img", "check", ov)
	assert.Equal(t, baseSum, sha(mustRead(t, base)), "the base image is untouched")
	flat := filepath.Join(dir, "flat.img")
	hosttools.Run(t, "qemu-img", "convert", "-O", "raw", ov, flat)
	assert.Equal(t, "written through the overlay\n", string(debugfsCat(t, flat, "/overlay.txt")))
	assert.Equal(t, sha(payload), sha(debugfsCat(t, flat, "/copy.bin")))
	// and our own reader agrees with QEMU's
	q, err := block.OpenQcow2(ov, true)
	require.NoError(t, err)
	defer q.Close()
	buf := make([]byte, 1<<20)
	want := mustRead(t, flat)
	for off := 0; off < len(want); off += len(buf) {
		_, err := q.ReadAt(buf, int64(off))
		require.NoError(t, err)
		require.True(t, bytes.Equal(want[off:off+len(buf)], buf), "offset %d", off)
	}
}

// Device configuration errors surface from machine.New as ErrConfig (the
// CLI's exit status 2), before any kernel is loaded.
func TestMachineDeviceConfigErrors(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		t.Skip("no /dev/kvm")
	}
	img := filepath.Join(t.TempDir(), "d.img")
	require.NoError(t, os.WriteFile(img, make([]byte, 4096), 0o644))
	many := make([]machine.DiskConfig, 19)
	for i := range many {
		many[i] = machine.DiskConfig{Path: img, ReadOnly: true}
	}
	mac, _ := net.ParseMAC("52:54:00:00:00:01")
	for _, tc := range []struct {
		name string
		cfg  machine.Config
		want string
	}{
		{"missing disk", machine.Config{Disks: []machine.DiskConfig{{Path: "/nonexistent.img"}}}, "disk 0: open raw image"},
		{"not qcow2", machine.Config{Disks: []machine.DiskConfig{{Path: img, Format: block.FormatQcow2}}}, "no qcow2 magic"},
		{"serial too long", machine.Config{Disks: []machine.DiskConfig{{Path: img, Serial: "012345678901234567890"}}}, "serial"},
		{"too many devices", machine.Config{Disks: many}, "at most 18 virtio devices"},
		{"more disk queues than vCPUs", machine.Config{Disks: []machine.DiskConfig{{Path: img, Queues: 2}}}, "disk 0: 2 queues for 1 vCPUs"},
		{"bad tap name", machine.Config{NICs: []machine.NICConfig{{Tap: "this-name-is-too-long", MAC: mac}}}, "nic 0"},
		{"vsock CID", machine.Config{Vsock: &machine.VsockConfig{CID: 2, Socket: filepath.Join(t.TempDir(), "v")}}, "guest CID 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.CPUs, cfg.MemoryBytes, cfg.Kernel = 1, 64<<20, []byte("no kernel needed: devices come first")
			_, err := machine.New(cfg)
			require.Error(t, err)
			assert.ErrorIs(t, err, machine.ErrConfig)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// mqScript checks the NIC's queues and moves a file over several TCP
// connections (flows the tap spreads over its queues) both ways; it
// checks the disk's request queues and reads the disk.
const mqScript = `#!/bin/sh
kv() { echo "KV $1=$2"; }
set -- /sys/block/vda/mq/*
kv blk_queues $#
kv disk_sha $(sha256sum /dev/vda | cut -d' ' -f1)
ip addr add 10.199.2.2/24 dev eth0 && ip link set eth0 up
set -- /sys/class/net/eth0/queues/rx-*
kv rx_queues $#
set -- /sys/class/net/eth0/queues/tx-*
kv tx_queues $#
for i in 1 2 3 4; do
  nc 10.199.2.1 7002 < /dev/null > /tmp/down.bin
  kv down_sha$i $(sha256sum /tmp/down.bin | cut -d' ' -f1)
  nc 10.199.2.1 7001 < /tmp/down.bin
done
kv done 1
`

// A 2-vCPU Linux guest on a NIC with two queue pairs (a multi-queue tap):
// the driver takes both pairs (VIRTIO_NET_F_MQ, VQ_PAIRS_SET) and TCP
// works both ways over them. Its disk has two request queues
// (VIRTIO_BLK_F_MQ): blk-mq makes a hardware queue of each.
func TestLinuxNetMultiQueue(t *testing.T) {
	kernel := guestimage.Kernel(t)
	tapName := fmt.Sprintf("kvq%d", os.Getpid()%100000)
	ns, err := link.NewNetns("kvmboot-" + tapName)
	require.NoError(t, err)
	defer ns.Delete()
	mac, _ := net.ParseMAC("52:54:00:ab:cd:02")
	payload := randomFile(t, 256<<10)
	diskData := randomFile(t, 1<<20)
	img := filepath.Join(t.TempDir(), "mq.img")
	require.NoError(t, os.WriteFile(img, diskData, 0o644))
	con := newConsole(t)
	m, err := machine.New(machine.Config{
		CPUs: 2, MemoryBytes: 128 << 20,
		Kernel:  mustRead(t, kernel),
		Initrd:  mustRead(t, guestimage.InitrdWithRun(t, mqScript, nil)),
		Console: con,
		Disks:   []machine.DiskConfig{{Path: img, Queues: 2}},
		NICs:    []machine.NICConfig{{Tap: tapName, MAC: mac, Queues: 2}},
	})
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, link.MoveTo(tapName, ns))
	h, err := ns.Handle()
	require.NoError(t, err)
	require.NoError(t, link.Up(h, tapName, "10.199.2.1/24"))
	h.Close()

	var up, down net.Listener
	require.NoError(t, ns.Do(func() error {
		var err error
		if up, err = net.Listen("tcp4", "10.199.2.1:7001"); err != nil {
			return err
		}
		down, err = net.Listen("tcp4", "10.199.2.1:7002")
		return err
	}))
	pairs := func() uint64 { return m.Stats()["virtio"].(map[string]map[string]uint64)["net0"]["queue_pairs"] }
	var wg sync.WaitGroup
	var upSums []string
	var pairsSeen []uint64 // while the guest runs: a reset at its poweroff goes back to one
	wg.Add(2)
	go func() { // guest -> host
		defer wg.Done()
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			b, _ := io.ReadAll(c)
			c.Close()
			upSums = append(upSums, sha(b))
		}
	}()
	go func() { // host -> guest
		defer wg.Done()
		for {
			c, err := down.Accept()
			if err != nil {
				return
			}
			pairsSeen = append(pairsSeen, pairs())
			c.Write(payload)
			c.(*net.TCPConn).CloseWrite()
			io.Copy(io.Discard, c) // until the guest closes too
			c.Close()
		}
	}()
	exit := m.Run()
	up.Close()
	down.Close()
	wg.Wait()
	out := con.String()
	t.Logf("guest console:\n%s", out)
	require.False(t, exit.Failed(), "guest ended with %v", exit)
	kv := results(out)
	require.Equal(t, "1", kv["done"], "guest script did not finish")
	assert.Equal(t, "2", kv["rx_queues"])
	assert.Equal(t, "2", kv["tx_queues"])
	assert.Equal(t, "2", kv["blk_queues"], "/sys/block/vda/mq")
	assert.Equal(t, sha(diskData), kv["disk_sha"])
	for i := 1; i <= 4; i++ {
		assert.Equal(t, sha(payload), kv[fmt.Sprintf("down_sha%d", i)], "host -> guest transfer %d", i)
	}
	assert.Equal(t, []string{sha(payload), sha(payload), sha(payload), sha(payload)}, upSums, "guest -> host transfers")
	assert.Equal(t, []uint64{2, 2, 2, 2}, pairsSeen, "the driver set two pairs")
	assert.Zero(t, m.Stats()["virtio"].(map[string]map[string]uint64)["net0"]["ctrl_errors"])
}
