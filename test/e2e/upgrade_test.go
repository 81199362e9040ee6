package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// upgradeTag is the "new version": the images sync imported, tagged
	// again (hack/cluster/retag.sh).
	upgradeTag = "upgrade"
	kvName     = "kv/kubevirt-kubevirt-hyperconverged"
)

// upgradeImages are the images an upgrade of virt-operator rolls.
var upgradeImages = []string{"virt-operator", "virt-api", "virt-controller", "virt-handler", "virt-launcher"}

// watchLines runs `kubectl get -w` with a jsonpath template and collects
// its lines until the test ends (or stop is called).
type watchLines struct {
	mu   sync.Mutex
	out  bytes.Buffer
	stop context.CancelFunc
	done chan struct{}
}

func (w *watchLines) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.Write(b)
}

func (w *watchLines) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Split(strings.TrimSpace(w.out.String()), "\n")
}

func watch(t *testing.T, args ...string) *watchLines {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watchLines{stop: cancel, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "kubectl.sh"), append(args, "--watch")...)
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(w.done) }()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// setOperatorTag points virt-operator at tag, as an upgrade of its
// Deployment does (OLM replacing the CSV, or a new release's manifests):
// its image and --image-tag, the default the KubeVirt CR (which the HCO
// makes without an imageTag) follows. Then it waits for virt-operator to
// run it.
func setOperatorTag(t *testing.T, tag string) {
	t.Helper()
	args := strings.Fields(kubectl(t, "-n", "kubevirt", "get", "deployment/virt-operator", "-o", "jsonpath={.spec.template.spec.containers[0].args[*]}"))
	for i, a := range args {
		if strings.HasPrefix(a, "--image-tag=") {
			args[i] = "--image-tag=" + tag
		}
	}
	p, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
		map[string]any{"name": "virt-operator", "image": "localhost/kubevmm/virt-operator:" + tag, "args": args}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, "-n", "kubevirt", "patch", "deployment/virt-operator", "--type=strategic", "-p", string(p))
	kubectl(t, "-n", "kubevirt", "rollout", "status", "deployment/virt-operator", "--timeout=300s")
}

// waitDeployed waits for the KubeVirt CR to be Deployed at tag.
func waitDeployed(t *testing.T, tag string, bound time.Duration) {
	t.Helper()
	kubectl(t, "-n", "kubevirt", "wait", kvName, "--for=jsonpath={.status.observedKubeVirtVersion}="+tag, "--timeout="+bound.String())
	kubectl(t, "-n", "kubevirt", "wait", kvName, "--for=jsonpath={.status.phase}=Deployed", "--timeout="+bound.String())
}

// rolledAt is when the newest of the component's pods on tag became Ready.
func rolledAt(t *testing.T, label, tag string) time.Time {
	t.Helper()
	out := kubectl(t, "-n", "kubevirt", "get", "pods", "-l", label, "-o",
		`jsonpath={range .items[*]}{.spec.containers[0].image} {.status.conditions[?(@.type=="Ready")].lastTransitionTime}{"\n"}{end}`)
	var last time.Time
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || !strings.HasSuffix(f[0], ":"+tag) {
			continue
		}
		at, err := time.Parse(time.RFC3339, f[1])
		if err != nil {
			t.Fatalf("pod Ready time %q: %v", f[1], err)
		}
		if at.After(last) {
			last = at
		}
	}
	if last.IsZero() {
		t.Fatalf("no Ready pod of %s on tag %s:\n%s", label, tag, out)
	}
	return last
}

var bootIDRe = regexp.MustCompile(`([0-9a-f-]{36})=BOOT-2`)

// bootID is the guest's /proc/sys/kernel/random/boot_id, new at every
// boot of its kernel. (The marker after it is computed, so the typed line
// echoed back does not match.)
func bootID(t *testing.T) string {
	t.Helper()
	out := consoleRun(t, `echo $(cat /proc/sys/kernel/random/boot_id)=BOOT-$((1+1))`, "=BOOT-2", 2*time.Minute)
	m := bootIDRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no boot ID on the console:\n%s", out)
	}
	return m[1]
}

// TestUpgrade: kubevmm deployed by sync (tag devel, "A") runs a VM; then
// virt-operator is upgraded to tag "upgrade" ("B": the same images tagged
// again). virt-controller and virt-handler roll to B first, virt-api
// last; the KubeVirt CR stays Available, Progressing with reason
// UpdateInProgress; the VMI is marked outdated and counted, and the
// workload updater (the HCO's default workloadUpdateStrategy:
// LiveMigrate) migrates it onto a B launcher; the guest never restarts
// (same boot ID, its marker file still there) and the outdated count
// returns to 0. The cluster is put back on A (and tag B removed) after.
func TestUpgrade(t *testing.T) {
	freshNamespace(t)
	from := strings.TrimSpace(kubectl(t, "-n", "kubevirt", "get", kvName, "-o", "jsonpath={.status.observedKubeVirtVersion}"))
	if from == "" || from == upgradeTag {
		t.Fatalf("the KubeVirt CR's observed version is %q: want the one sync deployed", from)
	}
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm.yaml"))
	wait(t, "vmi/"+vmName, "create", 2*time.Minute)
	wait(t, "vmi/"+vmName, "jsonpath={.status.phase}=Running", 5*time.Minute)
	consoleUntil(t, ns, vmName, "kubevmm-guest: shell on the console", 15*time.Minute)
	consoleRun(t, "echo up-$((6*7)) > /tmp/upgrade-marker && echo MARK-$((1+2))", "MARK-3", 2*time.Minute)
	boot := bootID(t)
	t.Logf("guest boot ID on %s: %s", from, boot)
	source := strings.TrimSpace(kubectl(t, "-n", ns, "get", "pods", "-l", "kubevirt.io/created-by", "-o", "jsonpath={.items[*].metadata.name}"))
	if strings.Contains(source, " ") || source == "" {
		t.Fatalf("want one launcher pod before the upgrade, got %q", source)
	}

	if out, err := run(t, "cluster/retag.sh", append([]string{upgradeTag}, upgradeImages...)...); err != nil {
		t.Fatalf("retag.sh: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := run(t, "cluster/retag.sh", append([]string{"-d", upgradeTag}, upgradeImages...)...); err != nil {
			t.Errorf("retag.sh -d: %v\n%s", err, out)
		}
	})
	// Back on A after the test, whatever happened: virt-operator rolls
	// the components back the same way.
	t.Cleanup(func() {
		setOperatorTag(t, from)
		waitDeployed(t, from, 10*time.Minute)
	})

	kvWatch := watch(t, "-n", "kubevirt", "get", kvName, "-o",
		`jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Progressing")].reason} {.status.outdatedVirtualMachineInstanceWorkloads}{"\n"}`)
	vmiWatch := watch(t, "-n", ns, "get", "vmi/"+vmName, "-o", `jsonpath={.metadata.labels}{"\n"}`)
	t0 := time.Now()
	setOperatorTag(t, upgradeTag)
	waitDeployed(t, upgradeTag, 15*time.Minute)
	t.Logf("MEASURED upgrade %s -> %s, components: %v", from, upgradeTag, time.Since(t0).Round(time.Second))

	for _, c := range []string{"deployment/virt-controller", "deployment/virt-api", "daemonset/virt-handler"} {
		img := kubectl(t, "-n", "kubevirt", "get", c, "-o", "jsonpath={.spec.template.spec.containers[0].image}")
		if !strings.HasSuffix(img, ":"+upgradeTag) {
			t.Errorf("%s runs %s, want tag %s", c, img, upgradeTag)
		}
	}
	// virt-api last: its pods on B were created only after virt-controller's
	// and virt-handler's were Ready on B.
	ctl, handler := rolledAt(t, "kubevirt.io=virt-controller", upgradeTag), rolledAt(t, "kubevirt.io=virt-handler", upgradeTag)
	apiCreated := kubectl(t, "-n", "kubevirt", "get", "pods", "-l", "kubevirt.io=virt-api", "-o",
		`jsonpath={range .items[*]}{.spec.containers[0].image} {.metadata.creationTimestamp}{"\n"}{end}`)
	for _, l := range strings.Split(strings.TrimSpace(apiCreated), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || !strings.HasSuffix(f[0], ":"+upgradeTag) {
			continue
		}
		at, err := time.Parse(time.RFC3339, f[1])
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(ctl) || at.Before(handler) {
			t.Errorf("virt-api pod on %s created at %s, before virt-controller (%s) or virt-handler (%s) were Ready on it", upgradeTag, at, ctl, handler)
		}
	}
	t.Logf("virt-controller Ready on %s at %s, virt-handler at %s; virt-api pods: %s", upgradeTag, ctl, handler, strings.TrimSpace(apiCreated))

	// The workload updater's migration.
	var mig string
	for deadline := time.Now().Add(5 * time.Minute); mig == ""; time.Sleep(2 * time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("no workload update migration of %s", vmName)
		}
		mig = strings.TrimSpace(kubectl(t, "-n", ns, "get", "vmim", "-o",
			`jsonpath={range .items[?(@.metadata.annotations.kubevirt\.io/workloadUpdateMigration)]}{.metadata.name}{end}`))
	}
	wait(t, "vmim/"+mig, "jsonpath={.status.phase}=Succeeded", 15*time.Minute)
	t.Logf("MEASURED upgrade %s -> %s, through the VM's migration (%s): %v", from, upgradeTag, mig, time.Since(t0).Round(time.Second))
	target := jsonpath(t, "vmi/"+vmName, "{.status.migrationState.targetPod}")
	if target == source || target == "" {
		t.Fatalf("the VMI's migration target pod is %q (source %s)", target, source)
	}
	img := jsonpath(t, "pod/"+target, `{.spec.containers[?(@.name=="compute")].image}`)
	if img != "localhost/kubevmm/virt-launcher:"+upgradeTag {
		t.Errorf("the VMI's launcher pod %s runs %s, want tag %s", target, img, upgradeTag)
	}
	kubectl(t, "-n", "kubevirt", "wait", kvName, "--for=jsonpath={.status.outdatedVirtualMachineInstanceWorkloads}=0", "--timeout=120s")
	wait(t, "vmi/"+vmName, "jsonpath={.status.phase}=Running", time.Minute)

	// The guest never restarted.
	if got := bootID(t); got != boot {
		t.Errorf("guest boot ID %s after the upgrade, was %s: the guest restarted", got, boot)
	}
	consoleRun(t, "cat /tmp/upgrade-marker", "up-42", 2*time.Minute)

	// What was seen on the way: the VMI labelled outdated, the CR
	// Available throughout, Progressing UpdateInProgress, one outdated
	// VMI counted, then none.
	kvWatch.stop()
	vmiWatch.stop()
	<-kvWatch.done
	<-vmiWatch.done
	labels, states := strings.Join(vmiWatch.lines(), "\n"), kvWatch.lines()
	if !strings.Contains(labels, `"kubevirt.io/outdatedLauncherImage"`) {
		t.Errorf("the VMI was never labelled kubevirt.io/outdatedLauncherImage; its labels were:\n%s", labels)
	}
	if strings.Contains(vmiWatch.lines()[len(vmiWatch.lines())-1], "outdatedLauncherImage") {
		t.Errorf("the VMI is still labelled outdated: %s", vmiWatch.lines()[len(vmiWatch.lines())-1])
	}
	var updating, counted bool
	for _, s := range states {
		f := strings.Fields(s)
		if len(f) > 0 && f[0] != "True" {
			t.Errorf("KubeVirt CR not Available during the upgrade: %q", s)
		}
		updating = updating || (len(f) > 1 && f[1] == "UpdateInProgress")
		counted = counted || (len(f) > 2 && f[2] == "1")
	}
	if !updating || !counted {
		t.Errorf("KubeVirt CR states (Available, Progressing reason, outdated VMIs) never showed UpdateInProgress (%v) and one outdated VMI (%v):\n%s",
			updating, counted, strings.Join(states, "\n"))
	}
	t.Logf("virt-operator on the upgrade:\n%s", grepLines(kubectl(t, "-n", "kubevirt", "logs", "deployment/virt-operator"), "progressing"))
	kubectl(t, "-n", ns, "delete", "vm", vmName, "--wait=true", "--timeout=180s")
}

// grepLines is the lines of s that hold sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
