package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/kubevmm/kubevmm/vmm/api"
	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// Poll intervals of the guest agent, as KubeVirt's launcher polls qemu-ga:
// the OS, host name and interfaces every agentPoll (also how often a
// missing agent is looked for), users and filesystems every
// agentSlowPolls polls.
const (
	agentPoll      = 10 * time.Second
	agentSlowPolls = 3
	// agentTimeout bounds one poll (or one request): an agent that does
	// not answer in it counts as disconnected.
	agentTimeout = 5 * time.Second
)

var errAgentNotConnected = fmt.Errorf("%w: the guest agent is not connected", api.ErrConflict)

// agentPoller keeps one connection to the guest agent (through the VM's
// vsock device, port guestagent.Port), polls it, and keeps the last
// answers for the control API's Info, where virt-handler reads them.
type agentPoller struct {
	dial func(context.Context) (net.Conn, error)
	// running says the guest runs: a paused guest's agent cannot answer,
	// and is not polled (what it said last stays).
	running   func() bool
	log       *slog.Logger
	interval  time.Duration
	slowPolls int

	mu     sync.Mutex
	client *ga.Client
	status api.GuestAgent
	thaw   *time.Timer // the unfreeze timeout of a freeze
}

func newAgentPoller(vsockSocket string, log *slog.Logger) *agentPoller {
	return &agentPoller{
		dial: func(ctx context.Context) (net.Conn, error) {
			return ga.DialVsock(ctx, vsockSocket, ga.Port)
		},
		log: log, interval: agentPoll, slowPolls: agentSlowPolls,
	}
}

// run polls until ctx ends (the guest ended).
func (p *agentPoller) run(ctx context.Context) {
	defer p.disconnect(nil)
	for n := 0; ; n++ {
		if p.running == nil || p.running() {
			p.poll(ctx, n%p.slowPolls == 0)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.interval):
		}
	}
}

// Status is the last poll's result.
func (p *agentPoller) Status() api.GuestAgent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// conn is the agent's client, connecting if there is none.
func (p *agentPoller) conn(ctx context.Context) (*ga.Client, error) {
	p.mu.Lock()
	c := p.client
	p.mu.Unlock()
	if c != nil {
		return c, nil
	}
	nc, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	c = ga.NewClient(nc)
	p.mu.Lock()
	p.client = c
	p.mu.Unlock()
	return c, nil
}

// disconnect drops the connection (c, or whichever when nil) and what
// the agent said; err says why, for the log.
func (p *agentPoller) disconnect(err error) {
	p.mu.Lock()
	c, was := p.client, p.status.Connected
	p.client, p.status = nil, api.GuestAgent{}
	p.mu.Unlock()
	if c != nil {
		_ = c.Close() // a broken connection: nothing to flush
	}
	if was {
		p.log.Info("guest agent disconnected", "error", fmt.Sprint(err))
	}
}

// guestSide says err is the agent's own answer (an error reply), not a
// broken connection.
func guestSide(err error) bool {
	var e *ga.Error
	return errors.As(err, &e)
}

// poll asks the agent what it knows. A command the agent answers with an
// error (qemu-ga may have it disabled) leaves its part empty; a broken or
// silent connection is dropped, and the next poll connects anew.
func (p *agentPoller) poll(ctx context.Context, slow bool) {
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	c, err := p.conn(ctx)
	if err != nil {
		p.disconnect(err)
		return
	}
	prev := p.Status()
	st := api.GuestAgent{Connected: true}
	if !slow && prev.Connected {
		st.Version, st.SupportedCommands = prev.Version, prev.SupportedCommands
		st.Users, st.Filesystems = prev.Users, prev.Filesystems
	}
	var info ga.AgentInfo
	var host ga.HostName
	var tz ga.Timezone
	steps := []struct {
		cmd  string
		out  any
		slow bool
	}{
		{ga.CmdPing, nil, false},
		{ga.CmdInfo, &info, true},
		{ga.CmdOSInfo, &st.OS, false},
		{ga.CmdHostName, &host, false},
		{ga.CmdTimezone, &tz, false},
		{ga.CmdInterfaces, &st.Interfaces, false},
		{ga.CmdFreezeStatus, &st.FSFreezeStatus, false},
		{ga.CmdUsers, &st.Users, true},
		{ga.CmdFSInfo, &st.Filesystems, true},
	}
	for _, s := range steps {
		if s.slow && !slow && prev.Connected {
			continue
		}
		if err := c.Execute(ctx, s.cmd, nil, s.out); err != nil {
			if s.cmd == ga.CmdPing || !guestSide(err) {
				p.disconnect(err)
				return
			}
		}
	}
	if info.Version != "" {
		st.Version, st.SupportedCommands = info.Version, info.SupportedCommands
	}
	st.Hostname = host.HostName
	if tz.Zone != "" || tz.Offset != 0 {
		st.Timezone = fmt.Sprintf("%s, %d", tz.Zone, tz.Offset)
	}
	p.mu.Lock()
	p.status = st
	p.mu.Unlock()
	if !prev.Connected {
		p.log.Info("guest agent connected", "version", st.Version, "os", st.OS.PrettyName)
	}
}

// connected is the client of a connected agent.
func (p *agentPoller) connected() (*ga.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client == nil || !p.status.Connected {
		return nil, errAgentNotConnected
	}
	return p.client, nil
}

// shutdown asks the guest through its agent to power down or, with mode
// "reboot", to reboot.
func (p *agentPoller) shutdown(mode string) error {
	c, err := p.connected()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	return c.Send(ctx, ga.CmdShutdown, ga.ShutdownArgs{Mode: mode})
}

// freeze freezes the guest's filesystems; after timeout (0: never) they
// are thawed unless unfreeze came first.
func (p *agentPoller) freeze(timeout time.Duration) error {
	if err := p.fsCommand(ga.CmdFreeze); err != nil {
		return err
	}
	if timeout > 0 {
		p.mu.Lock()
		if p.thaw != nil {
			p.thaw.Stop()
		}
		p.thaw = time.AfterFunc(timeout, func() {
			p.log.Info("the unfreeze timeout is over: thawing the guest's filesystems", "timeout", timeout)
			if err := p.fsCommand(ga.CmdThaw); err != nil {
				p.log.Warn("thawing the guest's filesystems", "error", err)
			}
		})
		p.mu.Unlock()
	}
	return nil
}

func (p *agentPoller) unfreeze() error {
	p.mu.Lock()
	if p.thaw != nil {
		p.thaw.Stop()
		p.thaw = nil
	}
	p.mu.Unlock()
	return p.fsCommand(ga.CmdThaw)
}

// fsCommand runs freeze or thaw and records the freeze status after it.
func (p *agentPoller) fsCommand(cmd string) error {
	c, err := p.connected()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentTimeout)
	defer cancel()
	var n int
	if err := c.Execute(ctx, cmd, nil, &n); err != nil {
		if guestSide(err) {
			return fmt.Errorf("%w: %v", api.ErrConflict, err)
		}
		return err
	}
	var st string
	if err := c.Execute(ctx, ga.CmdFreezeStatus, nil, &st); err == nil {
		p.mu.Lock()
		p.status.FSFreezeStatus = st
		p.mu.Unlock()
	}
	p.log.Info("guest filesystems", "command", cmd, "count", n, "status", st)
	return nil
}
