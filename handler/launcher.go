package handler

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/launcher/spec"
	"github.com/kubevmm/kubevmm/vmm/api"
)

// launcherConn is virt-handler's view of one launcher: its control API and
// the socket directory of its pod.
type launcherConn struct {
	dir socketDir
}

func (l launcherConn) String() string { return l.dir.String() }

func (l launcherConn) client() *api.Client {
	return api.NewDialClient(l.dir.String()+"/"+spec.ControlSocket, func(ctx context.Context) (net.Conn, error) {
		return l.dir.dial(ctx, spec.ControlSocket)
	})
}

// pid is the launcher's process ID in virt-handler's PID namespace (the
// host's: the handler runs with hostPID), from the socket's peer
// credentials; that is how the handler finds the pod's network namespace.
func (l launcherConn) pid(ctx context.Context) (int, error) {
	c, err := l.dir.dial(ctx, spec.ControlSocket)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("peer credentials of the launcher in %s: %w", l, serr)
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("peer credentials of the launcher in %s: no PID (is virt-handler in the host PID namespace?)", l)
	}
	return int(cred.Pid), nil
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
	if b, ferr := l.dir.readFile(spec.ExitFile); ferr == nil {
		var rec api.Info
		if json.Unmarshal(b, &rec) == nil {
			return rec, false, nil
		}
	}
	if ok, serr := l.dir.exists(spec.ControlSocket); serr == nil && !ok {
		return api.Info{}, false, errNoSocket
	}
	return api.Info{}, false, err
}
