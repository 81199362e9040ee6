package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
	"github.com/kubevmm/kubevmm/api/vmispec"
)

// Secondary networks: a launcher pod asks Multus for the VMI's multus
// networks through the networks annotation, as KubeVirt's virt-controller
// writes it, and requests the device-plugin resource each network's
// NetworkAttachmentDefinition names (its resourceName annotation),
// so that the scheduler places it on a node that has that network
// (bridge-marker's bridge.network.kubevirt.io/<bridge>). NADs are read
// unstructured and uncached: only VMIs with multus networks need them, and
// a cluster without the NAD CRD then fails those VMIs only.

// +kubebuilder:rbac:groups=k8s.cni.cncf.io,resources=network-attachment-definitions,verbs=get

// networkSelection is one element of the networks annotation: the NAD,
// its namespace always written, the pod interface's name
// (vmispec.MultusInterfaceName), where virt-handler finds the network, and
// the interface's macAddress, which asks the CNI plugin for it, as
// KubeVirt does (the handler gives the pod interface another MAC before
// it bridges the two).
type networkSelection = nadv1.NetworkSelectionElement

// multusNetworks are the VMI's secondary networks in spec order, their
// NAD's namespace defaulted to the VMI's.
func multusNetworks(vmi *v1.VirtualMachineInstance) []networkSelection {
	macs := map[string]string{}
	for _, ifc := range vmi.Spec.Domain.Devices.Interfaces {
		macs[ifc.Name] = ifc.MacAddress
	}
	var out []networkSelection
	for _, n := range vmi.Spec.Networks {
		if n.Multus == nil || n.Multus.Default {
			continue
		}
		ns, name := nadName(vmi.Namespace, n.Multus.NetworkName)
		out = append(out, networkSelection{Name: name, Namespace: ns, InterfaceRequest: vmispec.MultusInterfaceName(n.Name), MacRequest: macs[n.Name]})
	}
	return out
}

// nadName splits a multus networkName, <name> or <namespace>/<name>.
func nadName(namespace, networkName string) (string, string) {
	if ns, name, ok := strings.Cut(networkName, "/"); ok {
		return ns, name
	}
	return namespace, networkName
}

// nadResources reads the NAD of each network and returns the resource
// each names, by pod interface (none: not in the map). A missing NAD is
// an error naming it.
func nadResources(ctx context.Context, c client.Reader, nets []networkSelection) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range nets {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(nadv1.GroupVersion.WithKind("NetworkAttachmentDefinition"))
		err := c.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.Name}, u)
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("network attachment definition %s/%s not found", n.Namespace, n.Name)
		case err != nil:
			return nil, fmt.Errorf("reading network attachment definition %s/%s: %w", n.Namespace, n.Name, err)
		}
		if r := u.GetAnnotations()[nadv1.ResourceNameAnnotation]; r != "" {
			out[n.InterfaceRequest] = r
		}
	}
	return out, nil
}

// withNetworks adds the networks annotation and the networks' resources
// to a rendered launcher pod (none without multus networks): one of a
// resource per network that names it, in requests and limits alike, as
// extended resources must be.
func withNetworks(pod *corev1.Pod, nets []networkSelection, resources map[string]string) error {
	if len(nets) == 0 {
		return nil
	}
	b, err := json.Marshal(nets)
	if err != nil {
		return fmt.Errorf("encoding the networks annotation: %w", err)
	}
	pod.Annotations[nadv1.NetworksAnnotation] = string(b)
	c := &pod.Spec.Containers[0]
	for _, n := range nets {
		name, ok := resources[n.InterfaceRequest]
		if !ok {
			continue
		}
		for _, l := range []*corev1.ResourceList{&c.Resources.Requests, &c.Resources.Limits} {
			if *l == nil {
				*l = corev1.ResourceList{}
			}
			q := (*l)[corev1.ResourceName(name)]
			q.Add(resource.MustParse("1"))
			(*l)[corev1.ResourceName(name)] = q
		}
	}
	return nil
}

// addNetworks reads the VMI's NADs and adds its networks to pod.
func addNetworks(ctx context.Context, c client.Reader, vmi *v1.VirtualMachineInstance, pod *corev1.Pod) error {
	nets := multusNetworks(vmi)
	if len(nets) == 0 {
		return nil
	}
	res, err := nadResources(ctx, c, nets)
	if err != nil {
		return err
	}
	return withNetworks(pod, nets, res)
}
