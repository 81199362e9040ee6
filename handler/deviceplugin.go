package handler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// DefaultDeviceCount is how many of each device a node offers: the number
// of VMs it can run at most (KubeVirt's default).
const DefaultDeviceCount = 1000

// DevicePlugin offers one host device node (/dev/kvm, /dev/net/tun,
// /dev/userfaultfd) to the kubelet as an extended resource with Count
// interchangeable "devices": every allocation gets the same node,
// read-write. The runtime creates it in the container owned by the
// container's user.
type DevicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer

	Resource string // e.g. devices.kubevirt.io/kvm
	DevPath  string // e.g. /dev/kvm
	Count    int
	// Optional: the node may lack the device (/dev/userfaultfd before
	// Linux 6.1). The resource is offered all the same, and a container
	// allocated it there gets no device node, so that pods requesting it
	// start on every node and only what needs the device fails in them.
	Optional bool
	// Dir is the kubelet's device-plugin directory (kubelet.sock is there).
	Dir string
	Log logr.Logger

	socket string
	stop   chan struct{}
}

var _ pluginapi.DevicePluginServer = (*DevicePlugin)(nil)

// kubeletWatchInterval: a kubelet restart deletes every plugin socket in
// Dir and expects plugins to register again; checking for our socket is
// how we notice (the device-plugin API has no other signal).
const kubeletWatchInterval = 5 * time.Second

// Run serves and registers the plugin until ctx ends, serving and
// registering again whenever the kubelet has restarted.
func (p *DevicePlugin) Run(ctx context.Context) error {
	name := "kubevirt-" + filepath.Base(p.DevPath) + ".sock"
	p.socket = filepath.Join(p.Dir, name)
	for {
		srv, err := p.serve()
		if err == nil {
			err = p.register(ctx, name)
			if err != nil {
				srv.Stop()
			}
		}
		if err != nil {
			p.Log.Error(err, "device plugin not registered; retrying", "resource", p.Resource)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(kubeletWatchInterval):
			}
			continue
		}
		p.Log.Info("device plugin registered", "resource", p.Resource, "count", p.Count)
		for alive := true; alive; {
			select {
			case <-ctx.Done():
				srv.Stop()
				os.Remove(p.socket)
				return nil
			case <-time.After(kubeletWatchInterval):
				if _, err := os.Stat(p.socket); err != nil {
					p.Log.Info("device plugin socket gone (kubelet restarted); registering again", "resource", p.Resource)
					alive = false
				}
			}
		}
		srv.Stop()
	}
}

func (p *DevicePlugin) serve() (*grpc.Server, error) {
	os.Remove(p.socket)
	l, err := net.Listen("unix", p.socket)
	if err != nil {
		return nil, fmt.Errorf("device plugin socket: %w", err)
	}
	p.stop = make(chan struct{})
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	// Serve ends when Stop closes the listener; nothing to report then.
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

func (p *DevicePlugin) register(ctx context.Context, endpoint string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.Dir, filepath.Base(pluginapi.KubeletSocket)),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("kubelet registration socket: %w", err)
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: p.Resource,
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet: %w", p.Resource, err)
	}
	return nil
}

func (p *DevicePlugin) devices() []*pluginapi.Device {
	health := pluginapi.Healthy
	if _, err := os.Stat(p.DevPath); err != nil && !p.Optional {
		health = pluginapi.Unhealthy
	}
	out := make([]*pluginapi.Device, p.Count)
	base := filepath.Base(p.DevPath)
	for i := range out {
		out[i] = &pluginapi.Device{ID: base + strconv.Itoa(i), Health: health}
	}
	return out
}

// GetDevicePluginOptions implements the device-plugin API.
func (p *DevicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list once; it never changes while the
// plugin runs.
func (p *DevicePlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices()}); err != nil {
		return err
	}
	select {
	case <-s.Context().Done():
	case <-p.stop:
	}
	return nil
}

// GetPreferredAllocation implements the device-plugin API (unused).
func (p *DevicePlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// Allocate gives each container the device node (none where an Optional
// one is missing).
func (p *DevicePlugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	devs := []*pluginapi.DeviceSpec{{ContainerPath: p.DevPath, HostPath: p.DevPath, Permissions: "rw"}}
	if _, err := os.Stat(p.DevPath); err != nil {
		if !p.Optional {
			return nil, fmt.Errorf("%s: %w", p.DevPath, err)
		}
		devs = nil
	}
	resp := &pluginapi.AllocateResponse{}
	for range r.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Devices: devs})
	}
	return resp, nil
}

// PreStartContainer implements the device-plugin API (unused).
func (p *DevicePlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

var errNoSocket = errors.New("no launcher socket")
