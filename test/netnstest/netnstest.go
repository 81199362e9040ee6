// Package netnstest gives tests real network namespaces and a real DHCP
// client (busybox udhcpc) to run in them.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/test/hosttools"
)

// New is a named network namespace, removed with the test; a test not
// run as root is skipped.
func New(t testing.TB, role string) *link.Netns {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root for network namespaces, veths, bridges and taps")
	}
	ns, err := link.NewNetns(fmt.Sprintf("kvt-%s-%d", role, os.Getpid()%100000))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() }) // best effort, as the namespace only holds test links
	return ns
}

// Udhcpc runs busybox's DHCP client once on iface in ns (3 tries a second
// apart, then it gives up), asking for options too (udhcpc's names: mtu,
// staticroutes, search...). It returns the lease as udhcpc hands it to its
// script, the environment (ip, mask, router, dns, ...), or the client's
// error when it got none.
func Udhcpc(t testing.TB, ns *link.Netns, iface string, options ...string) (map[string]string, error) {
	t.Helper()
	busybox := hosttools.Require(t, "busybox")
	dir := t.TempDir()
	script, lease := filepath.Join(dir, "script"), filepath.Join(dir, "lease")
	if err := os.WriteFile(script, []byte("#!"+busybox+" sh\n[ \"$1\" = bound ] && env > "+lease+"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"udhcpc", "-i", iface, "-n", "-q", "-f", "-t", "3", "-T", "1", "-s", script}
	for _, o := range options {
		args = append(args, "-O", o)
	}
	if err := ns.Do(func() error {
		out, err := exec.Command(busybox, args...).CombinedOutput()
		if err != nil {
			t.Logf("udhcpc: %s", out)
		}
		return err
	}); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(lease)
	if err != nil {
		return nil, fmt.Errorf("udhcpc ended without a lease: %w", err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env, nil
}
