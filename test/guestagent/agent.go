package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// version is what guest-info reports.
const version = "kubevmm-test-agent 1.0"

// agent answers qemu-ga commands. Its paths are the guest's; tests point
// them at files of their own.
type agent struct {
	osRelease string // /etc/os-release
	mounts    string // /proc/mounts
	utmp      string // /var/run/utmp
	sysBlock  string // /sys/class/block
	console   io.Writer
	// signalInit asks init to end the guest, as busybox's halt, poweroff
	// and reboot do: SIGUSR1, SIGUSR2, SIGTERM to PID 1.
	signalInit func(unix.Signal) error

	mu     sync.Mutex
	frozen []string // mountpoints frozen by guest-fsfreeze-freeze
}

func newAgent(console io.Writer) *agent {
	return &agent{
		osRelease: "/etc/os-release", mounts: "/proc/mounts", utmp: "/var/run/utmp", sysBlock: "/sys/class/block",
		console:    console,
		signalInit: func(s unix.Signal) error { return unix.Kill(1, s) },
	}
}

// commands are the supported commands and whether each replies on success.
var commands = []struct {
	name  string
	reply bool
}{
	{ga.CmdSync, true}, {ga.CmdSyncDelimited, true}, {ga.CmdPing, true}, {ga.CmdInfo, true},
	{ga.CmdOSInfo, true}, {ga.CmdHostName, true}, {ga.CmdTimezone, true}, {ga.CmdInterfaces, true}, {ga.CmdUsers, true}, {ga.CmdFSInfo, true},
	{ga.CmdFreeze, true}, {ga.CmdThaw, true}, {ga.CmdFreezeStatus, true}, {ga.CmdShutdown, false},
}

// maxRequest bounds one request line; the host side is trusted, but a
// request without a newline must not grow the agent without end.
const maxRequest = 1 << 20

// serve answers the requests on c, one per line, until c ends. A 0xFF
// byte (guest-sync-delimited's) drops what came before it on its line.
func (a *agent) serve(c io.ReadWriter) error {
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		line, err := readLine(r)
		if errors.Is(err, errTooLong) {
			if _, err := c.Write(encode(nil, &ga.Error{Class: ga.ClassGenericError, Desc: err.Error()})); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if i := bytes.LastIndexByte(line, ga.Delimiter); i >= 0 {
			line = line[i+1:]
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		out, reply := a.handle(line)
		if !reply {
			continue
		}
		if _, err := c.Write(out); err != nil {
			return err
		}
	}
}

var errTooLong = errors.New("request longer than 1 MiB")

// readLine reads one line; a line longer than maxRequest is read to its
// end and dropped (errTooLong).
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	over := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !over && len(line)+len(chunk) <= maxRequest {
			line = append(line, chunk...)
		} else {
			over, line = true, nil
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && (!errors.Is(err, io.EOF) || len(line) == 0 && !over):
			return nil, err
		case over:
			return nil, errTooLong
		}
		return line, nil
	}
}

// handle answers one request: the reply's bytes (a line; with a leading
// 0xFF for guest-sync-delimited) and whether to send it.
func (a *agent) handle(line []byte) ([]byte, bool) {
	var req ga.Request
	if err := json.Unmarshal(line, &req); err != nil {
		return encode(nil, &ga.Error{Class: ga.ClassGenericError, Desc: fmt.Sprintf("JSON parse error, %v", err)}), true
	}
	if req.Execute == "" {
		return encode(nil, &ga.Error{Class: ga.ClassGenericError, Desc: "QMP input lacks member 'execute'"}), true
	}
	ret, err := a.run(req)
	var e *ga.Error
	if err != nil && !errors.As(err, &e) {
		e = &ga.Error{Class: ga.ClassGenericError, Desc: err.Error()}
	}
	switch {
	case req.Execute == ga.CmdShutdown && e == nil:
		return nil, false
	case req.Execute == ga.CmdSyncDelimited && e == nil:
		return append([]byte{ga.Delimiter}, encode(ret, nil)...), true
	}
	return encode(ret, e), true
}

func encode(ret any, e *ga.Error) []byte {
	var resp any = map[string]any{"return": ret}
	if e != nil {
		resp = map[string]any{"error": e}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"error": ga.Error{Class: ga.ClassGenericError, Desc: err.Error()}})
	}
	return append(b, '\n')
}

// args decodes a command's arguments into v, as qemu-ga refuses a
// member of the wrong type.
func args(req ga.Request, v any) error {
	if len(req.Arguments) == 0 {
		return nil
	}
	if err := json.Unmarshal(req.Arguments, v); err != nil {
		return &ga.Error{Class: ga.ClassGenericError, Desc: fmt.Sprintf("Invalid parameter: %v", err)}
	}
	return nil
}

func (a *agent) run(req ga.Request) (any, error) {
	switch req.Execute {
	case ga.CmdSync, ga.CmdSyncDelimited:
		var s struct {
			ID *int64 `json:"id"`
		}
		if err := args(req, &s); err != nil {
			return nil, err
		}
		if s.ID == nil {
			return nil, &ga.Error{Class: ga.ClassGenericError, Desc: "Parameter 'id' is missing"}
		}
		return *s.ID, nil
	case ga.CmdPing:
		return struct{}{}, nil
	case ga.CmdInfo:
		info := ga.AgentInfo{Version: version}
		for _, c := range commands {
			info.SupportedCommands = append(info.SupportedCommands, ga.CommandInfo{Name: c.name, Enabled: true, SuccessResponse: c.reply})
		}
		return info, nil
	case ga.CmdOSInfo:
		return a.osInfo()
	case ga.CmdHostName:
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("hostname: %w", err)
		}
		return ga.HostName{HostName: h}, nil
	case ga.CmdTimezone:
		zone, offset := time.Now().Zone()
		return ga.Timezone{Zone: zone, Offset: offset}, nil
	case ga.CmdInterfaces:
		return interfaces()
	case ga.CmdUsers:
		return a.users()
	case ga.CmdFSInfo:
		return a.fsInfo()
	case ga.CmdFreeze:
		return a.freeze()
	case ga.CmdThaw:
		return a.thaw(), nil
	case ga.CmdFreezeStatus:
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.frozen != nil {
			return ga.FreezeFrozen, nil
		}
		return ga.FreezeThawed, nil
	case ga.CmdShutdown:
		var s ga.ShutdownArgs
		if err := args(req, &s); err != nil {
			return nil, err
		}
		return nil, a.shutdown(s.Mode)
	}
	return nil, &ga.Error{Class: ga.ClassCommandNotFound, Desc: fmt.Sprintf("The command %s has not been found", req.Execute)}
}

// osInfo is os-release's fields and uname's.
func (a *agent) osInfo() (ga.OSInfo, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ga.OSInfo{}, fmt.Errorf("uname: %w", err)
	}
	info := ga.OSInfo{
		KernelRelease: unix.ByteSliceToString(u.Release[:]),
		KernelVersion: unix.ByteSliceToString(u.Version[:]),
		Machine:       unix.ByteSliceToString(u.Machine[:]),
	}
	b, err := os.ReadFile(a.osRelease)
	if err != nil {
		// qemu-ga answers with uname alone when os-release is missing
		return info, nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			info.ID = v
		case "NAME":
			info.Name = v
		case "PRETTY_NAME":
			info.PrettyName = v
		case "VERSION":
			info.Version = v
		case "VERSION_ID":
			info.VersionID = v
		case "VARIANT":
			info.Variant = v
		case "VARIANT_ID":
			info.VariantID = v
		}
	}
	return info, nil
}

// interfaces lists the guest's interfaces with their addresses; an
// interface without a hardware address shows zeros, as in qemu-ga.
func interfaces() ([]ga.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	out := []ga.Interface{}
	for _, i := range ifs {
		gi := ga.Interface{Name: i.Name, HardwareAddress: "00:00:00:00:00:00"}
		if len(i.HardwareAddr) > 0 {
			gi.HardwareAddress = i.HardwareAddr.String()
		}
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", i.Name, err)
		}
		for _, ad := range addrs {
			n, ok := ad.(*net.IPNet)
			if !ok {
				continue
			}
			ones, _ := n.Mask.Size()
			t := "ipv6"
			if n.IP.To4() != nil {
				t = "ipv4"
			}
			gi.IPAddresses = append(gi.IPAddresses, ga.IPAddress{Type: t, Address: n.IP.String(), Prefix: ones})
		}
		out = append(out, gi)
	}
	return out, nil
}

// utmp record layout on x86-64 Linux (glibc and busybox agree): 384 bytes,
// ut_type at 0 (int16), ut_user at 44 (32 bytes), ut_tv.tv_sec at 340
// and tv_usec at 344 (int32 each).
const (
	utmpSize     = 384
	utmpUser     = 44
	utmpTV       = 340
	userProcess  = 7
	utmpUserSize = 32
)

// users are the logged-in users (utmp USER_PROCESS records), each once
// with its earliest login, as qemu-ga reports them. No utmp: nobody.
func (a *agent) users() ([]ga.User, error) {
	out := []ga.User{}
	b, err := os.ReadFile(a.utmp)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", a.utmp, err)
	}
	seen := map[string]int{}
	for off := 0; off+utmpSize <= len(b); off += utmpSize {
		r := b[off : off+utmpSize]
		if int16(r[0])|int16(r[1])<<8 != userProcess {
			continue
		}
		name := unix.ByteSliceToString(r[utmpUser : utmpUser+utmpUserSize])
		if name == "" {
			continue
		}
		sec := int32(uint32(r[utmpTV]) | uint32(r[utmpTV+1])<<8 | uint32(r[utmpTV+2])<<16 | uint32(r[utmpTV+3])<<24)
		usec := int32(uint32(r[utmpTV+4]) | uint32(r[utmpTV+5])<<8 | uint32(r[utmpTV+6])<<16 | uint32(r[utmpTV+7])<<24)
		t := float64(sec) + float64(usec)/1e6
		if i, ok := seen[name]; ok {
			out[i].LoginTime = min(out[i].LoginTime, t)
			continue
		}
		seen[name] = len(out)
		out = append(out, ga.User{User: name, LoginTime: t})
	}
	return out, nil
}

// mount is one line of /proc/mounts.
type mount struct{ dev, dir, typ string }

// blockMounts are the mounted filesystems on block devices: the ones
// qemu-ga reports and freezes (no proc, sysfs, tmpfs, rootfs).
func (a *agent) blockMounts() ([]mount, error) {
	b, err := os.ReadFile(a.mounts)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", a.mounts, err)
	}
	var out []mount
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.HasPrefix(f[0], "/dev/") {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(f[0], &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK {
			continue
		}
		// /proc/mounts escapes spaces and such as \040
		out = append(out, mount{dev: f[0], dir: unescape(f[1]), typ: f[2]})
	}
	return out, nil
}

func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &v); err == nil {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func (a *agent) fsInfo() ([]ga.Filesystem, error) {
	ms, err := a.blockMounts()
	if err != nil {
		return nil, err
	}
	out := []ga.Filesystem{}
	for _, m := range ms {
		dev := filepath.Base(m.dev)
		fs := ga.Filesystem{Name: dev, Mountpoint: m.dir, Type: m.typ, Disk: []ga.DiskAddress{}}
		var st unix.Statfs_t
		if unix.Statfs(m.dir, &st) == nil {
			total := st.Blocks * uint64(st.Frsize)
			used := (st.Blocks - st.Bfree) * uint64(st.Frsize)
			fs.TotalBytes, fs.UsedBytes = &total, &used
		}
		fs.Disk = append(fs.Disk, a.diskAddress(dev))
		out = append(out, fs)
	}
	return out, nil
}

// diskAddress describes the disk under block device dev (a partition's
// parent). Our VMM's disks are virtio-mmio: no PCI address.
func (a *agent) diskAddress(dev string) ga.DiskAddress {
	disk := dev
	if _, err := os.Stat(filepath.Join(a.sysBlock, dev, "partition")); err == nil {
		if p, err := filepath.EvalSymlinks(filepath.Join(a.sysBlock, dev, "..")); err == nil {
			disk = filepath.Base(p)
		}
	}
	d := ga.DiskAddress{PCIController: ga.PCIAddress{Domain: -1, Bus: -1, Slot: -1, Function: -1}, BusType: "unknown", Dev: "/dev/" + disk}
	if strings.HasPrefix(disk, "vd") {
		d.BusType = "virtio"
	}
	if s, err := os.ReadFile(filepath.Join(a.sysBlock, disk, "serial")); err == nil {
		d.Serial = strings.TrimSpace(string(s))
	}
	return d
}

// freeze freezes every mounted block filesystem that can be frozen
// (FIFREEZE; one that cannot is skipped, as qemu-ga skips them) and
// returns how many it froze. On a failure it thaws what it froze.
func (a *agent) freeze() (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.frozen != nil {
		return 0, &ga.Error{Class: ga.ClassGenericError, Desc: "the filesystems are frozen already"}
	}
	ms, err := a.blockMounts()
	if err != nil {
		return 0, err
	}
	frozen := []string{}
	for _, m := range ms {
		err := ioctlDir(m.dir, fiFreeze)
		switch {
		case err == nil:
			frozen = append(frozen, m.dir)
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EBUSY):
			// cannot be frozen, or read-only (EBUSY): nothing to flush
		default:
			for _, d := range frozen {
				_ = ioctlDir(d, fiThaw) // undoing: the freeze error is the one to report
			}
			return 0, fmt.Errorf("freezing %s: %w", m.dir, err)
		}
	}
	if len(frozen) > 0 {
		// with none frozen the status stays thawed, as in qemu-ga
		a.frozen = frozen
	}
	return len(frozen), nil
}

// thaw thaws what freeze froze and returns how many it thawed.
func (a *agent) thaw() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, d := range a.frozen {
		if ioctlDir(d, fiThaw) == nil {
			n++
		}
	}
	a.frozen = nil
	return n
}

// FIFREEZE and FITHAW, <linux/fs.h>: _IOWR('X', 119, int) and
// _IOWR('X', 120, int); x/sys/unix does not define them.
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

func ioctlDir(dir string, req uint) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.IoctlSetInt(fd, req, 0)
}

// shutdown logs the request on the console and has init end the guest.
func (a *agent) shutdown(mode string) error {
	sig := map[string]unix.Signal{"": unix.SIGUSR2, "powerdown": unix.SIGUSR2, "halt": unix.SIGUSR1, "reboot": unix.SIGTERM}
	s, ok := sig[mode]
	if !ok {
		return &ga.Error{Class: ga.ClassGenericError, Desc: fmt.Sprintf("Invalid parameter 'mode': %q (powerdown, halt or reboot)", mode)}
	}
	if mode == "" {
		mode = "powerdown"
	}
	fmt.Fprintf(a.console, "kubevmm-agent: guest-shutdown mode=%s\n", mode)
	if err := a.signalInit(s); err != nil {
		return fmt.Errorf("signalling init: %w", err)
	}
	return nil
}
