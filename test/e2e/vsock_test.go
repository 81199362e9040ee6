package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// TestVsockAndHardStop runs one guest (a boot costs minutes) with
// autoattachVSOCK: it gets a status.VSOCKCID of 3 or more, and KubeVirt's
// vsock subresource (a websocket to .../vsock?port=1234&tls=false)
// reaches its guest agent, which answers guest-ping; tls=true is refused.
// Then the guest is made to ignore its power button and its agent is
// killed: deleting the VMI waits out its 5 s grace period, the guest
// logs that it ignores the button, and the VMI is stopped hard, which an
// event says.
func TestVsockAndHardStop(t *testing.T) {
	requireE2E(t)
	t.Parallel() // its own namespace (see the package comment)
	const vns, vmi = "kubevmm-e2e-vsock", "vsock"
	const grace = 5 * time.Second // the VMI's terminationGracePeriodSeconds
	kc := func(args ...string) string { return kubectl(t, append([]string{"-n", vns}, args...)...) }
	kubectl(t, "delete", "namespace", vns, "--ignore-not-found", "--wait=true", "--timeout=180s")
	kubectl(t, "create", "namespace", vns)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, "kubectl.sh", "-n", vns, "get", "vmi,pods,events", "-o", "wide")
			t.Logf("state at failure:\n%s", out)
			out, _ = run(t, "kubectl.sh", "-n", vns, "logs", "-l", "kubevirt.io=virt-launcher", "--tail=40", "--prefix")
			t.Logf("launcher:\n%s", out)
			return
		}
		kubectl(t, "delete", "namespace", vns, "--wait=true", "--timeout=180s")
	})

	kc("apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-vsock.yaml"))
	kc("wait", "vmi/"+vmi, "--for=jsonpath={.status.phase}=Running", "--timeout=300s")
	cid, err := strconv.ParseUint(kc("get", "vmi/"+vmi, "-o", "jsonpath={.status.VSOCKCID}"), 10, 32)
	if err != nil || cid < 3 {
		t.Errorf("status.VSOCKCID: %d (%v), want an allocated CID of 3 or more", cid, err)
	}
	// The agent listens on vsock port 1234 once the guest is up.
	t0 := time.Now()
	kc("wait", "vmi/"+vmi, "--for=condition=AgentConnected", "--timeout=900s")
	t.Logf("MEASURED Running -> AgentConnected: %v", time.Since(t0).Round(time.Second))

	cfg := restConfig(t)
	if _, err := dialSubresource(cfg, vns, vmi, "vsock?port=1234"); err == nil || !strings.Contains(err.Error(), "without TLS") {
		t.Errorf("vsock with tls unset (true): %v, want it refused", err)
	}
	ws, err := dialSubresource(cfg, vns, vmi, "vsock?port=1234&tls=false")
	if err != nil {
		t.Fatalf("vsock port 1234: %v", err)
	}
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte(`{"execute":"guest-ping"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	var got []byte
	_ = ws.SetReadDeadline(time.Now().Add(time.Minute))
	for !bytes.Contains(got, []byte("\n")) {
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("reading the agent's answer (so far %q): %v", got, err)
		}
		got = append(got, b...)
	}
	ws.Close()
	if strings.TrimSpace(string(got)) != `{"return":{}}` {
		t.Errorf("guest-ping over the vsock subresource answered %q, want {\"return\":{}}", got)
	}

	// A guest that ignores the button, and no agent to ask: wait until
	// the launcher has noticed the agent gone, so that the power button
	// is what the stop presses.
	var tDelete time.Time
	con := consoleRunThenIn(t, vns, vmi, "touch /etc/kubevmm/ignore-button; killall kubevmm-agent; echo IGN-$((6*7))", "IGN-42", func() {
		deadline := time.Now().Add(2 * time.Minute)
		for kc("get", "vmi/"+vmi, "-o", `jsonpath={.status.conditions[?(@.type=="AgentConnected")].status}`) != "" {
			if time.Now().After(deadline) {
				t.Fatalf("AgentConnected stayed after the agent was killed")
			}
			time.Sleep(2 * time.Second) // the launcher polls the agent every 10 s
		}
		tDelete = time.Now()
		kc("delete", "vmi/"+vmi, "--wait=false")
	}, "kubevmm-guest: ignoring the power button", 3*time.Minute)
	t.Logf("console:\n%s", con[strings.LastIndex(con, "IGN-42"):])
	kc("wait", "vmi/"+vmi, "--for=delete", "--timeout=180s")
	took := time.Since(tDelete)
	t.Logf("MEASURED delete -> VMI gone: %v (grace period %v)", took.Round(time.Millisecond), grace)
	// The grace period runs from the VMI's deletionTimestamp, which has
	// whole seconds: up to one before tDelete.
	if took < grace-time.Second {
		t.Errorf("the VMI was gone after %v, before its grace period of %v: the guest did not shut down", took, grace)
	}
	ev := kc("get", "events", "--field-selector", "involvedObject.kind=VirtualMachineInstance,involvedObject.name="+vmi,
		"-o", "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}")
	t.Logf("events:\n%s", ev)
	if !strings.Contains(ev, "Pressed the guest's ACPI power button") || !strings.Contains(ev, "The grace period is over: the guest was stopped") {
		t.Errorf("the guest was not stopped hard after its grace period:\n%s", ev)
	}
}

// restConfig is the dev cluster's admin configuration, as kubectl.sh uses it.
func restConfig(t *testing.T) *rest.Config {
	t.Helper()
	kc := kubectl(t, "config", "view", "--raw", "--minify", "--flatten")
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc))
	if err != nil {
		t.Fatalf("the dev cluster's kubeconfig: %v", err)
	}
	return cfg
}

// dialSubresource opens the websocket of a VMI's streaming subresource
// (sub: its path and query) through the API server, as a KubeVirt client
// does; a refusal's error holds the API server's answer.
func dialSubresource(cfg *rest.Config, namespace, vmi, sub string) (*websocket.Conn, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	d := websocket.Dialer{TLSClientConfig: tlsCfg, Subprotocols: []string{v1.ConsoleSubprotocol}, HandshakeTimeout: 30 * time.Second}
	url := "wss" + strings.TrimPrefix(strings.TrimSuffix(cfg.Host, "/"), "https") +
		"/apis/" + v1.SubresourceGroupVersion.String() + "/namespaces/" + namespace + "/virtualmachineinstances/" + vmi + "/" + sub
	ws, resp, err := d.Dial(url, http.Header{})
	if err != nil && resp != nil {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return nil, fmt.Errorf("%s: %s", resp.Status, b.String())
	}
	return ws, err
}
