package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/vmm/api"
	ga "github.com/kubevmm/kubevmm/vmm/guestagent"
)

// InfoSource values of status.interfaces, as KubeVirt writes them.
const (
	infoSourceDomain     = "domain"
	infoSourceGuestAgent = "guest-agent"
	infoSourceMultus     = "multus-status"
)

// agentStatus writes what the guest agent reports into the VMI status:
// guestOSInfo, the AgentConnected condition (removed while no agent
// answers, as KubeVirt does) and the guest's view of the interfaces. The
// last guestOSInfo stays when the agent goes, as in KubeVirt.
func agentStatus(st *v1.VirtualMachineInstanceStatus, agent *api.GuestAgent, now metav1.Time) {
	if agent == nil || !agent.Connected {
		st.Conditions = v1.RemoveVMICondition(st.Conditions, v1.VirtualMachineInstanceAgentConnected)
		return
	}
	st.Conditions = v1.SetVMICondition(st.Conditions, v1.VirtualMachineInstanceCondition{
		Type: v1.VirtualMachineInstanceAgentConnected, Status: corev1.ConditionTrue,
	}, now)
	st.GuestOSInfo = guestOSInfo(agent.OS)
	st.Interfaces = mergeInterfaces(st.Interfaces, agent.Interfaces)
}

func guestOSInfo(o ga.OSInfo) v1.VirtualMachineInstanceGuestOSInfo {
	return v1.VirtualMachineInstanceGuestOSInfo{
		Name: o.Name, KernelRelease: o.KernelRelease, Version: o.Version, PrettyName: o.PrettyName,
		VersionID: o.VersionID, KernelVersion: o.KernelVersion, Machine: o.Machine, ID: o.ID,
	}
}

// mergeInterfaces adds the guest agent's interfaces to the domain's, as
// KubeVirt merges them: a guest interface with a domain NIC's MAC is that
// NIC (infoSource "domain, guest-agent", the guest's interface name; the
// addresses stay the pod's for masquerade NICs, which the guest's private
// address would not reach, and are the guest's where the domain has
// none); the others are added with infoSource "guest-agent". The
// loopback interface is left out.
func mergeInterfaces(domain []v1.VirtualMachineInstanceNetworkInterface, guest []ga.Interface) []v1.VirtualMachineInstanceNetworkInterface {
	out := append([]v1.VirtualMachineInstanceNetworkInterface(nil), domain...)
	byMAC := map[string]int{}
	for i := range out {
		byMAC[strings.ToLower(out[i].MAC)] = i
	}
	for _, g := range guest {
		if g.Name == "lo" {
			continue
		}
		var ips []string
		for _, a := range g.IPAddresses {
			ips = append(ips, a.Address)
		}
		i, ok := byMAC[strings.ToLower(g.HardwareAddress)]
		if !ok || g.HardwareAddress == "" {
			n := v1.VirtualMachineInstanceNetworkInterface{InterfaceName: g.Name, MAC: g.HardwareAddress, IPs: ips, InfoSource: infoSourceGuestAgent}
			if len(ips) > 0 {
				n.IP = ips[0]
			}
			out = append(out, n)
			continue
		}
		out[i].InterfaceName = g.Name
		out[i].InfoSource = infoSources(true, true, strings.Contains(out[i].InfoSource, infoSourceMultus))
		if len(out[i].IPs) == 0 && len(ips) > 0 {
			out[i].IP, out[i].IPs = ips[0], ips
		}
	}
	return out
}

// infoSources is an interface's infoSource: who reports it, in KubeVirt's
// order, comma-joined.
func infoSources(domain, agent, multus bool) string {
	var s []string
	for _, src := range []struct {
		on   bool
		name string
	}{{domain, infoSourceDomain}, {agent, infoSourceGuestAgent}, {multus, infoSourceMultus}} {
		if src.on {
			s = append(s, src.name)
		}
	}
	return strings.Join(s, ", ")
}

// errNoAgent is KubeVirt's answer for a VMI whose agent is not there.
const errNoAgent = "VMI does not have guest agent connected"

// agentInfo reads the guest agent's last answers from the VMI's launcher;
// on failure, the HTTP status to answer with.
func (s *Server) agentInfo(r *http.Request) (*api.GuestAgent, int, error) {
	vmi, l, code, err := s.launcher(r)
	if err != nil {
		return nil, code, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), launcherQueryTimeout)
	defer cancel()
	info, err := l.client().Info(ctx)
	if err != nil {
		return nil, http.StatusServiceUnavailable, fmt.Errorf("VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	if info.GuestAgent == nil || !info.GuestAgent.Connected {
		return nil, http.StatusConflict, fmt.Errorf("%s", errNoAgent)
	}
	return info.GuestAgent, 0, nil
}

// guestAgentRoute serves one of the subresources that read the agent.
func (s *Server) guestAgentRoute(build func(*api.GuestAgent) any) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, code, err := s.agentInfo(r)
		if err != nil {
			http.Error(w, err.Error(), code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		// the status is sent: a client gone mid-body cannot be told more
		_ = json.NewEncoder(w).Encode(build(a))
	}
}

func guestAgentInfo(a *api.GuestAgent) any {
	out := v1.VirtualMachineInstanceGuestAgentInfo{
		GAVersion: a.Version, Hostname: a.Hostname, OS: guestOSInfo(a.OS), Timezone: a.Timezone,
		UserList: users(a.Users), FSInfo: v1.VirtualMachineInstanceFileSystemInfo{Filesystems: filesystems(a.Filesystems)},
		FSFreezeStatus: a.FSFreezeStatus,
	}
	for _, c := range a.SupportedCommands {
		out.SupportedCommands = append(out.SupportedCommands, v1.GuestAgentCommandInfo{Name: c.Name, Enabled: c.Enabled})
	}
	return out
}

func userList(a *api.GuestAgent) any {
	return v1.VirtualMachineInstanceGuestOSUserList{Items: users(a.Users)}
}

func filesystemList(a *api.GuestAgent) any {
	return v1.VirtualMachineInstanceFileSystemList{Items: filesystems(a.Filesystems)}
}

func users(us []ga.User) []v1.VirtualMachineInstanceGuestOSUser {
	out := []v1.VirtualMachineInstanceGuestOSUser{}
	for _, u := range us {
		out = append(out, v1.VirtualMachineInstanceGuestOSUser{UserName: u.User, Domain: u.Domain, LoginTime: u.LoginTime})
	}
	return out
}

func filesystems(fss []ga.Filesystem) []v1.VirtualMachineInstanceFileSystem {
	out := []v1.VirtualMachineInstanceFileSystem{}
	for _, f := range fss {
		fs := v1.VirtualMachineInstanceFileSystem{DiskName: f.Name, MountPoint: f.Mountpoint, FileSystemType: f.Type}
		if f.UsedBytes != nil {
			fs.UsedBytes = clampInt(*f.UsedBytes)
		}
		if f.TotalBytes != nil {
			fs.TotalBytes = clampInt(*f.TotalBytes)
		}
		for _, d := range f.Disk {
			fs.Disk = append(fs.Disk, v1.VirtualMachineInstanceFileSystemDisk{Serial: d.Serial, BusType: d.BusType})
		}
		out = append(out, fs)
	}
	return out
}

// freeze asks the launcher to freeze the guest's filesystems; the body
// is KubeVirt's FreezeUnfreezeTimeout.
func (s *Server) freeze(w http.ResponseWriter, r *http.Request) {
	var body v1.FreezeUnfreezeTimeout
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&body); err != nil {
		http.Error(w, fmt.Sprintf("freeze: bad body: %v", err), http.StatusBadRequest)
		return
	}
	if body.UnfreezeTimeout == nil || body.UnfreezeTimeout.Duration < 0 {
		http.Error(w, "freeze: unfreezeTimeout must be given and not negative", http.StatusBadRequest)
		return
	}
	s.fsCommand(w, r, func(ctx context.Context, c *api.Client) error {
		return c.Freeze(ctx, api.FreezeRequest{UnfreezeTimeout: int64((body.UnfreezeTimeout.Duration + time.Second - 1) / time.Second)})
	})
}

func (s *Server) unfreeze(w http.ResponseWriter, r *http.Request) {
	s.fsCommand(w, r, func(ctx context.Context, c *api.Client) error { return c.Unfreeze(ctx) })
}

func (s *Server) fsCommand(w http.ResponseWriter, r *http.Request, do func(context.Context, *api.Client) error) {
	if _, code, err := s.agentInfo(r); err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	_, l, code, err := s.launcher(r)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), launcherQueryTimeout)
	defer cancel()
	if err := do(ctx, l.client()); err != nil {
		code := http.StatusInternalServerError
		if e := (*api.Error)(nil); errors.As(err, &e) && e.Status == http.StatusConflict {
			code = http.StatusConflict
		}
		http.Error(w, err.Error(), code)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// clampInt is a guest's byte count as KubeVirt's int field holds it: a
// hostile guest's 2^64-1 reads as the largest int, not as a negative.
func clampInt(u uint64) int {
	return int(min(u, math.MaxInt))
}
