package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubevmm/kubevmm/api/vmispec"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// launcherConn is virt-handler's view of one launcher: its control API and
// the socket directory of its pod.
type launcherConn struct {
	dir socketDir
}

func (l launcherConn) String() string { return l.dir.String() }

func (l launcherConn) client() *api.Client {
	return api.NewDialClient(l.dir.String()+"/"+vmispec.ControlSocket, func(ctx context.Context) (net.Conn, error) {
		return l.dir.dial(ctx, vmispec.ControlSocket)
	})
}

// soPeerPidfd is SO_PEERPIDFD (include/uapi/asm-generic/socket.h, Linux
// 6.5): a pidfd of the socket's peer, taken when it connected or
// listened, so no recycled PID can stand in for it.
const soPeerPidfd = 77

// process is the launcher's process, identified through its control
// socket and held by a pidfd: in virt-handler's PID namespace (the
// host's: the handler runs with hostPID), and checked to be in the
// cgroup of the launcher's pod (the kubelet's, which no pod can join).
// What the handler does in the process's namespaces it does through
// descriptors opened while the pidfd said the process still ran, so a
// launcher that exits and leaves its PID to a process of another pod
// gets that pod nothing. Close releases it.
func (l launcherConn) process(ctx context.Context) (*launcherProcess, error) {
	c, err := l.dir.dial(ctx, vmispec.ControlSocket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return nil, err
	}
	var p *launcherProcess
	var perr error
	if err := raw.Control(func(fd uintptr) { p, perr = peerProcess(int(fd)) }); err != nil {
		return nil, err
	}
	if perr != nil {
		return nil, fmt.Errorf("the process of the launcher in %s: %w", l, perr)
	}
	if err := p.inPod(l.dir.podUID); err != nil {
		p.Close()
		return nil, fmt.Errorf("the launcher in %s: %w", l, err)
	}
	return p, nil
}

// peerProcess is the peer of the connected unix socket fd, held by a
// pidfd: SO_PEERPIDFD where the kernel has it, else SO_PEERCRED's PID
// opened with pidfd_open (that PID may have been recycled since the peer
// listened: the cgroup check that follows is what refuses a stranger).
func peerProcess(fd int) (*launcherProcess, error) {
	pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, soPeerPidfd)
	if err == nil {
		pid, err := pidOfPidfd(pidfd)
		if err != nil {
			unix.Close(pidfd)
			return nil, err
		}
		return &launcherProcess{pid: pid, pidfd: pidfd}, nil
	}
	if !errors.Is(err, unix.ENOPROTOOPT) {
		return nil, fmt.Errorf("SO_PEERPIDFD: %w", err)
	}
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if cred.Pid <= 0 {
		return nil, errors.New("peer credentials: no PID (is virt-handler in the host PID namespace?)")
	}
	pidfd, err = unix.PidfdOpen(int(cred.Pid), 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd of pid %d: %w", cred.Pid, err)
	}
	return &launcherProcess{pid: int(cred.Pid), pidfd: pidfd}, nil
}

// pidOfPidfd reads the PID a pidfd holds from its fdinfo.
func pidOfPidfd(pidfd int) (int, error) {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || pid <= 0 {
				return 0, fmt.Errorf("pidfd %d: pid %q (the process has exited, or is in another PID namespace)", pidfd, strings.TrimSpace(v))
			}
			return pid, nil
		}
	}
	return 0, fmt.Errorf("pidfd %d: no Pid in its fdinfo", pidfd)
}

type launcherProcess struct {
	pid   int
	pidfd int
}

// Close releases the pidfd.
func (p *launcherProcess) Close() { unix.Close(p.pidfd) }

// alive fails once the process has exited: a pidfd polls readable then.
// What was opened under /proc/<pid> before a successful alive belongs to
// the process the pidfd holds.
func (p *launcherProcess) alive() error {
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	if err != nil {
		return fmt.Errorf("polling the pidfd of pid %d: %w", p.pid, err)
	}
	if n > 0 {
		return fmt.Errorf("launcher pid %d exited", p.pid)
	}
	return nil
}

// inPod checks that the process is in the cgroup of pod uid.
func (p *launcherProcess) inPod(uid types.UID) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/cgroup")
	if err != nil {
		return fmt.Errorf("cgroup of pid %d: %w", p.pid, err)
	}
	if err := p.alive(); err != nil {
		return err
	}
	if !cgroupOfPod(b, uid) {
		return fmt.Errorf("pid %d is not in the cgroup of pod %s (%s)", p.pid, uid, strings.TrimSpace(string(b)))
	}
	return nil
}

// cgroupOfPod reports whether /proc/<pid>/cgroup names a cgroup of the
// pod with uid, as the kubelet lays them out: .../pod<uid>/<container>
// with the cgroupfs driver, ...-pod<uid with _ for ->.slice/... with
// systemd's. Every hierarchy listed must (a process in a pod is in the
// pod's cgroup in each).
func cgroupOfPod(procCgroup []byte, uid types.UID) bool {
	if uid == "" {
		return false
	}
	cgroupfs, systemd := "pod"+string(uid), "-pod"+strings.ReplaceAll(string(uid), "-", "_")+".slice"
	seen := false
	for _, line := range strings.Split(strings.TrimSpace(string(procCgroup)), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return false
		}
		if parts[2] == "/" && parts[0] == "0" && parts[1] == "" {
			continue // cgroup v1 beside an unused v2 hierarchy
		}
		ok := false
		for _, e := range strings.Split(parts[2], "/") {
			if e == cgroupfs || strings.HasSuffix(e, systemd) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
		seen = true
	}
	return seen
}

// netns opens the process's network namespace.
func (p *launcherProcess) netns() (netns.NsHandle, error) {
	ns, err := netns.GetFromPid(p.pid)
	if err != nil {
		return ns, fmt.Errorf("network namespace of launcher pid %d: %w", p.pid, err)
	}
	if err := p.alive(); err != nil {
		ns.Close()
		return netns.None(), err
	}
	return ns, nil
}

// readFile reads a file of the process's root filesystem (of its
// container): /proc/<pid>/root, where an absolute symlink resolves
// inside that root.
func (p *launcherProcess) readFile(path string) ([]byte, error) {
	// O_NONBLOCK: a FIFO put there must not hold the handler.
	f, err := os.OpenFile("/proc/"+strconv.Itoa(p.pid)+"/root"+path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	if err := p.alive(); err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s of launcher pid %d: not a regular file", path, p.pid)
	}
	return io.ReadAll(io.LimitReader(f, maxRecord))
}

// launcherQueryTimeout bounds one question to a launcher; a launcher
// that cannot answer in this time is reported as unreachable.
const launcherQueryTimeout = 5 * time.Second

// info asks the launcher for the VM's state. When the launcher is gone, the
// exit record it left is the answer; errNoSocket means neither exists.
func (l launcherConn) info(ctx context.Context) (api.Info, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, launcherQueryTimeout)
	defer cancel()
	i, err := l.client().Info(ctx)
	if err == nil {
		return i, true, nil
	}
	if b, ferr := l.dir.readFile(vmispec.ExitFile); ferr == nil {
		var rec api.Info
		if json.Unmarshal(b, &rec) == nil {
			return rec, false, nil
		}
	}
	if ok, serr := l.dir.exists(vmispec.ControlSocket); serr == nil && !ok {
		return api.Info{}, false, errNoSocket
	}
	return api.Info{}, false, err
}
