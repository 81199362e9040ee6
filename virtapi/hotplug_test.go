package virtapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// addOpts is what `virtctl addvolume VMI --volume-name=data` sends.
func addOpts() *v1.AddVolumeOptions {
	return &v1.AddVolumeOptions{
		Name:         "data",
		Disk:         &v1.Disk{Name: "data", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}},
		VolumeSource: &v1.HotplugVolumeSource{DataVolume: &v1.DataVolumeSource{Name: "data", Hotpluggable: true}},
	}
}

func TestValidateAddVolume(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1.AddVolumeOptions)
		field  string // the field the error names; "" for a valid request
	}{
		{"DataVolume", func(*v1.AddVolumeOptions) {}, ""},
		{"claim", func(o *v1.AddVolumeOptions) {
			o.VolumeSource = &v1.HotplugVolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc", Hotpluggable: true}}
		}, ""},
		{"empty bus is scsi", func(o *v1.AddVolumeOptions) { o.Disk.Disk.Bus = "" }, ""},
		{"disk without a name", func(o *v1.AddVolumeOptions) { o.Disk.Name = "" }, ""},
		{"dry run", func(o *v1.AddVolumeOptions) { o.DryRun = []string{"All"} }, ""},
		{"no name", func(o *v1.AddVolumeOptions) { o.Name = "" }, "name"},
		{"no disk", func(o *v1.AddVolumeOptions) { o.Disk = nil }, "disk"},
		{"no source", func(o *v1.AddVolumeOptions) { o.VolumeSource = nil }, "volumeSource"},
		{"empty source", func(o *v1.AddVolumeOptions) { o.VolumeSource = &v1.HotplugVolumeSource{} }, "volumeSource"},
		{"two sources", func(o *v1.AddVolumeOptions) {
			o.VolumeSource.PersistentVolumeClaim = &v1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc", Hotpluggable: true}
		}, "volumeSource"},
		{"DataVolume not hotpluggable", func(o *v1.AddVolumeOptions) { o.VolumeSource.DataVolume.Hotpluggable = false }, "volumeSource.dataVolume.hotpluggable"},
		{"claim not hotpluggable", func(o *v1.AddVolumeOptions) {
			o.VolumeSource = &v1.HotplugVolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc"}}
		}, "volumeSource.persistentVolumeClaim.hotpluggable"},
		{"claim without a name", func(o *v1.AddVolumeOptions) {
			o.VolumeSource = &v1.HotplugVolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{Hotpluggable: true}}
		}, "volumeSource.persistentVolumeClaim.claimName"},
		{"DataVolume badly named", func(o *v1.AddVolumeOptions) { o.VolumeSource.DataVolume.Name = "Data_1" }, "volumeSource.dataVolume.name"},
		{"virtio bus", func(o *v1.AddVolumeOptions) { o.Disk.Disk.Bus = v1.DiskBusVirtio }, "disk.disk.bus"},
		{"sata bus", func(o *v1.AddVolumeOptions) { o.Disk.Disk.Bus = v1.DiskBusSATA }, "disk.disk.bus"},
		{"lun", func(o *v1.AddVolumeOptions) { o.Disk.Disk, o.Disk.LUN = nil, &v1.LunTarget{} }, "disk.lun"},
		{"cdrom", func(o *v1.AddVolumeOptions) { o.Disk.Disk, o.Disk.CDRom = nil, &v1.CDRomTarget{} }, "disk.cdrom"},
		{"disk named otherwise", func(o *v1.AddVolumeOptions) { o.Disk.Name = "other" }, "disk.name"},
		{"serial", func(o *v1.AddVolumeOptions) { o.Disk.Serial = "s1" }, "disk.serial"},
		{"cache", func(o *v1.AddVolumeOptions) { o.Disk.Cache = "none" }, "disk.cache"},
		{"boot order", func(o *v1.AddVolumeOptions) { o.Disk.BootOrder = ptr.To(uint(1)) }, "disk.bootOrder"},
		{"shareable", func(o *v1.AddVolumeOptions) { o.Disk.Shareable = ptr.To(true) }, "disk.shareable"},
		{"dry run other than All", func(o *v1.AddVolumeOptions) { o.DryRun = []string{"Some"} }, "dryRun[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := addOpts()
			tc.mutate(o)
			errs := validateAddVolume(o)
			if tc.field == "" {
				assert.Empty(t, errs)
				return
			}
			require.Len(t, errs, 1, "%v", errs)
			assert.Equal(t, tc.field, errs[0].Field)
		})
	}
}

func TestValidateRemoveVolume(t *testing.T) {
	assert.Empty(t, validateRemoveVolume(&v1.RemoveVolumeOptions{Name: "data", DryRun: []string{"All"}}))
	errs := validateRemoveVolume(&v1.RemoveVolumeOptions{})
	require.Len(t, errs, 1)
	assert.Equal(t, "name", errs[0].Field)
}

// bootSpec is a VMI spec as it was created: a containerDisk root.
func bootSpec() *v1.VirtualMachineInstanceSpec {
	s := &v1.VirtualMachineInstanceSpec{
		Volumes: []v1.Volume{{Name: "root", VolumeSource: v1.VolumeSource{ContainerDisk: &v1.ContainerDiskSource{Image: "img"}}}},
	}
	s.Domain.Devices.Disks = []v1.Disk{{Name: "root", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusVirtio}}}}
	return s
}

func opCode(err error) int {
	var oe *opError
	if errors.As(err, &oe) {
		return oe.code
	}
	return 0
}

func TestAddRemoveHotplugVolume(t *testing.T) {
	s := bootSpec()
	o := addOpts()
	o.Disk.Name, o.Disk.Disk.Bus = "", ""
	require.NoError(t, specErr(s.AddHotplugVolume(o)))
	require.Len(t, s.Volumes, 2)
	assert.Equal(t, v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "data", Hotpluggable: true}}}, s.Volumes[1])
	require.Len(t, s.Domain.Devices.Disks, 2)
	assert.Equal(t, v1.Disk{Name: "data", DiskDevice: v1.DiskDevice{Disk: &v1.DiskTarget{Bus: v1.DiskBusSCSI}}}, s.Domain.Devices.Disks[1])

	// A name in use, by a hot-plugged volume or one the VMI started with.
	assert.Equal(t, http.StatusConflict, opCode(specErr(s.AddHotplugVolume(addOpts()))))
	o = addOpts()
	o.Name, o.Disk.Name = "root", "root"
	assert.Equal(t, http.StatusConflict, opCode(specErr(s.AddHotplugVolume(o))))

	// Only hot-plugged volumes come out, with their disks.
	assert.Equal(t, http.StatusBadRequest, opCode(specErr(s.RemoveHotplugVolume("root"))))
	assert.Equal(t, http.StatusBadRequest, opCode(specErr(s.RemoveHotplugVolume("absent"))))
	require.NoError(t, specErr(s.RemoveHotplugVolume("data")))
	assert.Equal(t, bootSpec(), s)
}

// The VMI webhook lets the spec change only by hot-plugged volumes.
func TestValidateHotplugUpdate(t *testing.T) {
	withData := func() *v1.VirtualMachineInstanceSpec {
		s := bootSpec()
		require.NoError(t, specErr(s.AddHotplugVolume(addOpts())))
		return s
	}
	for _, tc := range []struct {
		name     string
		old, cur func() *v1.VirtualMachineInstanceSpec
		msg      string // in the one error; "" for allowed
	}{
		{"unchanged", bootSpec, bootSpec, ""},
		{"add", bootSpec, withData, ""},
		{"remove", withData, bootSpec, ""},
		{"boot volume changed", bootSpec, func() *v1.VirtualMachineInstanceSpec {
			s := bootSpec()
			s.Volumes[0].ContainerDisk.Image = "other"
			return s
		}, "spec: Forbidden"},
		{"hot volume on the virtio bus", bootSpec, func() *v1.VirtualMachineInstanceSpec {
			s := withData()
			s.Domain.Devices.Disks[1].Disk.Bus = v1.DiskBusVirtio
			return s
		}, "spec.domain.devices.disks[1].disk.bus"},
		{"hot volume without a bus", bootSpec, func() *v1.VirtualMachineInstanceSpec {
			s := withData()
			s.Domain.Devices.Disks[1].Disk.Bus = ""
			return s
		}, "spec.domain.devices.disks[1].disk.bus"},
		{"hot volume without a disk", bootSpec, func() *v1.VirtualMachineInstanceSpec {
			s := withData()
			s.Domain.Devices.Disks = s.Domain.Devices.Disks[:1]
			return s
		}, "spec.domain.devices.disks: Required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := validateHotplugUpdate(tc.old(), tc.cur())
			if tc.msg == "" {
				assert.Empty(t, errs)
				return
			}
			require.Len(t, errs, 1, "%v", errs)
			assert.Contains(t, errs[0].Error(), tc.msg)
		})
	}
}

// A hotpluggable volume may not take a name another volume has: the
// others are checked without it.
func TestHotplugVolumeNameTaken(t *testing.T) {
	s := bootSpec()
	s.Volumes = append(s.Volumes, v1.Volume{Name: "root", VolumeSource: v1.VolumeSource{
		DataVolume: &v1.DataVolumeSource{Name: "data", Hotpluggable: true}}})
	s.Domain.Devices.Disks[0].Disk.Bus = v1.DiskBusSCSI
	var fields []string
	for _, e := range validateHotplugVolumes(field.NewPath("spec"), s) {
		fields = append(fields, e.Field+" "+string(e.Type))
	}
	assert.Equal(t, []string{"spec.volumes[1].name " + string(field.ErrorTypeDuplicate)}, fields)
}

// The webhook: an update adding a hot-plugged
// volume is admitted, one changing a boot volume refused.
func TestValidateVMIUpdateHotplug(t *testing.T) {
	vmi := func(s *v1.VirtualMachineInstanceSpec) []byte {
		b, err := json.Marshal(&v1.VirtualMachineInstance{Spec: *s})
		require.NoError(t, err)
		return b
	}
	old := bootSpec()
	cur := bootSpec()
	require.NoError(t, specErr(cur.AddHotplugVolume(addOpts())))
	update := func(cur *v1.VirtualMachineInstanceSpec) *admissionv1.AdmissionResponse {
		return validateVMI(&admissionv1.AdmissionRequest{Operation: admissionv1.Update,
			Object: runtime.RawExtension{Raw: vmi(cur)}, OldObject: runtime.RawExtension{Raw: vmi(old)}})
	}
	assert.True(t, update(cur).Allowed)
	cur.Volumes[0].ContainerDisk.Image = "other"
	resp := update(cur)
	assert.False(t, resp.Allowed)
	assert.True(t, strings.Contains(resp.Result.Message, "hotpluggable volumes"), resp.Result.Message)
}
