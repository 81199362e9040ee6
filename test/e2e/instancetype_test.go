package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// expandSpec is the VM as the expand-spec subresource returns it: its
// template with the instance type and preference applied.
func expandSpec(t *testing.T, vm string) *v1.VirtualMachine {
	t.Helper()
	out := kubectl(t, "get", "--raw", "/apis/subresources.kubevirt.io/v1/namespaces/"+ns+"/virtualmachines/"+vm+"/expand-spec")
	got := &v1.VirtualMachine{}
	if err := json.Unmarshal([]byte(out), got); err != nil {
		t.Fatalf("expand-spec of %s: %v\n%s", vm, err, out)
	}
	return got
}

// TestInstancetypes: KubeVirt's instance type examples apply and size
// their VMs; `virtctl create vm --instancetype u1.small --preference linux
// | kubectl apply -f -` runs a VM (the one guest booted here, to Running
// only); editing the instance type leaves the running VMI and the VM's
// next VMI alone until the VM's revisionName is cleared.
func TestInstancetypes(t *testing.T) {
	freshNamespace(t)
	td := filepath.Join(repo, "test/e2e/testdata")
	t.Cleanup(func() {
		_, _ = run(t, "kubectl.sh", "delete", "virtualmachineclusterinstancetype", "cluster-csmall", "--ignore-not-found")
		// The SSP operator again reverts u1.small, edited below.
		_, _ = run(t, "kubectl.sh", "-n", "kubevirt", "annotate", "ssp", sspName, sspv1beta3.OperatorPausedAnnotation+"-")
	})

	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(td, "kubevirt-instancetypes.yaml"))
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(td, "kubevirt-vm-instancetypes.yaml"))
	for _, tc := range []struct {
		vm, memory string
		cores      uint32
		bus        v1.DiskBus
	}{
		{"vm-cirros-csmall", "128Mi", 1, ""},
		{"vm-cirros-cluster-csmall", "128Mi", 1, ""},
		// clarge's 4 vCPUs are cores: the guest sees one socket.
		{"vm-cirros-clarge-virtio", "2Gi", 4, v1.DiskBusVirtio},
	} {
		d := expandSpec(t, tc.vm).Spec.Template.Spec.Domain
		if d.CPU == nil || d.Memory == nil || d.Memory.Guest == nil {
			t.Fatalf("%s expanded without CPU or memory: %+v", tc.vm, d)
		}
		if got := d.CPU.Cores; got != tc.cores {
			t.Errorf("%s: cores %d, want %d", tc.vm, got, tc.cores)
		}
		if got := d.Memory.Guest.String(); got != tc.memory {
			t.Errorf("%s: memory %s, want %s", tc.vm, got, tc.memory)
		}
		if got := d.Devices.Disks[0].Disk.Bus; got != tc.bus {
			t.Errorf("%s: first disk's bus %q, want %q", tc.vm, got, tc.bus)
		}
	}
	// Upstream's file as written: its memory.guest conflicts with the type.
	upstream := `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"conflict"},"spec":{"runStrategy":"Halted",` +
		`"instancetype":{"kind":"VirtualMachineInstancetype","name":"csmall"},"template":{"spec":{"domain":{"memory":{"guest":"128Mi"},"devices":{}}}}}}`
	cmd := exec.Command(filepath.Join(repo, "hack/kubectl.sh"), "-n", ns, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(upstream)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "VM field spec.template.spec.domain.memory.guest conflicts with selected instance type") {
		t.Errorf("a template with memory.guest and an instance type: err=%v\n%s", err, out)
	}

	// virtctl create vm | kubectl apply -f -, with the common set.
	const name = "itvm"
	pipe := exec.Command("bash", "-c", `"$1" -n "$2" create vm --name `+name+` --instancetype u1.small --preference linux --termination-grace-period 10 `+
		`--volume-containerdisk src:localhost/kubevmm/test-bootdisk:devel,name:rootdisk | "$3" apply -f -`,
		"pipe", filepath.Join(repo, "hack/virtctl.sh"), ns, filepath.Join(repo, "hack/kubectl.sh"))
	if out, err := pipe.CombinedOutput(); err != nil {
		t.Fatalf("virtctl create vm | kubectl apply: %v\n%s", err, out)
	}
	// virt-controller first captures the revisions, then creates the VMI.
	wait(t, "vmi/"+name, "create", 2*time.Minute)
	wait(t, "vmi/"+name, "jsonpath={.status.phase}=Running", 5*time.Minute)
	vmi := &v1.VirtualMachineInstance{}
	if err := json.Unmarshal([]byte(kubectl(t, "-n", ns, "get", "vmi", name, "-o", "json")), vmi); err != nil {
		t.Fatal(err)
	}
	d := vmi.Spec.Domain
	if d.CPU == nil || d.CPU.Sockets != 1 || d.CPU.Cores != 1 || d.CPU.Threads != 1 || d.Memory == nil || d.Memory.Guest.String() != "2Gi" {
		t.Fatalf("VMI sized %+v / %v, want u1.small's 1 vCPU and 2Gi", d.CPU, d.Memory.Guest)
	}
	if d.Devices.Rng == nil || d.Devices.Disks[0].Disk.Bus != v1.DiskBusVirtio || d.Devices.Interfaces[0].Model != "virtio" {
		t.Errorf("the linux preference's devices are missing: rng=%v disk=%+v interfaces=%+v", d.Devices.Rng, d.Devices.Disks[0], d.Devices.Interfaces)
	}
	if got := vmi.Annotations["kubevirt.io/cluster-instancetype-name"]; got != "u1.small" {
		t.Errorf("cluster-instancetype-name annotation %q", got)
	}
	rev := jsonpath(t, "vm/"+name, "{.spec.instancetype.revisionName}")
	if !strings.HasPrefix(rev, name+"-u1.small-v1beta1-") {
		t.Fatalf("revisionName %q", rev)
	}
	kubectl(t, "-n", ns, "get", "controllerrevision", rev)

	// Editing the type: the running VMI and the VM's revision stay. The
	// SSP operator would revert the edit of its u1.small: paused first,
	// until the cleanup.
	kubectl(t, "-n", "kubevirt", "annotate", "ssp", sspName, sspv1beta3.OperatorPausedAnnotation+"=true")
	kubectl(t, "-n", "kubevirt", "wait", "ssp/"+sspName, "--for=jsonpath={.status.paused}=true", "--timeout=60s")
	kubectl(t, "patch", "virtualmachineclusterinstancetype", "u1.small", "--type=merge", "-p", `{"spec":{"memory":{"guest":"3Gi"}}}`)
	if got := jsonpath(t, "vmi/"+name, "{.spec.domain.memory.guest}"); got != "2Gi" {
		t.Errorf("running VMI's memory %s after the type was edited, want 2Gi", got)
	}
	if got := expandSpec(t, name).Spec.Template.Spec.Domain.Memory.Guest.String(); got != "2Gi" {
		t.Errorf("expand-spec %s after the type was edited, want the revision's 2Gi", got)
	}
	// Clearing the revision, then restarting: the new VMI has the edit.
	uid := jsonpath(t, "vmi/"+name, "{.metadata.uid}")
	kubectl(t, "-n", ns, "patch", "vm", name, "--type=json", "-p", `[{"op":"remove","path":"/spec/instancetype/revisionName"}]`)
	virtctl(t, "restart", name)
	// The old VMI goes away first, so `kubectl wait` (which fails on a
	// missing object) can't watch for the new one: poll for it.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := run(t, "kubectl.sh", "-n", ns, "get", "vmi", name, "-o", "jsonpath={.metadata.uid} {.spec.domain.memory.guest}")
		if f := strings.Fields(out); err == nil && len(f) == 2 && f[0] != uid {
			if f[1] != "3Gi" {
				t.Fatalf("the restarted VMI has %s, want the edited type's 3Gi", f[1])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new VMI after the restart; last seen: %s %v", out, err)
		}
		time.Sleep(2 * time.Second)
	}
	if got := jsonpath(t, "vm/"+name, "{.spec.instancetype.revisionName}"); got == rev || got == "" {
		t.Errorf("revisionName %q after the restart, want a new one", got)
	}
	kubectl(t, "-n", ns, "delete", "vm", name, "--wait=true", "--timeout=120s")
}
