package kubemacpool_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/kubevmm/kubevmm/net/kubemacpool"
	"github.com/kubevmm/kubevmm/net/macpool"
)

// FuzzAdmissionReview: kubemacpool's webhook port is on the pod network,
// so its body is anyone's. Whatever it is, the answer is a 400, or an
// AdmissionReview answering that request whose patch, if any, only sets
// interfaces' MACs to valid MACs (the pool's, or the ones an update's
// interfaces had).
func FuzzAdmissionReview(f *testing.F) {
	for _, s := range []string{
		`{"request":{"uid":"u","operation":"CREATE","namespace":"vms","name":"vm","object":` + oneNIC + `}}`,
		`{"request":{"uid":"u","operation":"UPDATE","namespace":"vms","name":"vm","object":` + oneNIC + `,"oldObject":{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"a","macAddress":"02:00:00:00:00:07"}]}}}}}}}}`,
		`{"request":{"uid":"u","operation":"CREATE","object":{"spec":{"template":{"spec":{"domain":{"devices":{"interfaces":[{"name":"a","macAddress":"zz"}]}}}}}}}}`,
		`{"request":{"uid":"u","operation":"CREATE","dryRun":true,"object":{"metadata":{"generateName":"x"}}}}`,
		`{}`, `{"request":null}`, `[`,
	} {
		f.Add([]byte(s))
	}
	r, _, err := macpool.ParseRange("02:00:00:00:00:00", "02:00:00:00:00:0f")
	if err != nil {
		f.Fatal(err)
	}
	// The body is what is fuzzed: the caller passes as the API server
	// (that check is TestOnlyAPIServer's, and the envtest's).
	s := &kubemacpool.Server{Pool: macpool.New(r), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Callers: anyCaller{}}
	s.SetReady()
	h := s.Handler()
	macPath := regexp.MustCompile(`^/spec/template/spec/domain/devices/interfaces/[0-9]+/macAddress$`)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, kubemacpool.PathMutateVM, bytes.NewReader(body)))
		if w.Code == http.StatusBadRequest {
			return
		}
		if w.Code != http.StatusOK {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		var in, out admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil || in.Request == nil {
			t.Fatalf("answered 200 to what is no AdmissionReview: %s", body)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("not an AdmissionReview answer: %v %s", err, w.Body)
		}
		if out.Response.UID != in.Request.UID {
			t.Fatalf("answered UID %q for %q", out.Response.UID, in.Request.UID)
		}
		if len(out.Response.Patch) == 0 {
			return
		}
		var ops []struct{ Op, Path, Value string }
		if err := json.Unmarshal(out.Response.Patch, &ops); err != nil {
			t.Fatalf("patch: %v", err)
		}
		for _, op := range ops {
			if _, err := macpool.ParseMAC(op.Value); op.Op != "add" || !macPath.MatchString(op.Path) || err != nil {
				t.Fatalf("patch op %+v (%v)", op, err)
			}
		}
	})
}

// anyCaller takes every caller for the API server.
type anyCaller struct{}

func (anyCaller) APIServer(*http.Request) error { return nil }
