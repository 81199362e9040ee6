package kubemacpool_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kubevmm/kubevmm/net/kubemacpool"
	"github.com/kubevmm/kubevmm/net/macpool"
)

// writeCert writes a self-signed serving certificate named cn into dir,
// as a rotated Secret's files appear (renamed into place).
func writeCert(t *testing.T, dir, cn string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	for name, b := range map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".new"), b, 0o600))
		require.NoError(t, os.Rename(filepath.Join(dir, name+".new"), filepath.Join(dir, name)))
	}
}

// TestCertificateRotation: a new serving certificate in the directory is
// served from the next TLS handshake, without a restart.
func TestCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	writeCert(t, dir, "first")
	s := &kubemacpool.Server{Pool: macpool.New(macpool.Range{}), CertDir: dir, Callers: anyCaller{}, Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	served := func() string {
		// The test checks which certificate is served, not who signed it.
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) //nolint:gosec
		require.NoError(t, err)
		defer func() { _ = c.Close() }()
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	assert.Equal(t, "first", served())
	writeCert(t, dir, "rotated")
	assert.Equal(t, "rotated", served())
}

func review(t *testing.T, op admissionv1.Operation, obj string) *admissionv1.AdmissionRequest {
	t.Helper()
	return &admissionv1.AdmissionRequest{UID: "u1", Operation: op, Namespace: "vms", Name: "vm", Object: runtime.RawExtension{Raw: []byte(obj)}}
}

const oneNIC = `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm","namespace":"vms"},
"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"a","bridge":{}},{"name":"b","bridge":{}}]}}}}}}`

// TestAdmitRefusals: what the webhook refuses without an API server.
func TestAdmitRefusals(t *testing.T) {
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:01")
	require.NoError(t, err)
	s := &kubemacpool.Server{Pool: macpool.New(r), Log: slog.New(slog.NewTextHandler(t.Output(), nil))}

	resp := s.Admit(review(t, admissionv1.Create, oneNIC))
	assert.False(t, resp.Allowed, "not ready: the pool is not rebuilt yet")
	assert.Equal(t, int32(http.StatusServiceUnavailable), resp.Result.Code)

	s.SetReady()
	// An object that does not decode is left to the API server's schema,
	// which names the field: admitted unchanged, nothing allocated.
	resp = s.Admit(review(t, admissionv1.Create, `{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":"lots"}}}}}}`))
	assert.True(t, resp.Allowed)
	assert.Nil(t, resp.Patch)
	assert.Empty(t, s.Pool.Held("vms/vm"))

	// One MAC left: the second interface finds none, and the first's is
	// given back.
	_, err = s.Pool.Allocate("other/vm")
	require.NoError(t, err)
	resp = s.Admit(review(t, admissionv1.Create, oneNIC))
	assert.False(t, resp.Allowed)
	assert.Contains(t, resp.Result.Message, "spec.template.spec.domain.devices.interfaces[1].macAddress (interface b): the MAC pool is exhausted")
	assert.Empty(t, s.Pool.Held("vms/vm"))

	// A dry run's MACs are not held.
	s.Pool.Release("other/vm")
	dry := review(t, admissionv1.Create, oneNIC)
	dry.DryRun = ptr.To(true)
	resp = s.Admit(dry)
	require.True(t, resp.Allowed)
	var patch []map[string]string
	require.NoError(t, json.Unmarshal(resp.Patch, &patch))
	assert.Len(t, patch, 2)
	assert.Empty(t, s.Pool.Held("vms/vm"))
}

// TestAdmitUpdateKeepsMACs: an update keeps an interface's MAC when it
// leaves it out, unless another interface now asks for it.
func TestAdmitUpdateKeepsMACs(t *testing.T) {
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:0f")
	require.NoError(t, err)
	s := &kubemacpool.Server{Pool: macpool.New(r), Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	s.SetReady()
	old := `{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"a","macAddress":"02:00:00:00:00:0a"},{"name":"b","macAddress":"02:00:00:00:00:0b"},{"name":"c","macAddress":"01:00:5e:00:00:01"}]}}}}}}`
	for _, tc := range []struct {
		name, obj string
		want      []map[string]string
	}{
		{name: "left out", obj: `{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"a"},{"name":"b","macAddress":"02:00:00:00:00:0b"}]}}}}}}`,
			want: []map[string]string{{"op": "add", "path": "/spec/template/spec/domain/devices/interfaces/0/macAddress", "value": "02:00:00:00:00:0a"}}},
		{name: "now another's", obj: `{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"a"},{"name":"b","macAddress":"02:00:00:00:00:0a"}]}}}}}}`,
			want: []map[string]string{{"op": "add", "path": "/spec/template/spec/domain/devices/interfaces/0/macAddress", "value": "02:00:00:00:00:00"}}},
		{name: "old one invalid", obj: `{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"c"}]}}}}}}`,
			want: []map[string]string{{"op": "add", "path": "/spec/template/spec/domain/devices/interfaces/0/macAddress", "value": "02:00:00:00:00:01"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := review(t, admissionv1.Update, tc.obj)
			req.OldObject = runtime.RawExtension{Raw: []byte(old)}
			resp := s.Admit(req)
			require.True(t, resp.Allowed, "%+v", resp.Result)
			var patch []map[string]string
			require.NoError(t, json.Unmarshal(resp.Patch, &patch))
			assert.Equal(t, tc.want, patch)
		})
	}
}

// TestReservationsExpire: a flood of admissions for VMs that are never
// stored (anyone on the pod network can send them) drains the pool only
// for ReservationTTL: their MACs are freed again, while a stored VM keeps
// its own, and an update of it that is never stored loses only the MAC
// it added.
func TestReservationsExpire(t *testing.T) {
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:05")
	require.NoError(t, err)
	s := &kubemacpool.Server{Pool: macpool.New(r), Log: slog.New(slog.NewTextHandler(t.Output(), nil)), ReservationTTL: time.Minute}
	s.SetReady()
	nic := func(ns, name string, ifaces ...string) *admissionv1.AdmissionRequest {
		var list []map[string]any
		for _, i := range ifaces {
			list = append(list, map[string]any{"name": i, "bridge": map[string]any{}})
		}
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"domain": map[string]any{"devices": map[string]any{"interfaces": list}}}}}})
		require.NoError(t, err)
		return &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create, Namespace: ns, Name: name, Object: runtime.RawExtension{Raw: b}}
	}
	// A real VM, stored: the watch confirms its MAC.
	require.True(t, s.Admit(nic("vms", "real", "a")).Allowed)
	realMACs := s.Pool.Held("vms/real")
	require.Len(t, realMACs, 1)
	s.Pool.Confirm("vms/real", realMACs)

	// The flood: made-up VMs until the pool is dry.
	for i := range 5 {
		require.True(t, s.Admit(nic("flood", fmt.Sprint("vm", i), "a")).Allowed, "MAC %d", i)
	}
	resp := s.Admit(nic("vms", "wanted", "a"))
	require.False(t, resp.Allowed, "the pool is dry during the flood")
	assert.Contains(t, resp.Result.Message, "exhausted")
	// Not yet expired: nothing freed.
	assert.Empty(t, s.Pool.Expire(time.Now()))
	// Expired: the flood's MACs are freed, the real VM keeps its own.
	later := func() time.Time { return time.Now().Add(s.ReservationTTL + time.Second) }
	assert.Equal(t, []string{"flood/vm0", "flood/vm1", "flood/vm2", "flood/vm3", "flood/vm4"}, s.Pool.Expire(later()))
	assert.Equal(t, realMACs, s.Pool.Held("vms/real"), "the stored VM's MAC survives the flood's expiry")

	// An update of the real VM adding an interface, never stored: only
	// the MAC it added is freed.
	upd := nic("vms", "real", "a", "b")
	upd.Operation = admissionv1.Update
	upd.OldObject = runtime.RawExtension{Raw: fmt.Appendf(nil, `{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"a","macAddress":%q}]}}}}}}`, realMACs[0])}
	require.True(t, s.Admit(upd).Allowed)
	require.Len(t, s.Pool.Held("vms/real"), 2)
	assert.Equal(t, []string{"vms/real"}, s.Pool.Expire(later()))
	assert.Equal(t, realMACs, s.Pool.Held("vms/real"))
	// Stored with it, it would have stayed: Confirm ends the reservation.
	require.True(t, s.Admit(upd).Allowed)
	s.Pool.Confirm("vms/real", s.Pool.Held("vms/real"))
	assert.Empty(t, s.Pool.Expire(later()))
	assert.Len(t, s.Pool.Held("vms/real"), 2)

	require.True(t, s.Admit(nic("vms", "wanted", "a")).Allowed, "the pool has room again")
}
