package multus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
)

// Versions are the CNI versions the meta-plugin speaks (libcni converts
// the delegates' results).
var Versions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0")

// Plugin runs one CNI command.
type Plugin struct {
	Conf *NetConf
	// Kube is nil when the caller has no cluster to read (tests of the
	// pod network alone); NewPlugin sets it from Conf.Kubeconfig.
	Kube Kube
	CNI  libcni.CNI
}

// NewPlugin reads the configuration from a CNI call's stdin.
func NewPlugin(args *skel.CmdArgs) (*Plugin, error) {
	c, err := ParseConf(args.StdinData)
	if err != nil {
		return nil, err
	}
	p := &Plugin{Conf: c, CNI: libcni.NewCNIConfigWithCacheDir([]string{c.BinDir}, c.CNIDir, nil)}
	if c.Kubeconfig != "" {
		if p.Kube, err = NewKube(c.Kubeconfig); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// podArgs are the K8S_POD_* CNI_ARGS the runtime passes (and the
// delegates get too).
type podArgs struct {
	all                       [][2]string
	namespace, name, uid, sID string
}

func parseArgs(s string) (podArgs, error) {
	var a podArgs
	if s == "" {
		return a, nil
	}
	for _, kv := range strings.Split(s, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return a, fmt.Errorf("CNI_ARGS: %q is not KEY=VALUE", kv)
		}
		a.all = append(a.all, [2]string{k, v})
		switch k {
		case "K8S_POD_NAMESPACE":
			a.namespace = v
		case "K8S_POD_NAME":
			a.name = v
		case "K8S_POD_UID":
			a.uid = v
		case "K8S_POD_INFRA_CONTAINER_ID":
			a.sID = v
		}
	}
	return a, nil
}

// delegate is one network to attach: the pod network or a secondary one.
type delegate struct {
	list   *libcni.NetworkConfigList
	rt     *libcni.RuntimeConf
	status string // its name in network-status
	sel    *nadv1.NetworkSelectionElement
}

func (p *Plugin) runtimeConf(args *skel.CmdArgs, pa podArgs, ifName string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: args.ContainerID, NetNS: args.Netns, IfName: ifName,
		Args: pa.all, CacheDir: p.Conf.CNIDir}
}

// clusterNetwork loads the pod network's configuration.
func (p *Plugin) clusterNetwork() (*libcni.NetworkConfigList, error) {
	cn := p.Conf.ClusterNetwork
	var l *libcni.NetworkConfigList
	var err error
	if filepath.IsAbs(cn) {
		var b []byte
		if b, err = os.ReadFile(cn); err == nil {
			l, err = confList(b, "")
		}
	} else {
		l, err = libcni.LoadNetworkConf(p.Conf.ConfDir, cn)
	}
	if err != nil {
		return nil, fmt.Errorf("the cluster network %q: %w", cn, err)
	}
	return l, nil
}

// Add attaches the pod network and the pod's secondary networks, writes
// the pod's network-status and returns the pod network's result. A
// failure detaches whatever it had attached.
func (p *Plugin) Add(ctx context.Context, args *skel.CmdArgs) (types.Result, error) {
	pa, err := parseArgs(args.Args)
	if err != nil {
		return nil, err
	}
	cluster, err := p.clusterNetwork()
	if err != nil {
		return nil, err
	}
	dels := []delegate{{list: cluster, rt: p.runtimeConf(args, pa, args.IfName), status: cluster.Name}}
	podFound := false
	if p.Kube != nil && pa.name != "" {
		sec, found, err := p.secondaries(ctx, args, pa)
		if err != nil {
			return nil, err
		}
		dels, podFound = append(dels, sec...), found
	}
	var done []delegate
	status := make([]nadv1.NetworkStatus, 0, len(dels))
	var clusterResult types.Result
	fail := func(err error) (types.Result, error) {
		// Detach in reverse; the ADD's error is what the runtime reports.
		for _, d := range slices.Backward(done) {
			_ = p.CNI.DelNetworkList(ctx, d.list, d.rt)
		}
		return nil, err
	}
	for i, d := range dels {
		r, err := p.CNI.AddNetworkList(ctx, d.list, d.rt)
		if err != nil {
			if d.sel == nil {
				return fail(fmt.Errorf("the cluster network %q: %w", d.list.Name, err))
			}
			return fail(fmt.Errorf("network %s (interface %s): %w", d.status, d.rt.IfName, err))
		}
		done = append(done, d)
		if i == 0 {
			clusterResult = r
		}
		s, err := networkStatus(r, d)
		if err != nil {
			return fail(fmt.Errorf("network %s: %w", d.status, err))
		}
		status = append(status, s)
	}
	if err := p.defaultRoute(args.Netns, dels); err != nil {
		return fail(err)
	}
	if podFound {
		if err := p.Kube.SetNetworkStatus(ctx, pa.namespace, pa.name, status); err != nil {
			return fail(fmt.Errorf("writing pod %s/%s's %s: %w", pa.namespace, pa.name, nadv1.NetworkStatusAnnotation, err))
		}
	}
	return clusterResult.GetAsVersion(p.Conf.CNIVersion)
}

// secondaries reads the pod's networks annotation and resolves each
// network before anything is attached: a missing NetworkAttachmentDefinition
// fails the ADD (the kubelet's event names it) with nothing to undo.
func (p *Plugin) secondaries(ctx context.Context, args *skel.CmdArgs, pa podArgs) (dels []delegate, podFound bool, err error) {
	pod, err := p.Kube.GetPod(ctx, pa.namespace, pa.name)
	if apierrors.IsNotFound(err) {
		// A static pod before its mirror exists (or a pod already
		// deleted): nothing can have asked for more than the pod network.
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading pod %s/%s: %w", pa.namespace, pa.name, err)
	}
	// A mirror pod's UID is not its static pod's.
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; !mirror && pa.uid != "" && string(pod.UID) != pa.uid {
		return nil, false, fmt.Errorf("pod %s/%s is UID %s, not the sandbox's %s (deleted and created again)", pa.namespace, pa.name, pod.UID, pa.uid)
	}
	sels, err := nadv1.ParseNetworks(pod.Annotations[nadv1.NetworksAnnotation], pa.namespace)
	if err != nil {
		return nil, false, fmt.Errorf("pod %s/%s: %w", pa.namespace, pa.name, err)
	}
	out := make([]delegate, 0, len(sels))
	for i := range sels {
		sel := &sels[i]
		id := sel.Namespace + "/" + sel.Name
		if sel.InterfaceRequest == args.IfName {
			return nil, false, fmt.Errorf("network %s: interface %s is the pod network's", id, sel.InterfaceRequest)
		}
		list, err := p.nadConfig(ctx, sel)
		if err != nil {
			return nil, false, fmt.Errorf("network %s (interface %s): %w", id, sel.InterfaceRequest, err)
		}
		rt := p.runtimeConf(args, pa, sel.InterfaceRequest)
		rt.CapabilityArgs = map[string]any{}
		if sel.MacRequest != "" {
			rt.CapabilityArgs["mac"] = sel.MacRequest
		}
		if len(sel.IPRequest) > 0 {
			rt.CapabilityArgs["ips"] = sel.IPRequest
		}
		out = append(out, delegate{list: list, rt: rt, status: id, sel: sel})
	}
	return out, true, nil
}

// nadConfig is the delegate configuration a NetworkAttachmentDefinition
// names: its spec.config (a conf or a conflist; its network name
// defaults to the object's), else the network of that name in ConfDir.
func (p *Plugin) nadConfig(ctx context.Context, sel *nadv1.NetworkSelectionElement) (*libcni.NetworkConfigList, error) {
	nad, err := p.Kube.GetNAD(ctx, sel.Namespace, sel.Name)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s/%s not found", sel.Namespace, sel.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading NetworkAttachmentDefinition %s/%s: %w", sel.Namespace, sel.Name, err)
	}
	var list *libcni.NetworkConfigList
	if strings.TrimSpace(nad.Spec.Config) == "" {
		// The name was checked to be an object name: no path.
		list, err = libcni.LoadNetworkConf(p.Conf.ConfDir, sel.Name)
	} else {
		list, err = confList([]byte(nad.Spec.Config), sel.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("NetworkAttachmentDefinition %s/%s: %w", sel.Namespace, sel.Name, err)
	}
	for _, pl := range list.Plugins {
		if pl.Network.Type == PluginType {
			return nil, fmt.Errorf("NetworkAttachmentDefinition %s/%s: plugin type %q would run the meta-plugin itself", sel.Namespace, sel.Name, PluginType)
		}
	}
	return list, nil
}

// confList parses a conf or a conflist, naming it name when it has none
// (a single plugin's conf becomes the conflist of that plugin).
func confList(b []byte, name string) (*libcni.NetworkConfigList, error) {
	raw := map[string]any{}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("config is not a JSON object: %w", err)
	}
	if raw == nil { // "null" decodes into a nil map (FuzzNADConfig)
		return nil, fmt.Errorf("config is not a JSON object: null")
	}
	if _, ok := raw["name"]; !ok && name != "" {
		raw["name"] = name
	}
	if _, ok := raw["plugins"]; !ok {
		list := map[string]any{"name": raw["name"], "plugins": []any{raw}}
		if v, ok := raw["cniVersion"]; ok {
			list["cniVersion"] = v
		}
		raw = list
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	return libcni.NetworkConfFromBytes(b)
}

// networkStatus is a delegate's entry in network-status: its interface in
// the pod's netns, that interface's addresses, the DNS it returned.
func networkStatus(r types.Result, d delegate) (nadv1.NetworkStatus, error) {
	s := nadv1.NetworkStatus{Name: d.status, Interface: d.rt.IfName, Default: d.sel == nil}
	res, err := types100.NewResultFromResult(r)
	if err != nil {
		return s, fmt.Errorf("converting the plugin's result: %w", err)
	}
	idx := -1
	for i, iface := range res.Interfaces {
		if iface.Sandbox != "" && iface.Name == d.rt.IfName {
			idx, s.Mac = i, iface.Mac
			break
		}
	}
	for _, ip := range res.IPs {
		if ip.Interface == nil || *ip.Interface == idx {
			s.IPs = append(s.IPs, ip.Address.IP.String())
		}
	}
	s.DNS = nadv1.DNS{Nameservers: res.DNS.Nameservers, Domain: res.DNS.Domain, Search: res.DNS.Search, Options: res.DNS.Options}
	if d.sel != nil {
		s.Gateway = d.sel.GatewayRequest
	}
	return s, nil
}

// Del detaches what ADD attached, from libcni's cache of it: the
// secondary networks, the pod network last. Nothing is read from the
// cluster, so a deleted pod or NetworkAttachmentDefinition cannot stop
// it. The pod network is detached even without a cache entry (its IPAM
// lease must not leak); plugins take DEL of what is gone as success.
func (p *Plugin) Del(ctx context.Context, args *skel.CmdArgs) error {
	pa, err := parseArgs(args.Args)
	if err != nil {
		return err
	}
	atts, err := p.CNI.GetCachedAttachments(args.ContainerID)
	if err != nil {
		return fmt.Errorf("reading the cache in %s: %w", p.Conf.CNIDir, err)
	}
	var errs []error
	clusterDone := false
	// Secondaries in reverse of the order ADD attached them (their
	// interface names, net1 before net2, are all the cache keeps of it).
	slices.SortStableFunc(atts, func(a, b *libcni.NetworkAttachment) int { return strings.Compare(b.IfName, a.IfName) })
	for _, a := range atts {
		if a.IfName == args.IfName {
			continue
		}
		errs = append(errs, p.delCached(ctx, args, a))
	}
	for _, a := range atts {
		if a.IfName == args.IfName {
			clusterDone = true
			errs = append(errs, p.delCached(ctx, args, a))
		}
	}
	if !clusterDone {
		cluster, err := p.clusterNetwork()
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := p.CNI.DelNetworkList(ctx, cluster, p.runtimeConf(args, pa, args.IfName)); err != nil {
			errs = append(errs, fmt.Errorf("the cluster network %q: %w", cluster.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (p *Plugin) delCached(ctx context.Context, args *skel.CmdArgs, a *libcni.NetworkAttachment) error {
	list, rt, err := cachedDelegate(args, a, p.Conf.CNIDir)
	if err != nil {
		return err
	}
	if err := p.CNI.DelNetworkList(ctx, list, rt); err != nil {
		return fmt.Errorf("network %q (interface %s): %w", a.Network, a.IfName, err)
	}
	return nil
}

func cachedDelegate(args *skel.CmdArgs, a *libcni.NetworkAttachment, cacheDir string) (*libcni.NetworkConfigList, *libcni.RuntimeConf, error) {
	list, err := libcni.NetworkConfFromBytes(a.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("cached config of network %q (interface %s): %w", a.Network, a.IfName, err)
	}
	// The runtime's netns, empty when it is gone (plugins then only free
	// what they hold on the host), never the cached path.
	return list, &libcni.RuntimeConf{ContainerID: a.ContainerID, NetNS: args.Netns, IfName: a.IfName,
		Args: a.CniArgs, CapabilityArgs: a.CapabilityArgs, CacheDir: cacheDir}, nil
}

// Check asks each attached network's plugins whether the attachment is
// as ADD left it (networks whose version predates CHECK are skipped).
func (p *Plugin) Check(ctx context.Context, args *skel.CmdArgs) error {
	atts, err := p.CNI.GetCachedAttachments(args.ContainerID)
	if err != nil {
		return fmt.Errorf("reading the cache in %s: %w", p.Conf.CNIDir, err)
	}
	if !slices.ContainsFunc(atts, func(a *libcni.NetworkAttachment) bool { return a.IfName == args.IfName }) {
		return fmt.Errorf("no attachment of the cluster network to %s is cached for container %s", args.IfName, args.ContainerID)
	}
	for _, a := range atts {
		list, rt, err := cachedDelegate(args, a, p.Conf.CNIDir)
		if err != nil {
			return err
		}
		if ok, err := version.GreaterThanOrEqualTo(list.CNIVersion, "0.4.0"); err != nil || !ok {
			continue
		}
		if err := p.CNI.CheckNetworkList(ctx, list, rt); err != nil {
			return fmt.Errorf("network %q (interface %s): %w", a.Network, a.IfName, err)
		}
	}
	return nil
}

// parseIPs is for default-route: the gateways, as addresses.
func parseIPs(s []string) []net.IP {
	out := make([]net.IP, 0, len(s))
	for _, v := range s {
		out = append(out, net.ParseIP(v))
	}
	return out
}
