package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

// TestMetrics: a real Prometheus on the host scrapes virt-api,
// virt-controller and virt-handler at their pod IPs, port 8443 (the last
// two over HTTPS with a ServiceAccount token allowed to GET /metrics, as
// the README says to set it up), and its
// queries see a running VMI: in kubevirt_vmi_phase_count (virt-controller)
// and in the VMI's network counters and vCPU time (virt-handler, from its
// VMM). The
// guest's boot is not waited for: the VMI is Running once its VMM runs.
func TestMetrics(t *testing.T) {
	freshNamespace(t)
	const name = "ci-nocloud"
	kubectl(t, "-n", ns, "apply", "-f", filepath.Join(repo, "test/e2e/testdata/vmi-cloudinit-nocloud.yaml"))
	wait(t, "vmi/"+name, "jsonpath={.status.phase}=Running", 5*time.Minute)

	targets := func(app string) string {
		var q []string
		for _, ip := range componentIPs(t, app) {
			q = append(q, strconv.Quote(net.JoinHostPort(ip, "8443")))
		}
		return strings.Join(q, ",")
	}
	dir := t.TempDir()
	// Every component answers only a token allowed to GET /metrics
	// (api/securemetrics).
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(scraperToken(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	authed := `scheme: https, tls_config: {insecure_skip_verify: true}, authorization: {credentials_file: ` + strconv.Quote(tokenFile) + `}`
	cfg := fmt.Sprintf(`global: {scrape_interval: 2s}
scrape_configs:
  - {job_name: virt-controller, %[1]s, static_configs: [{targets: [%[2]s]}]}
  - {job_name: virt-handler, %[1]s, static_configs: [{targets: [%[3]s]}]}
  - {job_name: virt-api, %[1]s, static_configs: [{targets: [%[4]s]}]}
`, authed, targets("virt-controller"), targets("virt-handler"), targets("virt-api"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	prom := exec.Command(hosttools.Require(t, "prometheus"), "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	var log strings.Builder
	prom.Stdout, prom.Stderr = &log, &log
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = prom.Process.Kill()
		_ = prom.Wait()
		if t.Failed() {
			t.Logf("prometheus:\n%s", log.String())
		}
	})

	// query returns the samples of a PromQL query (none while Prometheus
	// starts or has not scraped yet).
	query := func(q string) []float64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/query?query="+url.QueryEscape(q), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&r) != nil {
			return nil
		}
		var vals []float64
		for _, s := range r.Data.Result {
			if str, ok := s.Value[1].(string); ok {
				if v, err := strconv.ParseFloat(str, 64); err == nil {
					vals = append(vals, v)
				}
			}
		}
		return vals
	}
	// until waits for a query to have a sample satisfying ok; the bound
	// only turns a hang into a failure.
	until := func(q string, ok func(float64) bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			vals := query(q)
			for _, v := range vals {
				if ok(v) {
					t.Logf("%s = %v", q, vals)
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no sample of %s as wanted (last: %v)", q, vals)
			}
			time.Sleep(2 * time.Second)
		}
	}
	for _, job := range []string{"virt-api", "virt-controller", "virt-handler"} {
		until(`up{job="`+job+`"}`, func(v float64) bool { return v == 1 })
	}
	until(`sum(kubevirt_vmi_phase_count{phase="running"})`, func(v float64) bool { return v >= 1 })
	until(fmt.Sprintf(`kubevirt_vmi_network_receive_bytes_total{namespace=%q,name=%q,interface="default"}`, ns, name), func(v float64) bool { return v >= 0 })
	until(fmt.Sprintf(`kubevirt_vmi_vcpu_seconds_total{namespace=%q,name=%q,id="0"}`, ns, name), func(v float64) bool { return v > 0 })
	until(`kubevirt_virt_controller_leading_status`, func(v float64) bool { return v == 1 })

	kubectl(t, "-n", ns, "delete", "vmi", name, "--wait=true", "--timeout=120s")
}
