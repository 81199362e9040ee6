package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	"github.com/kubevmm/kubevmm/api/instancetype/v1beta1"
)

// createCommand is `virtctl create`: it prints a manifest, as KubeVirt's
// does, for `kubectl apply -f -`; it needs no cluster. The namespace -n
// names, when given, is the manifest's.
//
//	virtctl create vm [--name N] [--run-strategy S] [--termination-grace-period SEC]
//	        [--memory Q | --instancetype [KIND/]NAME] [--preference [KIND/]NAME]
//	        [--volume-containerdisk src:IMAGE[,name:N][,bootorder:N]]... [--cloud-init-user-data BASE64]
//	virtctl create instancetype --cpu N --memory Q [--name N] [--namespaced]
//	virtctl create preference [--cpu-topology T] [--machine-type M] [--volume-storage-class SC] [--name N] [--namespaced]
func (c *cli) createCommand() *cobra.Command {
	return groupCommand("create", "Print a manifest of the given kind.",
		c.createVMCommand(),
		c.createInstancetypeCommand(),
		c.createPreferenceCommand(),
		unsupported("clone", "Print a VirtualMachineClone manifest."))
}

// printManifest prints the object build makes, in the namespace -n
// names unless it is cluster-scoped.
func (c *cli) printManifest(cmd *cobra.Command, build func() (any, error)) (int, error) {
	what := commandName(cmd)
	obj, err := build()
	if err != nil {
		return 2, fmt.Errorf("%s: %w", what, err)
	}
	if m, ok := obj.(metav1.Object); ok && m.GetNamespace() == "" && !isClusterScoped(obj) {
		if ns, explicit := c.namespace(); explicit {
			m.SetNamespace(ns)
		}
	}
	b, err := yaml.Marshal(obj)
	if err != nil {
		return 1, fmt.Errorf("%s: %w", what, err)
	}
	_, err = cmd.OutOrStdout().Write(b)
	return 0, err
}

func isClusterScoped(obj any) bool {
	switch obj.(type) {
	case *v1beta1.VirtualMachineClusterInstancetype, *v1beta1.VirtualMachineClusterPreference:
		return true
	}
	return false
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

// vmOptions are create vm's flags.
type vmOptions struct {
	name, runStrategy, memory, instancetype, preference, userData string
	grace                                                         int64
	containerDisks                                                []string
	memorySet                                                     bool // --memory given
}

func (c *cli) createVMCommand() *cobra.Command {
	o := &vmOptions{}
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "Print a VirtualMachine manifest.",
		Example: `  # A VirtualMachine of a random name, 512Mi of memory, no disk:
  virtctl create vm

  # An instance type, a preference and a container disk:
  virtctl create vm --name=my-vm --instancetype=u1.small --preference=fedora --volume-containerdisk=src:my.registry/my-image:my-tag

  # Namespaced instance type and preference:
  virtctl create vm --instancetype=virtualmachineinstancetype/my-it --preference=virtualmachinepreference/my-pref`,
		Args: exactArgs(0, "no argument, flags only"),
		RunE: runE(func(cmd *cobra.Command, _ []string) (int, error) {
			o.memorySet = cmd.Flags().Changed("memory")
			return c.printManifest(cmd, func() (any, error) { return o.vm() })
		}),
	}
	o.flags(cmd.Flags())
	return cmd
}

// flags are upstream's, in its order: those kubevmm's create vm does not
// fill in are refused by name.
func (o *vmOptions) flags(fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&o.name, "name", "", "The VM's name (default vm-RANDOM).")
	fs.StringVar(&o.runStrategy, "run-strategy", string(v1.RunStrategyAlways), "The VM's run strategy.")
	fs.Int64Var(&o.grace, "termination-grace-period", 180, "The VM's termination grace period, in seconds.")
	fs.StringVar(&o.memory, "memory", "512Mi", "The guest's memory. Mutually exclusive with --instancetype.")
	fs.StringVar(&o.instancetype, "instancetype", "", "The instance type, [kind/]name (kind virtualmachineclusterinstancetype, the default, or virtualmachineinstancetype).")
	// Inference reads the first boot volume's annotations: a PVC's or a
	// DataSource's, which kubevmm's create vm does not take; with a
	// container disk, upstream infers nothing either.
	fs.Bool("infer-instancetype", true, "Infer the instance type from the first boot volume (none of the volumes create vm takes here has one).")
	fs.String("infer-instancetype-from", "", "The volume to infer the instance type from.")
	fs.StringVar(&o.preference, "preference", "", "The preference, [kind/]name (kind virtualmachineclusterpreference, the default, or virtualmachinepreference).")
	fs.Bool("infer-preference", true, "Infer the preference from the first boot volume (none of the volumes create vm takes here has one).")
	fs.String("infer-preference-from", "", "The volume to infer the preference from.")
	fs.StringArrayVar(&o.containerDisks, "volume-containerdisk", nil, "A container disk, src:IMAGE[,name:NAME][,bootorder:N]; repeatable.")
	fs.StringArray("volume-pvc", nil, "A PVC used as it is; repeatable.")
	fs.StringArray("volume-import", nil, "A DataVolume imported from a source; repeatable.")
	fs.String("volume-sysprep", "", "A ConfigMap or Secret as the sysprep volume.")
	fs.String("user", "", "The user in the generated cloud-init user data.")
	fs.String("password-file", "", "A file holding the password in the generated cloud-init user data.")
	fs.StringSlice("ssh-key", nil, "SSH authorized keys in the generated cloud-init user data.")
	fs.Bool("ga-manage-ssh", false, "Let the guest agent manage SSH keys (generated cloud-init user data).")
	fs.StringArray("access-cred", nil, "An access credential injected into the VM; repeatable.")
	fs.String("cloud-init", "nocloud", "The kind of the cloud-init data source: nocloud.")
	fs.StringVar(&o.userData, "cloud-init-user-data", "", "The cloud-init user data, base64.")
	fs.String("cloud-init-network-data", "", "The cloud-init network data, base64.")
	fs.StringArray("volume-datasource", nil, "A DataSource cloned for the VM; repeatable (deprecated upstream: --volume-import).")
	fs.StringArray("volume-clone-pvc", nil, "A PVC cloned for the VM; repeatable (deprecated upstream: --volume-import).")
	fs.StringArray("volume-blank", nil, "A blank volume; repeatable (deprecated upstream: --volume-import).")
	markUnsupported(fs, "infer-instancetype-from", "infer-preference-from", "volume-pvc", "volume-import", "volume-sysprep",
		"user", "password-file", "ssh-key", "ga-manage-ssh", "access-cred", "cloud-init", "cloud-init-network-data",
		"volume-datasource", "volume-clone-pvc", "volume-blank")
}

func (o *vmOptions) vm() (*v1.VirtualMachine, error) {
	if o.memorySet && o.instancetype != "" {
		return nil, errors.New("--memory and --instancetype are mutually exclusive: the instance type sets the memory")
	}
	name := o.name
	if name == "" {
		name = "vm-" + rand.String(5)
	}
	vm := &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "VirtualMachine"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.VirtualMachineSpec{
			RunStrategy: ptr.To(v1.VirtualMachineRunStrategy(o.runStrategy)),
			Template: &v1.VirtualMachineInstanceTemplateSpec{Spec: v1.VirtualMachineInstanceSpec{
				TerminationGracePeriodSeconds: ptr.To(o.grace),
			}},
		},
	}
	s := &vm.Spec.Template.Spec
	if o.instancetype != "" {
		kind, n, err := splitKind("instancetype", o.instancetype, "virtualmachineinstancetype", "virtualmachineclusterinstancetype")
		if err != nil {
			return nil, err
		}
		vm.Spec.Instancetype = &v1.InstancetypeMatcher{Kind: kind, Name: n}
	} else {
		q, err := resource.ParseQuantity(o.memory)
		if err != nil {
			return nil, fmt.Errorf("--memory: %w", err)
		}
		s.Domain.Memory = &v1.Memory{Guest: &q}
	}
	if o.preference != "" {
		kind, n, err := splitKind("preference", o.preference, "virtualmachinepreference", "virtualmachineclusterpreference")
		if err != nil {
			return nil, err
		}
		vm.Spec.Preference = &v1.PreferenceMatcher{Kind: kind, Name: n}
	}
	for i, d := range o.containerDisks {
		if err := addContainerDisk(s, name, i, d); err != nil {
			return nil, err
		}
	}
	if o.userData != "" {
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, v1.Disk{Name: "cloudinitdisk"})
		s.Volumes = append(s.Volumes, v1.Volume{Name: "cloudinitdisk", VolumeSource: v1.VolumeSource{
			CloudInitNoCloud: &v1.CloudInitNoCloudSource{UserDataBase64: o.userData}}})
	}
	return vm, nil
}

// addContainerDisk adds the i-th --volume-containerdisk, d, of VM vm to s.
func addContainerDisk(s *v1.VirtualMachineInstanceSpec, vm string, i int, d string) error {
	p, err := params("volume-containerdisk", d, "src", "name", "bootorder")
	if err != nil {
		return err
	}
	if p["src"] == "" {
		return errors.New("--volume-containerdisk: src must be specified")
	}
	vol := p["name"]
	if vol == "" {
		vol = fmt.Sprintf("%s-containerdisk-%d", vm, i)
	}
	if errs := validation.IsDNS1123Label(vol); len(errs) > 0 {
		return fmt.Errorf("--volume-containerdisk: invalid name %q: %s", vol, strings.Join(errs, ","))
	}
	// Every volume gets its disk here (KubeVirt adds one at admission
	// for a volume that has none; kubevmm's webhook does not).
	disk := v1.Disk{Name: vol}
	if b := p["bootorder"]; b != "" {
		n, err := strconv.ParseUint(b, 10, 32)
		if err != nil || n == 0 {
			return fmt.Errorf("--volume-containerdisk: bootorder %q must be a number greater than 0", b)
		}
		disk.BootOrder = ptr.To(uint(n))
	}
	s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, disk)
	s.Volumes = append(s.Volumes, v1.Volume{Name: vol, VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: p["src"]}}})
	return nil
}

func (c *cli) createInstancetypeCommand() *cobra.Command {
	var name, memory string
	var cpu uint32
	var namespaced bool
	cmd := &cobra.Command{
		Use:   "instancetype",
		Short: "Print a VirtualMachineInstancetype or VirtualMachineClusterInstancetype manifest.",
		Example: `  # A cluster-wide instance type of 2 vCPUs and 4Gi of memory:
  virtctl create instancetype --cpu=2 --memory=4Gi --name=my-it

  # A namespaced one:
  virtctl create instancetype --namespaced --cpu=2 --memory=4Gi`,
		Args: exactArgs(0, "no argument, flags only"),
		RunE: runE(func(cmd *cobra.Command, _ []string) (int, error) {
			return c.printManifest(cmd, func() (any, error) {
				if cpu == 0 || memory == "" {
					return nil, errors.New("--cpu and --memory are required")
				}
				q, err := resource.ParseQuantity(memory)
				if err != nil {
					return nil, fmt.Errorf("--memory: %w", err)
				}
				spec := v1beta1.VirtualMachineInstancetypeSpec{CPU: v1beta1.CPUInstancetype{Guest: cpu}, Memory: v1beta1.MemoryInstancetype{Guest: q}}
				if namespaced {
					return &v1beta1.VirtualMachineInstancetype{TypeMeta: typeMeta(v1beta1.KindInstancetype), ObjectMeta: objName(name, "instancetype-"), Spec: spec}, nil
				}
				return &v1beta1.VirtualMachineClusterInstancetype{TypeMeta: typeMeta(v1beta1.KindClusterInstancetype), ObjectMeta: objName(name, "clusterinstancetype-"), Spec: spec}, nil
			})
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&name, "name", "", "Its name (default [cluster]instancetype-RANDOM).")
	fs.Uint32Var(&cpu, "cpu", 0, "vCPUs (required).")
	fs.StringVar(&memory, "memory", "", "Guest memory (required).")
	fs.BoolVar(&namespaced, "namespaced", false, "A namespaced VirtualMachineInstancetype instead of a VirtualMachineClusterInstancetype.")
	fs.StringArray("gpu", nil, "A GPU, name:NAME,devicename:DEVICE; repeatable.")
	fs.StringArray("hostdevice", nil, "A host device, name:NAME,devicename:DEVICE; repeatable.")
	fs.String("iothreadspolicy", "", "The IOThreadsPolicy: auto or shared.")
	markUnsupported(fs, "gpu", "hostdevice", "iothreadspolicy")
	return cmd
}

func (c *cli) createPreferenceCommand() *cobra.Command {
	var name, topology, machineType, storageClass string
	var namespaced bool
	cmd := &cobra.Command{
		Use:   "preference",
		Short: "Print a VirtualMachinePreference or VirtualMachineClusterPreference manifest.",
		Example: `  # A cluster-wide preference for one socket of many cores:
  virtctl create preference --cpu-topology=cores --name=my-pref

  # A namespaced one, with a preferred storage class:
  virtctl create preference --namespaced --volume-storage-class=local`,
		Args: exactArgs(0, "no argument, flags only"),
		RunE: runE(func(cmd *cobra.Command, _ []string) (int, error) {
			return c.printManifest(cmd, func() (any, error) {
				spec := v1beta1.VirtualMachinePreferenceSpec{}
				if topology != "" {
					t := v1beta1.PreferredCPUTopology(topology)
					switch t {
					case v1beta1.Sockets, v1beta1.Cores, v1beta1.Threads, v1beta1.Spread, v1beta1.Any:
					default:
						return nil, fmt.Errorf("--cpu-topology: %q is not one of sockets, cores, threads, spread, any", topology)
					}
					spec.CPU = &v1beta1.CPUPreferences{PreferredCPUTopology: &t}
				}
				if machineType != "" {
					spec.Machine = &v1beta1.MachinePreferences{PreferredMachineType: machineType}
				}
				if storageClass != "" {
					spec.Volumes = &v1beta1.VolumePreferences{PreferredStorageClassName: storageClass}
				}
				if namespaced {
					return &v1beta1.VirtualMachinePreference{TypeMeta: typeMeta(v1beta1.KindPreference), ObjectMeta: objName(name, "preference-"), Spec: spec}, nil
				}
				return &v1beta1.VirtualMachineClusterPreference{TypeMeta: typeMeta(v1beta1.KindClusterPreference), ObjectMeta: objName(name, "clusterpreference-"), Spec: spec}, nil
			})
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&name, "name", "", "Its name (default [cluster]preference-RANDOM).")
	fs.StringVar(&topology, "cpu-topology", "", "The preferred CPU topology: sockets, cores, threads, spread or any.")
	fs.StringVar(&machineType, "machine-type", "", "The preferred machine type.")
	fs.StringVar(&storageClass, "volume-storage-class", "", "The preferred storage class of the VM's DataVolumes.")
	fs.BoolVar(&namespaced, "namespaced", false, "A namespaced VirtualMachinePreference instead of a VirtualMachineClusterPreference.")
	return cmd
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
