package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/test/hosttools"
	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// pair runs a's serve on one end of a unix socketpair and returns the
// other end.
func pair(t *testing.T, a *agent) net.Conn {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	srv := os.NewFile(uintptr(fds[0]), "agent")
	cf := os.NewFile(uintptr(fds[1]), "client")
	c, err := net.FileConn(cf)
	require.NoError(t, err)
	cf.Close()
	done := make(chan error, 1)
	go func() { done <- a.serve(srv) }()
	t.Cleanup(func() {
		c.Close()
		require.NoError(t, <-done, "serve ends cleanly when the client goes")
		srv.Close()
	})
	return c
}

func testAgent(t *testing.T) (*agent, *bytes.Buffer, *[]unix.Signal) {
	dir := t.TempDir()
	con := &bytes.Buffer{}
	sigs := &[]unix.Signal{}
	a := newAgent(con)
	a.osRelease = filepath.Join(dir, "os-release")
	a.utmp = filepath.Join(dir, "utmp")
	a.signalInit = func(s unix.Signal) error { *sigs = append(*sigs, s); return nil }
	require.NoError(t, os.WriteFile(a.osRelease, []byte("# comment\nNAME=\"kubevmm test guest\"\nID=kubevmm-guest\nPRETTY_NAME='kubevmm test guest (busybox)'\nVERSION_ID=1\n"), 0o644))
	return a, con, sigs
}

func TestCommandsThroughTheClient(t *testing.T) {
	a, _, _ := testAgent(t)
	// two logins of root (the earlier counts) and one of alice; a dead
	// process record is not a login
	var utmp []byte
	rec := func(typ int16, user string, sec int32) {
		r := make([]byte, utmpSize)
		binary.LittleEndian.PutUint16(r[0:], uint16(typ))
		copy(r[utmpUser:], user)
		binary.LittleEndian.PutUint32(r[utmpTV:], uint32(sec))
		binary.LittleEndian.PutUint32(r[utmpTV+4:], 500000)
		utmp = append(utmp, r...)
	}
	rec(userProcess, "root", 2000)
	rec(userProcess, "alice", 3000)
	rec(userProcess, "root", 1000)
	rec(8, "bob", 4000)
	require.NoError(t, os.WriteFile(a.utmp, utmp, 0o644))

	c := ga.NewClient(pair(t, a))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	require.NoError(t, c.Execute(ctx, ga.CmdPing, nil, nil))

	var info ga.AgentInfo
	require.NoError(t, c.Execute(ctx, ga.CmdInfo, nil, &info))
	assert.Equal(t, version, info.Version)
	names := map[string]bool{}
	for _, ci := range info.SupportedCommands {
		names[ci.Name] = ci.SuccessResponse
	}
	for _, cmd := range []string{ga.CmdOSInfo, ga.CmdInterfaces, ga.CmdUsers, ga.CmdFSInfo, ga.CmdFreeze, ga.CmdThaw} {
		assert.True(t, names[cmd], "%s is supported and replies", cmd)
	}
	assert.Contains(t, names, ga.CmdShutdown)
	assert.False(t, names[ga.CmdShutdown], "guest-shutdown has no reply on success")

	var osi ga.OSInfo
	require.NoError(t, c.Execute(ctx, ga.CmdOSInfo, nil, &osi))
	var u unix.Utsname
	require.NoError(t, unix.Uname(&u))
	assert.Equal(t, ga.OSInfo{
		Name: "kubevmm test guest", ID: "kubevmm-guest", PrettyName: "kubevmm test guest (busybox)", VersionID: "1",
		KernelRelease: unix.ByteSliceToString(u.Release[:]), KernelVersion: unix.ByteSliceToString(u.Version[:]), Machine: "x86_64",
	}, osi)

	var hn ga.HostName
	require.NoError(t, c.Execute(ctx, ga.CmdHostName, nil, &hn))
	host, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, host, hn.HostName)

	var ifs []ga.Interface
	require.NoError(t, c.Execute(ctx, ga.CmdInterfaces, nil, &ifs))
	var lo *ga.Interface
	for i := range ifs {
		if ifs[i].Name == "lo" {
			lo = &ifs[i]
		}
	}
	require.NotNil(t, lo, "the loopback interface is listed: %+v", ifs)
	assert.Equal(t, "00:00:00:00:00:00", lo.HardwareAddress)
	assert.Contains(t, lo.IPAddresses, ga.IPAddress{Type: "ipv4", Address: "127.0.0.1", Prefix: 8})

	var users []ga.User
	require.NoError(t, c.Execute(ctx, ga.CmdUsers, nil, &users))
	assert.Equal(t, []ga.User{{User: "root", LoginTime: 1000.5}, {User: "alice", LoginTime: 3000.5}}, users)

	// the host's own mounts: every filesystem on a block device, none else
	var want []mount
	var fss []ga.Filesystem
	require.NoError(t, c.Execute(ctx, ga.CmdFSInfo, nil, &fss))
	want, err = a.blockMounts()
	require.NoError(t, err)
	require.Len(t, fss, len(want))
	for i, fs := range fss {
		assert.Equal(t, want[i].dir, fs.Mountpoint)
		assert.Equal(t, want[i].typ, fs.Type)
		require.NotNil(t, fs.TotalBytes, fs.Mountpoint)
		assert.LessOrEqual(t, *fs.UsedBytes, *fs.TotalBytes, fs.Mountpoint)
		require.Len(t, fs.Disk, 1)
		assert.Equal(t, -1, fs.Disk[0].PCIController.Slot)
	}

	var st string
	require.NoError(t, c.Execute(ctx, ga.CmdFreezeStatus, nil, &st))
	assert.Equal(t, ga.FreezeThawed, st)
}

// exchange sends raw request bytes and reads one reply line.
func exchange(t *testing.T, c net.Conn, r *bufio.Reader, req string) string {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := c.Write([]byte(req))
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	return line
}

func TestProtocolErrors(t *testing.T) {
	a, _, _ := testAgent(t)
	c := pair(t, a)
	r := bufio.NewReader(c)
	for _, tc := range []struct {
		name, req, class, desc string
	}{
		{"not JSON", "{\"execute\": \n", ga.ClassGenericError, "JSON parse error"},
		{"not an object", "[1,2]\n", ga.ClassGenericError, "JSON parse error"},
		{"no execute", "{\"arguments\": {}}\n", ga.ClassGenericError, "lacks member 'execute'"},
		{"unknown command", `{"execute":"guest-exec"}` + "\n", ga.ClassCommandNotFound, "guest-exec has not been found"},
		{"sync without id", `{"execute":"guest-sync"}` + "\n", ga.ClassGenericError, "'id' is missing"},
		{"sync with a string id", `{"execute":"guest-sync","arguments":{"id":"x"}}` + "\n", ga.ClassGenericError, "Invalid parameter"},
		{"shutdown in an unknown mode", `{"execute":"guest-shutdown","arguments":{"mode":"sleep"}}` + "\n", ga.ClassGenericError, "Invalid parameter 'mode'"},
		{"too long", `{"execute":"guest-ping","x":"` + strings.Repeat("a", maxRequest) + "\"}\n", ga.ClassGenericError, "longer than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var resp ga.Response
			line := exchange(t, c, r, tc.req)
			require.NoError(t, json.Unmarshal([]byte(line), &resp), line)
			require.NotNil(t, resp.Error, line)
			assert.Equal(t, tc.class, resp.Error.Class)
			assert.Contains(t, resp.Error.Desc, tc.desc)
		})
	}
	// after all that, the connection still serves
	assert.Equal(t, `{"return":{}}`+"\n", exchange(t, c, r, `{"execute":"guest-ping"}`+"\n"))
	// a 0xFF drops the garbage before it; the delimited sync answers
	// with 0xFF first
	assert.Equal(t, "\xff{\"return\":42}\n", exchange(t, c, r, "{\"exec\xff{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":42}}\n"))
	assert.Equal(t, "{\"return\":7}\n", exchange(t, c, r, `{"execute":"guest-sync","arguments":{"id":7}}`+"\n"))
}

func TestShutdownSignalsInit(t *testing.T) {
	for _, tc := range []struct {
		args string
		mode string
		sig  unix.Signal
	}{
		{``, "powerdown", unix.SIGUSR2},
		{`,"arguments":{"mode":"powerdown"}`, "powerdown", unix.SIGUSR2},
		{`,"arguments":{"mode":"halt"}`, "halt", unix.SIGUSR1},
		{`,"arguments":{"mode":"reboot"}`, "reboot", unix.SIGTERM},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			a, con, sigs := testAgent(t)
			c := pair(t, a)
			r := bufio.NewReader(c)
			// no reply: the ping's is the next line
			_, err := c.Write([]byte(`{"execute":"guest-shutdown"` + tc.args + "}\n"))
			require.NoError(t, err)
			assert.Equal(t, `{"return":{}}`+"\n", exchange(t, c, r, `{"execute":"guest-ping"}`+"\n"))
			assert.Equal(t, []unix.Signal{tc.sig}, *sigs)
			assert.Equal(t, "kubevmm-agent: guest-shutdown mode="+tc.mode+"\n", con.String())
		})
	}
}

// The client's first command is preceded by guest-sync-delimited, which
// skips what an earlier client left unread.
func TestClientSkipsStaleReplies(t *testing.T) {
	a, _, _ := testAgent(t)
	conn := pair(t, a)
	_, err := conn.Write([]byte(`{"execute":"guest-sync","arguments":{"id":1}}` + "\n" + `{"execute":"guest-ping"}` + "\n"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int64
	require.NoError(t, ga.NewClient(conn).Execute(ctx, ga.CmdSync, ga.SyncArgs{ID: 99}, &n))
	assert.Equal(t, int64(99), n)
}

// Nothing freezable mounted: freeze freezes none and the status stays
// thawed, as qemu-ga reports it.
func TestFreezeWithoutFreezableFilesystems(t *testing.T) {
	a, _, _ := testAgent(t)
	a.mounts = filepath.Join(t.TempDir(), "mounts")
	require.NoError(t, os.WriteFile(a.mounts, []byte("proc /proc proc rw 0 0\nnone /dev devtmpfs rw 0 0\n"), 0o644))
	c := ga.NewClient(pair(t, a))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	require.NoError(t, c.Execute(ctx, ga.CmdFreeze, nil, &n))
	assert.Equal(t, 0, n)
	var st string
	require.NoError(t, c.Execute(ctx, ga.CmdFreezeStatus, nil, &st))
	assert.Equal(t, ga.FreezeThawed, st)
	require.NoError(t, c.Execute(ctx, ga.CmdThaw, nil, &n))
	assert.Equal(t, 0, n)
}

// Freeze and thaw on a real ext4 filesystem (a loop mount of the test's
// own: the agent is shown a mounts file holding only it, never the
// host's filesystems).
func TestFreezeAndThawARealFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a filesystem needs root")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	require.NoError(t, os.WriteFile(img, nil, 0o644))
	require.NoError(t, os.Truncate(img, 8<<20))
	hosttools.Run(t, "mkfs.ext4", "-q", "-F", img)
	hosttools.Run(t, "mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		_ = ioctlDir(mnt, fiThaw) // a failed test may leave it frozen
		hosttools.Run(t, "umount", mnt)
	})
	mounts, err := os.ReadFile("/proc/mounts")
	require.NoError(t, err)
	var line string
	for _, l := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == mnt {
			line = l
		}
	}
	require.NotEmpty(t, line, "the loop mount is in /proc/mounts")

	a, _, _ := testAgent(t)
	a.mounts = filepath.Join(dir, "mounts")
	require.NoError(t, os.WriteFile(a.mounts, []byte(line+"\n"), 0o644))
	c := ga.NewClient(pair(t, a))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var fss []ga.Filesystem
	require.NoError(t, c.Execute(ctx, ga.CmdFSInfo, nil, &fss))
	require.Len(t, fss, 1)
	assert.Equal(t, mnt, fss[0].Mountpoint)
	assert.Equal(t, "ext4", fss[0].Type)
	require.NotNil(t, fss[0].TotalBytes)
	assert.Greater(t, *fss[0].TotalBytes, uint64(4<<20))
	assert.Regexp(t, `^/dev/loop\d+$`, fss[0].Disk[0].Dev)

	var n int
	require.NoError(t, c.Execute(ctx, ga.CmdFreeze, nil, &n))
	assert.Equal(t, 1, n)
	var st string
	require.NoError(t, c.Execute(ctx, ga.CmdFreezeStatus, nil, &st))
	assert.Equal(t, ga.FreezeFrozen, st)
	// the kernel says so too: a second FIFREEZE is refused
	assert.ErrorIs(t, ioctlDir(mnt, fiFreeze), unix.EBUSY)
	err = c.Execute(ctx, ga.CmdFreeze, nil, &n)
	var e *ga.Error
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Desc, "frozen already")

	require.NoError(t, c.Execute(ctx, ga.CmdThaw, nil, &n))
	assert.Equal(t, 1, n)
	require.NoError(t, c.Execute(ctx, ga.CmdFreezeStatus, nil, &st))
	assert.Equal(t, ga.FreezeThawed, st)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "after"), []byte("thawed"), 0o644), "the filesystem takes writes again")
	// thawed by the agent: the kernel's FITHAW has nothing left to do
	assert.ErrorIs(t, ioctlDir(mnt, fiThaw), unix.EINVAL)
}
