package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// create prints a manifest, as KubeVirt's `virtctl create` does, for
// `kubectl apply -f -`; it needs no cluster. ns, when given, is the
// manifest's namespace.
//
//	virtctl create vm [--name N] [--run-strategy S] [--termination-grace-period SEC]
//	        [--memory Q | --instancetype [KIND/]NAME] [--preference [KIND/]NAME]
//	        [--volume-containerdisk src:IMAGE[,name:N][,bootorder:N]]... [--cloud-init-user-data BASE64]
//	virtctl create instancetype --cpu N --memory Q [--name N] [--namespaced]
//	virtctl create preference [--cpu-topology T] [--name N] [--namespaced]
func create(args []string, ns string, stdout io.Writer) (int, error) {
	if len(args) == 0 {
		return 2, errors.New("create: want vm, instancetype or preference")
	}
	var obj any
	var err error
	switch args[0] {
	case "vm":
		obj, err = createVM(args[1:])
	case "instancetype":
		obj, err = createInstancetype(args[1:])
	case "preference":
		obj, err = createPreference(args[1:])
	default:
		return 2, fmt.Errorf("create: %q: want vm, instancetype or preference", args[0])
	}
	if err != nil {
		return 2, fmt.Errorf("create %s: %w", args[0], err)
	}
	if m, ok := obj.(metav1.Object); ok && ns != "" && m.GetNamespace() == "" && !isClusterScoped(obj) {
		m.SetNamespace(ns)
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		return 1, fmt.Errorf("create %s: %w", args[0], err)
	}
	_, err = stdout.Write(b)
	return 0, err
}

func isClusterScoped(obj any) bool {
	switch obj.(type) {
	case *v1beta1.VirtualMachineClusterInstancetype, *v1beta1.VirtualMachineClusterPreference:
		return true
	}
	return false
}

// multiFlag is a flag that may be given more than once.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// params parses KubeVirt's "key:value,key:value" flag values; a value may
// itself hold colons (an image's registry port and tag).
func params(flagName, s string, keys ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if !ok || !contains(keys, k) {
			return nil, fmt.Errorf("--%s: %q is not one of %s followed by :value", flagName, kv, strings.Join(keys, ", "))
		}
		out[k] = v
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// splitKind splits "[kind/]name" as KubeVirt's --instancetype and
// --preference take it; kind is one of the lower-case singular resource
// names.
func splitKind(flagName, s string, kinds ...string) (kind, name string, err error) {
	name = s
	if k, n, ok := strings.Cut(s, "/"); ok {
		kind, name = strings.ToLower(k), n
		if !contains(kinds, kind) {
			return "", "", fmt.Errorf("--%s: invalid kind %q, supported values are: %s", flagName, k, strings.Join(kinds, ", "))
		}
	}
	if name == "" {
		return "", "", fmt.Errorf("--%s: a name is required", flagName)
	}
	return kind, name, nil
}

func createVM(args []string) (*v1.VirtualMachine, error) {
	fs := flag.NewFlagSet("create vm", flag.ContinueOnError)
	name := fs.String("name", "", "the VM's name (default vm-RANDOM)")
	runStrategy := fs.String("run-strategy", string(v1.RunStrategyAlways), "the run strategy")
	grace := fs.Int64("termination-grace-period", 180, "seconds")
	memory := fs.String("memory", "", "guest memory without an instance type (default 512Mi)")
	itFlag := fs.String("instancetype", "", "[kind/]name of the instance type")
	prefFlag := fs.String("preference", "", "[kind/]name of the preference")
	userData := fs.String("cloud-init-user-data", "", "base64 cloud-init user data")
	var disks multiFlag
	fs.Var(&disks, "volume-containerdisk", "src:IMAGE[,name:NAME][,bootorder:N]")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *memory != "" && *itFlag != "" {
		return nil, errors.New("--memory and --instancetype are mutually exclusive: the instance type sets the memory")
	}
	if *name == "" {
		*name = "vm-" + rand.String(5)
	}
	vm := &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: *name},
		Spec: v1.VirtualMachineSpec{
			RunStrategy: ptr.To(v1.VirtualMachineRunStrategy(*runStrategy)),
			Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
				TerminationGracePeriodSeconds: grace,
			}},
		},
	}
	s := &vm.Spec.Template.Spec
	if *itFlag != "" {
		kind, n, err := splitKind("instancetype", *itFlag, "virtualmachineinstancetype", "virtualmachineclusterinstancetype")
		if err != nil {
			return nil, err
		}
		vm.Spec.Instancetype = &v1.InstancetypeMatcher{Kind: kind, Name: n}
	} else {
		m := "512Mi"
		if *memory != "" {
			m = *memory
		}
		q, err := resource.ParseQuantity(m)
		if err != nil {
			return nil, fmt.Errorf("--memory: %w", err)
		}
		s.Domain.Memory = &v1.Memory{Guest: &q}
	}
	if *prefFlag != "" {
		kind, n, err := splitKind("preference", *prefFlag, "virtualmachinepreference", "virtualmachineclusterpreference")
		if err != nil {
			return nil, err
		}
		vm.Spec.Preference = &v1.PreferenceMatcher{Kind: kind, Name: n}
	}
	for i, d := range disks {
		p, err := params("volume-containerdisk", d, "src", "name", "bootorder")
		if err != nil {
			return nil, err
		}
		if p["src"] == "" {
			return nil, errors.New("--volume-containerdisk: src must be specified")
		}
		vol := p["name"]
		if vol == "" {
			vol = fmt.Sprintf("%s-containerdisk-%d", *name, i)
		}
		if errs := validation.IsDNS1123Label(vol); len(errs) > 0 {
			return nil, fmt.Errorf("--volume-containerdisk: invalid name %q: %s", vol, strings.Join(errs, ","))
		}
		// Every volume gets its disk here (KubeVirt adds one at admission
		// for a volume that has none; kubevmm's webhook does not).
		disk := v1.Disk{Name: vol}
		if b := p["bootorder"]; b != "" {
			n, err := strconv.ParseUint(b, 10, 32)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("--volume-containerdisk: bootorder %q must be a number greater than 0", b)
			}
			disk.BootOrder = ptr.To(uint(n))
		}
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, disk)
		s.Volumes = append(s.Volumes, v1.Volume{Name: vol, VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: p["src"]}}})
	}
	if *userData != "" {
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: "cloudinitdisk"})
		s.Volumes = append(s.Volumes, v1.Volume{Name: "cloudinitdisk", VolumeSource: v1.VolumeSource{
			CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataBase64: *userData}}})
	}
	return vm, nil
}

func createInstancetype(args []string) (any, error) {
	fs := flag.NewFlagSet("create instancetype", flag.ContinueOnError)
	name := fs.String("name", "", "its name (default [cluster]instancetype-RANDOM)")
	cpu := fs.Uint("cpu", 0, "vCPUs (required)")
	memory := fs.String("memory", "", "guest memory (required)")
	namespaced := fs.Bool("namespaced", false, "a namespaced VirtualMachineInstancetype instead of a VirtualMachineClusterInstancetype")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	if *cpu == 0 || *memory == "" {
		return nil, errors.New("--cpu and --memory are required")
	}
	q, err := resource.ParseQuantity(*memory)
	if err != nil {
		return nil, fmt.Errorf("--memory: %w", err)
	}
	spec := v1beta1.VirtualMachineInstancetypeSpec{
		CPU:    v1beta1.CPUInstancetype{Guest: uint32(*cpu)},
		Memory: v1beta1.MemoryInstancetype{Guest: q},
	}
	if *namespaced {
		return &v1beta1.VirtualMachineInstancetype{TypeMeta: typeMeta(v1beta1.KindInstancetype), ObjectMeta: objName(*name, "instancetype-"), Spec: spec}, nil
	}
	return &v1beta1.VirtualMachineClusterInstancetype{TypeMeta: typeMeta(v1beta1.KindClusterInstancetype), ObjectMeta: objName(*name, "clusterinstancetype-"), Spec: spec}, nil
}

func createPreference(args []string) (any, error) {
	fs := flag.NewFlagSet("create preference", flag.ContinueOnError)
	name := fs.String("name", "", "its name (default [cluster]preference-RANDOM)")
	topology := fs.String("cpu-topology", "", "preferredCPUTopology: sockets, cores, threads, spread or any")
	namespaced := fs.Bool("namespaced", false, "a namespaced VirtualMachinePreference instead of a VirtualMachineClusterPreference")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	spec := v1beta1.VirtualMachinePreferenceSpec{}
	if *topology != "" {
		t := v1beta1.PreferredCPUTopology(*topology)
		switch t {
		case v1beta1.Sockets, v1beta1.Cores, v1beta1.Threads, v1beta1.Spread, v1beta1.Any:
		default:
			return nil, fmt.Errorf("--cpu-topology: %q is not one of sockets, cores, threads, spread, any", *topology)
		}
		spec.CPU = &v1beta1.CPUPreferences{PreferredCPUTopology: &t}
	}
	if *namespaced {
		return &v1beta1.VirtualMachinePreference{TypeMeta: typeMeta(v1beta1.KindPreference), ObjectMeta: objName(*name, "preference-"), Spec: spec}, nil
	}
	return &v1beta1.VirtualMachineClusterPreference{TypeMeta: typeMeta(v1beta1.KindClusterPreference), ObjectMeta: objName(*name, "clusterpreference-"), Spec: spec}, nil
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: v1beta1.GroupVersion.String(), Kind: kind}
}

func objName(name, prefix string) metav1.ObjectMeta {
	if name == "" {
		name = prefix + rand.String(5)
	}
	return metav1.ObjectMeta{Name: name}
}
