package main

// virtctl addvolume VMI --volume-name=NAME [--persist] [--bus=scsi] [--dry-run]
// virtctl removevolume VMI --volume-name=NAME [--persist] [--dry-run]
//
// As upstream's: the volume is a DataVolume when one of that name exists,
// else a PersistentVolumeClaim. --persist goes through the VM (its spec
// keeps the volume), without it through the VMI (upstream v1.9 always
// tries the VM first and keeps --persist as a flag without effect).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

type volumeCmd struct {
	op, vmi, volume string
	persist, dryRun bool
}

func (c *cli) addVolumeCommand() *cobra.Command {
	v := &volumeCmd{op: "addvolume"}
	var bus, diskType string
	cmd := &cobra.Command{
		Use:   "addvolume VMI",
		Short: "Hot-plug a DataVolume or PVC into a running virtual machine instance.",
		Example: `  # Hot-plug the DataVolume (or PVC) 'example-dv' into the running VMI 'fedora-dv':
  virtctl addvolume fedora-dv --volume-name=example-dv

  # The same, kept in its VM's spec for the next start:
  virtctl addvolume fedora-dv --volume-name=example-dv --persist`,
		Args: exactArgs(1, "VMI --volume-name=NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) (int, error) {
			// The guest knows a hot-plugged disk by the volume's name (its
			// serial); kubevmm's hot-plugged volumes are SCSI disks.
			if bus != string(v1.DiskBusSCSI) {
				return 2, fmt.Errorf("addvolume: --bus=%s is not supported by kubevmm's virtctl: hot-plugged disks are on the scsi bus", bus)
			}
			if diskType != "disk" {
				return 2, fmt.Errorf("addvolume: --disk-type=%s is not supported by kubevmm's virtctl: hot-plugged volumes are disks", diskType)
			}
			return c.volume(v, args[0], cmd.OutOrStdout())
		}),
	}
	v.flags(cmd.Flags())
	fs := cmd.Flags()
	fs.StringVar(&bus, "bus", string(v1.DiskBusSCSI), "The disk's bus: scsi.")
	fs.StringVar(&diskType, "disk-type", "disk", "The kind of device: disk.")
	fs.String("serial", "", "The disk's serial number (kubevmm's is the volume's name)")
	fs.String("cache", "", "The disk's cache mode")
	markUnsupported(fs, "serial", "cache")
	return cmd
}

func (c *cli) removeVolumeCommand() *cobra.Command {
	v := &volumeCmd{op: "removevolume"}
	cmd := &cobra.Command{
		Use:   "removevolume VMI",
		Short: "Unplug a hot-plugged volume from a running virtual machine instance.",
		Example: `  # Unplug the volume 'example-dv' from the VMI 'fedora-dv', and from its VM's spec:
  virtctl removevolume fedora-dv --volume-name=example-dv --persist`,
		Args: exactArgs(1, "VMI --volume-name=NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) (int, error) {
			return c.volume(v, args[0], cmd.OutOrStdout())
		}),
	}
	v.flags(cmd.Flags())
	return cmd
}

// flags are the ones addvolume and removevolume share.
func (v *volumeCmd) flags(fs *pflag.FlagSet) {
	fs.StringVar(&v.volume, "volume-name", "", "The volume: the DataVolume's or PVC's name, and the volume's in the spec.")
	fs.BoolVar(&v.persist, "persist", false, "Change the VM's spec too (without it, the VMI only).")
	fs.BoolVar(&v.dryRun, "dry-run", false, dryRunUsage)
}

// body is the subresource's request: remove names the volume; add says
// whether it is a DataVolume (isDV) or a claim.
func (v *volumeCmd) body(isDV bool) any {
	var dry []string
	if v.dryRun {
		dry = []string{metav1.DryRunAll}
	}
	if v.op == "removevolume" {
		return &v1.RemoveVolumeOptions{Name: v.volume, DryRun: dry}
	}
	src := &v1.HotplugVolumeSource{}
	if isDV {
		src.DataVolume = &v1.DataVolumeSource{Name: v.volume, Hotpluggable: true}
	} else {
		src.PersistentVolumeClaim = &v1.PersistentVolumeClaimVolumeSource{ClaimName: v.volume, Hotpluggable: true}
	}
	return &v1.AddVolumeOptions{
		Name:         v.volume,
		Disk:         &v1.Disk{Name: v.volume, DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}},
		VolumeSource: src,
		DryRun:       dry,
	}
}

func (c *cli) volume(v *volumeCmd, vmi string, stdout io.Writer) (int, error) {
	op := v.op
	if v.volume == "" {
		return 2, fmt.Errorf("%s: --volume-name is required", op)
	}
	v.vmi = vmi
	ac, err := c.apiClient()
	if err != nil {
		return 1, err
	}
	return ac.volume(v, stdout)
}

func (c *apiClient) volume(v *volumeCmd, stdout io.Writer) (int, error) {
	op := v.op
	ctx := context.Background()
	isDV := false
	if op == "addvolume" {
		var err error
		if isDV, err = c.isDataVolume(ctx, v.volume); err != nil {
			return 1, fmt.Errorf("%s: %w", op, err)
		}
	}
	b, err := json.Marshal(v.body(isDV))
	if err != nil {
		return 1, err
	}
	kind, what := "virtualmachineinstances", "VMI"
	if v.persist {
		kind, what = "virtualmachines", "VM"
	}
	if _, err := c.do(ctx, http.MethodPut, c.url(kind, v.vmi, op), bytes.NewReader(b)); err != nil {
		return 1, fmt.Errorf("%s %s: %w", op, v.vmi, err)
	}
	verb := map[string]string{"addvolume": "add", "removevolume": "remove"}[op]
	fmt.Fprintf(stdout, "Successfully submitted %s volume request to %s %s for volume %s\n", verb, what, v.vmi, v.volume)
	return 0, nil
}

// isDataVolume says whether a DataVolume of that name exists; a cluster
// without CDI has none.
func (c *apiClient) isDataVolume(ctx context.Context, name string) (bool, error) {
	scheme := runtime.NewScheme()
	if err := cdiv1.AddToScheme(scheme); err != nil {
		return false, err
	}
	k, err := client.New(c.cfg, client.Options{Scheme: scheme})
	if err != nil {
		return false, err
	}
	err = k.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: name}, &cdiv1.DataVolume{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err): // no such DataVolume, or no CDI
		return false, nil
	default:
		return false, fmt.Errorf("looking up DataVolume %s/%s: %w", c.ns, name, err)
	}
}
