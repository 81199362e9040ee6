package e2e

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubevmm/kubevmm/handler"
)

const restrictedNS = "kubevmm-e2e-restricted"

// strangerRequest sends one HTTPS request to addr from pid's network
// namespace, as a client with no certificate, and returns the response's
// status, or the error that ended the exchange once connected (the TLS
// handshake refused, or the connection closed). Not reaching addr at all
// fails the test: it would prove nothing.
func strangerRequest(t *testing.T, pid int, addr string, req *http.Request) (int, error) {
	t.Helper()
	raw, err := dialFromNetns(pid, addr)
	if err != nil {
		t.Fatalf("connecting to %s from the pod: %v", addr, err)
	}
	c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true})
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if err := c.Handshake(); err != nil {
		return 0, err
	}
	if err := req.Write(c); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// seccompStatus is the Seccomp mode and the number of filters of process
// pid, from /proc/PID/status.
func seccompStatus(t *testing.T, pid int) (mode, filters string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			mode = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Seccomp_filters:"); ok {
			filters = strings.TrimSpace(v)
		}
	}
	return mode, filters
}

// TestRestrictedNamespace: a VM runs in a namespace whose PodSecurity
// level is "restricted" (its launcher pod has no host path, no privilege,
// a read-only root and a seccomp profile), confined by the runtime's
// profile and then by the VMM's own filter; from inside its pod, neither
// virt-api's subresources nor virt-handler's API answer a client without
// their certificates, whatever user it claims to be.
func TestRestrictedNamespace(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	k := func(args ...string) string {
		t.Helper()
		return kubectl(t, append([]string{"-n", restrictedNS}, args...)...)
	}
	kubectl(t, "delete", "namespace", restrictedNS, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", restrictedNS)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", restrictedNS, "get", "vm,vmi,pods,events", "-o", "wide")
			t.Logf("state at failure:\n%s", out)
			return
		}
		kubectl(t, "delete", "namespace", restrictedNS, "--wait=true", "--timeout=180s")
	})
	kubectl(t, "label", "namespace", restrictedNS, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
	// The label is enforced: a pod that shares the host's PIDs is refused.
	if out, err := run(t, "kubectl.sh", "-n", restrictedNS, "run", "host-pid", "--image=localhost/kubevmm/test-guest:devel", "--restart=Never",
		"--dry-run=server", `--overrides={"apiVersion":"v1","spec":{"hostPID":true}}`); err == nil || !strings.Contains(out, "violates PodSecurity") {
		t.Fatalf("the namespace admits a pod in the host's PID namespace (%v):\n%s", err, out)
	}

	k("apply", "-f", filepath.Join(repo, "test/e2e/testdata/vm.yaml"))
	k("wait", "vmi/"+vmName, "--for=create", "--timeout=120s")
	k("wait", "vmi/"+vmName, "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
	out := consoleUntil(t, restrictedNS, vmName, marker, 15*time.Minute)
	line, _, _ := strings.Cut(marker+string(afterMarker([]byte(out), marker)), "\n")
	t.Logf("guest in the restricted namespace: %s", strings.TrimSpace(line))

	uid := k("get", "vmi", vmName, "-o", "jsonpath={.metadata.uid}")
	pod := strings.TrimSpace(k("get", "pods", "-l", "kubevirt.io/created-by="+uid, "-o", "jsonpath={.items[*].metadata.name}"))
	if pod == "" || strings.Contains(pod, " ") {
		t.Fatalf("want one launcher pod, got %q", pod)
	}
	if hp := k("get", "pod", pod, "-o", "jsonpath={.spec.volumes[*].hostPath}"); hp != "" {
		t.Fatalf("the launcher pod has host paths: %s", hp)
	}
	podUID := k("get", "pod", pod, "-o", "jsonpath={.metadata.uid}")
	user := k("get", "pod", pod, "-o", "jsonpath={.spec.securityContext.runAsUser}")
	pids := podProcesses(podUID, "virt-launcher")
	if len(pids) != 1 {
		t.Fatalf("want one virt-launcher process (it runs the VMM) in pod %s, got %v", pod, pids)
	}
	// Mode 2 is a filter; two of them: the runtime's profile, then the
	// VMM's own, installed once the VM was set up.
	mode, filters := seccompStatus(t, pids[0])
	t.Logf("launcher pod %s: runAsUser %s, VMM seccomp mode %s with %s filters", pod, user, mode, filters)
	if mode != "2" || filters != "2" {
		t.Fatalf("the VMM runs with Seccomp %q and %q filters, want mode 2 with 2 (the pod's profile and the VMM's)", mode, filters)
	}

	t.Run("virt-api and virt-handler refuse a client in the pod", func(t *testing.T) {
		// virt-handler's API is closed to the pod by its NetworkPolicy
		// (virt-api's pods only); its certificate check is then tried
		// from the node, which policies do not restrict.
		apiIP := strings.TrimSpace(kubectl(t, "-n", "kubevirt", "get", "pods", "-l", "kubevirt.io=virt-api", "-o", "jsonpath={.items[0].status.podIP}"))
		handlerIP := strings.TrimSpace(kubectl(t, "-n", "kubevirt", "get", "pods", "-l", "kubevirt.io=virt-handler", "-o", "jsonpath={.items[0].status.podIP}"))
		for _, tc := range []struct {
			name, addr, path string
			closedToPods     bool
		}{
			// The aggregated API's own path, as the front proxy forwards
			// it, claiming to be an admin: only the front proxy's
			// certificate makes virt-api believe the headers.
			{"virt-api stop, a forged X-Remote-User", net.JoinHostPort(apiIP, "8443"),
				"/apis/subresources.kubevirt.io/v1/namespaces/" + restrictedNS + "/virtualmachines/" + vmName + "/stop", false},
			{"virt-handler pause", net.JoinHostPort(handlerIP, strconv.Itoa(handler.Port)),
				"/v1/namespaces/" + restrictedNS + "/virtualmachineinstances/" + vmName + "/pause", true},
		} {
			from := pids[0]
			if tc.closedToPods {
				if c, err := dialFromNetns(from, tc.addr); err == nil {
					c.Close()
					t.Errorf("%s: the launcher pod reached %s, which its NetworkPolicy closes to it", tc.name, tc.addr)
				}
				from = os.Getpid()
			}
			req, err := http.NewRequest(http.MethodPut, "https://"+tc.addr+tc.path, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Remote-User", "system:admin")
			req.Header.Set("X-Remote-Group", "system:masters")
			req.Header.Set("Content-Type", "application/json")
			status, err := strangerRequest(t, from, tc.addr, req)
			t.Logf("%s (%s): status %d, %v", tc.name, tc.addr, status, err)
			if err == nil && status != http.StatusUnauthorized && status != http.StatusForbidden {
				t.Errorf("%s: answered %d to a client without a certificate", tc.name, status)
			}
		}
		// The VM is as it was: running, not paused, not stopped, the
		// same launcher with no restarts.
		if got := k("get", "vmi", vmName, "-o", "jsonpath={.status.phase} {.status.conditions[?(@.type==\"Paused\")].status}"); strings.TrimSpace(got) != "Running" {
			t.Errorf("VMI phase and Paused condition %q, want Running and not paused", got)
		}
		if got := k("get", "vm", vmName, "-o", "jsonpath={.spec.runStrategy}"); got != "Always" {
			t.Errorf("VM runStrategy %q, want Always", got)
		}
		if got := k("get", "pod", pod, "-o", "jsonpath={.metadata.uid} {.status.containerStatuses[0].restartCount}"); got != podUID+" 0" {
			t.Errorf("launcher pod %q, was %s with no restarts", got, podUID)
		}
	})

	k("delete", "vm", vmName, "--wait=true", "--timeout=180s")
}
