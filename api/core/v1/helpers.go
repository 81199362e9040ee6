package v1

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubevmm/kubevmm/api/conditions"
)

// Labels, annotations and finalizers, spelled as KubeVirt spells them so that
// tooling written against KubeVirt (selectors, dashboards) keeps working.
const (
	// AppLabel marks kubevirt objects; virt-launcher pods carry
	// kubevirt.io=virt-launcher.
	AppLabel = "kubevirt.io"
	// CreatedByLabel on a launcher pod is the UID of its VMI.
	CreatedByLabel = "kubevirt.io/created-by"
	// NodeNameLabel on a VMI is the node it runs on.
	NodeNameLabel = "kubevirt.io/nodeName"
	// VirtualMachineLabel on a VMI created by a VM is the VM's name.
	VirtualMachineLabel = AppLabel + "/vm"
	// VirtualMachineNameLabel on a launcher pod is the VM's name
	// (KubeVirt's vm.kubevirt.io/name).
	VirtualMachineNameLabel = "vm.kubevirt.io/name"
	// DomainAnnotation on a launcher pod is the VMI's name.
	DomainAnnotation = "kubevirt.io/domain"
	// MigrationJobLabel marks a migration target pod with the UID of its
	// VirtualMachineInstanceMigration. virt-controller removes it once the
	// migration succeeded: the pod is then the VMI's launcher pod.
	MigrationJobLabel = "kubevirt.io/migrationJobUID"
	// MigrationJobNameAnnotation on a target pod is its migration's name.
	MigrationJobNameAnnotation = "kubevirt.io/migrationJobName"
	// MigrationTargetNodeNameLabel on a VMI is the node it is migrating to.
	MigrationTargetNodeNameLabel = "kubevirt.io/migrationTargetNodeName"
	// MigrationSelectorLabel on a migration is the name of its VMI, so
	// that the migrations of one VMI can be listed.
	MigrationSelectorLabel = "kubevirt.io/vmi-name"
	// OutdatedLauncherImageLabel on a VMI says its launcher pod runs
	// another image than virt-controller's current launcher image.
	OutdatedLauncherImageLabel = "kubevirt.io/outdatedLauncherImage"
	// WorkloadUpdateMigrationAnnotation marks a migration made by the
	// workload updater.
	WorkloadUpdateMigrationAnnotation = "kubevirt.io/workloadUpdateMigration"

	// VirtualMachineInstanceFinalizer keeps a VMI until its launcher pod is
	// gone, so the guest gets its graceful shutdown.
	VirtualMachineInstanceFinalizer = "kubevirt.io/foregroundDeleteVirtualMachine"
	// VirtualMachineControllerFinalizer keeps a VM until its VMI is gone.
	VirtualMachineControllerFinalizer = "kubevirt.io/virtualMachineControllerFinalize"
	// VirtualMachineInstanceMigrationFinalizer keeps a migration until its
	// target pod is cleaned up.
	VirtualMachineInstanceMigrationFinalizer = "kubevirt.io/migrationJobFinalize"

	// KVMResource and TunResource are the device-plugin resources a launcher
	// pod requests to get /dev/kvm and /dev/net/tun.
	KVMResource corev1.ResourceName = "devices.kubevirt.io/kvm"
	TunResource corev1.ResourceName = "devices.kubevirt.io/tun"
	// UserfaultfdResource (kubevmm's own) gets a launcher pod
	// /dev/userfaultfd, owned by its user: how a non-root VMM may handle
	// the faults of a post-copy migration target. Every node offers it;
	// on a node without the device (Linux before 6.1) it gives nothing,
	// and post-copy fails there.
	UserfaultfdResource corev1.ResourceName = "devices.kubevirt.io/userfaultfd"

	// StartRequestDataPausedKey in a Start request's data asks for a paused start.
	StartRequestDataPausedKey = "paused"

	// ConsoleSubprotocol is the websocket subprotocol of the console
	// subresource (KubeVirt's): binary messages carry the serial console's
	// raw byte stream both ways. virtctl, virt-api and virt-handler speak it.
	ConsoleSubprotocol = "plain.kubevirt.io"
)

// ErrRunningAndRunStrategy is returned when a VM sets both spec.running and
// spec.runStrategy.
var ErrRunningAndRunStrategy = errors.New("spec.running and spec.runStrategy are mutually exclusive")

// RunStrategy returns the run strategy in effect: spec.runStrategy, or
// Always/Halted from spec.running, or Halted when neither is set.
func (vm *VirtualMachine) RunStrategy() (VirtualMachineRunStrategy, error) {
	switch {
	case vm.Spec.Running != nil && vm.Spec.RunStrategy != nil:
		return RunStrategyUnknown, ErrRunningAndRunStrategy
	case vm.Spec.RunStrategy != nil:
		return *vm.Spec.RunStrategy, nil
	case vm.Spec.Running != nil && *vm.Spec.Running:
		return RunStrategyAlways, nil
	default:
		return RunStrategyHalted, nil
	}
}

// IsFinal reports whether the VMI reached a phase it never leaves.
func (vmi *VirtualMachineInstance) IsFinal() bool {
	return vmi.Status.Phase == Succeeded || vmi.Status.Phase == Failed
}

// IsRunning reports whether virt-handler says the guest runs.
func (vmi *VirtualMachineInstance) IsRunning() bool {
	return vmi.Status.Phase == Running
}

// GetCondition returns the VMI condition of that type, or nil.
func (vmi *VirtualMachineInstance) GetCondition(t VirtualMachineInstanceConditionType) *VirtualMachineInstanceCondition {
	return conditions.Find(vmi.Status.Conditions, t)
}

// GetCondition returns the VM condition of that type, or nil.
func (vm *VirtualMachine) GetCondition(t VirtualMachineConditionType) *VirtualMachineCondition {
	return conditions.Find(vm.Status.Conditions, t)
}

// IsFinal reports whether the migration ended.
func (m *VirtualMachineInstanceMigration) IsFinal() bool {
	return m.Status.Phase == MigrationSucceeded || m.Status.Phase == MigrationFailed
}

var unmodeledType = reflect.TypeOf(Unmodeled{})

// UnmodeledFields lists the JSON paths (relative to the value given, e.g.
// "domain.devices.gpus[0]") of every KubeVirt field that is set but that
// kubevmm does not implement. Admission uses it to refuse such objects with
// a message naming the field; an empty result means nothing unmodeled is set.
func UnmodeledFields(v any) []string {
	var out []string
	walkUnmodeled(reflect.ValueOf(v), "", &out)
	return out
}

func walkUnmodeled(v reflect.Value, path string, out *[]string) {
	if !v.IsValid() {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		walkUnmodeled(v.Elem(), path, out)
	case reflect.Struct:
		if v.Type() == unmodeledType {
			if raw := v.Interface().(Unmodeled); len(raw.Raw) > 0 || raw.Object != nil {
				*out = append(*out, path)
			}
			return
		}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			p := path
			// Inline (embedded) structs share their parent's path.
			if name != "" {
				p = joinPath(path, name)
			}
			walkUnmodeled(v.Field(i), p, out)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			walkUnmodeled(v.Index(i), path+"["+strconv.Itoa(i)+"]", out)
		}
	case reflect.Map:
		// Maps in these types hold strings and quantities, never unmodeled fields.
	}
}

func joinPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// CloudInitData is what the cloudInitNoCloud and cloudInitConfigDrive
// volume sources share: where the user data and network data come from.
// +kubebuilder:object:generate=false
type CloudInitData struct {
	UserData, UserDataBase64       string
	UserDataSecretRef              *LocalObjectReference
	NetworkData, NetworkDataBase64 string
	NetworkDataSecretRef           *LocalObjectReference
}

// CloudInit returns the volume's cloud-init data and the field that holds
// it ("cloudInitNoCloud" or "cloudInitConfigDrive"); ok is false for any
// other volume.
func (s *VolumeSource) CloudInit() (field string, d CloudInitData, ok bool) {
	if c := s.CloudInitNoCloud; c != nil {
		return "cloudInitNoCloud", CloudInitData{c.UserData, c.UserDataBase64, c.UserDataSecretRef, c.NetworkData, c.NetworkDataBase64, c.NetworkDataSecretRef}, true
	}
	if c := s.CloudInitConfigDrive; c != nil {
		return "cloudInitConfigDrive", CloudInitData{c.UserData, c.UserDataBase64, c.UserDataSecretRef, c.NetworkData, c.NetworkDataBase64, c.NetworkDataSecretRef}, true
	}
	return "", CloudInitData{}, false
}

// UnknownFields returns the paths (as UnmodeledFields names them) of the
// fields in raw, an object's JSON, that typed, the same object decoded
// into its Go type, does not declare: decoding drops them, so encoding
// typed again leaves them out. A field set to its zero value (false, 0,
// "", null, empty) is not reported: a declared one is omitted the same
// way, and an undeclared one asks for nothing.
func UnknownFields(raw []byte, typed any) ([]string, error) {
	var in, known any
	if err := json.Unmarshal(raw, &in); err != nil {
		return nil, fmt.Errorf("unknown fields: %w", err)
	}
	b, err := json.Marshal(typed)
	if err != nil {
		return nil, fmt.Errorf("unknown fields: %w", err)
	}
	if err := json.Unmarshal(b, &known); err != nil {
		return nil, fmt.Errorf("unknown fields: %w", err)
	}
	var out []string
	walkUnknown(in, known, "", &out)
	sort.Strings(out)
	return out, nil
}

func walkUnknown(in, known any, path string, out *[]string) {
	switch in := in.(type) {
	case map[string]any:
		k, _ := known.(map[string]any)
		for name, v := range in {
			p := name
			if path != "" {
				p = path + "." + name
			}
			kv, ok := k[name]
			if !ok {
				if !isZeroJSON(v) {
					*out = append(*out, p)
				}
				continue
			}
			walkUnknown(v, kv, p, out)
		}
	case []any:
		k, _ := known.([]any)
		for i, v := range in {
			if i < len(k) {
				walkUnknown(v, k[i], path+"["+strconv.Itoa(i)+"]", out)
			}
		}
	}
}

func isZeroJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}
