package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/api"
	"github.com/kubevmm/kubevmm/vmm/runner/runnertest"
)

// Every route of the control API, over its real unix socket in front of a
// real VM (runnertest), spoken to with plain HTTP so that requests the
// client never makes (wrong methods, broken bodies) can be sent too.

type raw struct{ hc *http.Client }

func rawClient(sock string) raw {
	return raw{&http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
}

// do sends the request and returns the status and the body.
func (c raw) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://vmm"+path, r)
	require.NoError(t, err)
	resp, err := c.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// errorReply asserts body is the API's JSON error naming msg.
func errorReply(t *testing.T, body, msg string) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), "body %q", body)
	assert.Contains(t, e.Error, msg)
}

func state(t *testing.T, c raw) api.State {
	t.Helper()
	code, body := c.do(t, http.MethodGet, "/v1/vm", "")
	require.Equal(t, http.StatusOK, code)
	var i api.Info
	require.NoError(t, json.Unmarshal([]byte(body), &i))
	return i.State
}

func TestRoutesHappyPath(t *testing.T) {
	v := runnertest.Spinning(t)
	c := rawClient(v.Socket)
	snap := filepath.Join(t.TempDir(), "snap")
	for _, tc := range []struct {
		method, path, body string
		code               int
		state              api.State // afterwards
		reply              string    // in the body
	}{
		{http.MethodGet, "/v1/vm", "", http.StatusOK, api.StateRunning, `"state":"Running"`},
		{http.MethodPut, "/v1/vm/pause", "", http.StatusNoContent, api.StatePaused, ""},
		{http.MethodPut, "/v1/vm/resume", "", http.StatusNoContent, api.StateRunning, ""},
		{http.MethodPut, "/v1/vm/snapshot", fmt.Sprintf(`{"dir": %q}`, snap), http.StatusOK, api.StateRunning, `"memory_bytes":`},
		{http.MethodGet, "/v1/vm/migration", "", http.StatusOK, api.StateRunning, `"active":false`},
		// a plain VMM talks to no guest agent: shutdown is the power
		// button, freezing is refused
		{http.MethodPut, "/v1/vm/shutdown", "", http.StatusOK, api.StateRunning, `"via":"acpi"`},
		{http.MethodPut, "/v1/vm/freeze", `{}`, http.StatusConflict, api.StateRunning, `talks to no guest agent`},
		{http.MethodPut, "/v1/vm/unfreeze", "", http.StatusConflict, api.StateRunning, `talks to no guest agent`},
		{http.MethodPut, "/v1/vm/migrate", fmt.Sprintf(`{"to": %q}`, runnertest.DeafTarget(t)), http.StatusAccepted, api.StateMigrating, ""},
		{http.MethodGet, "/v1/vm/migration", "", http.StatusOK, api.StateMigrating, `"active":true`},
		{http.MethodDelete, "/v1/vm/migration", "", http.StatusNoContent, "", ""},
		{http.MethodGet, "/v1/metrics", "", http.StatusOK, "", `"exits_io":`},
		{http.MethodPut, "/v1/vm/stop", "", http.StatusNoContent, "", ""},
	} {
		code, body := c.do(t, tc.method, tc.path, tc.body)
		require.Equal(t, tc.code, code, "%s %s: %s", tc.method, tc.path, body)
		if tc.reply != "" {
			assert.Contains(t, body, tc.reply, "%s %s", tc.method, tc.path)
			assert.True(t, json.Valid([]byte(body)), "%s %s: %q", tc.method, tc.path, body)
		} else {
			assert.Empty(t, body, "%s %s", tc.method, tc.path)
		}
		if tc.state != "" {
			assert.Equal(t, tc.state, state(t, c), "after %s %s", tc.method, tc.path)
		}
	}
	<-v.Exited
	assert.Equal(t, api.StateStopped, state(t, c))
	_, err := os.Stat(filepath.Join(snap, "state.json"))
	assert.NoError(t, err, "the snapshot was written")
}

func TestRoutesRefuseWrongMethodsAndUnknownPaths(t *testing.T) {
	v := runnertest.Spinning(t)
	c := rawClient(v.Socket)
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodPost, "/v1/vm", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/v1/vm", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/vm/pause", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/vm/pause", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/vm/resume", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/vm/stop", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/v1/vm/stop", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/vm/snapshot", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/vm/migrate", http.StatusMethodNotAllowed},
		{http.MethodPut, "/v1/vm/migration", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v1/metrics", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/vm/shutdown", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/vm/freeze", http.StatusMethodNotAllowed},
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/v1", http.StatusNotFound},
		{http.MethodGet, "/v1/vm/", http.StatusNotFound},
		{http.MethodPut, "/v1/vm/reboot", http.StatusNotFound},
		{http.MethodPut, "/v1/vm/pause/now", http.StatusNotFound},
		{http.MethodGet, "/v2/vm", http.StatusNotFound},
	} {
		code, body := c.do(t, tc.method, tc.path, "")
		assert.Equal(t, tc.code, code, "%s %s: %s", tc.method, tc.path, body)
	}
	// None of them reached the VM.
	assert.Equal(t, api.StateRunning, state(t, c))
	code, body := c.do(t, http.MethodGet, "/v1/vm/migration", "")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"active":false`)
}

func TestRoutesRefuseBadBodies(t *testing.T) {
	v := runnertest.Spinning(t)
	c := rawClient(v.Socket)
	dir := filepath.Join(t.TempDir(), "snap")
	huge := fmt.Sprintf(`{"dir": %q}`, "/"+strings.Repeat("a", 70<<10))
	for _, tc := range []struct {
		name, path, body, msg string
	}{
		{"no body", "/v1/vm/snapshot", "", "bad request: EOF"},
		{"truncated", "/v1/vm/snapshot", `{"dir": "` + dir, "bad request: unexpected EOF"},
		{"not an object", "/v1/vm/snapshot", `["` + dir + `"]`, "bad request: json: cannot unmarshal array"},
		{"wrong type", "/v1/vm/snapshot", `{"dir": 5}`, "bad request: json: cannot unmarshal number"},
		{"unknown field", "/v1/vm/snapshot", fmt.Sprintf(`{"dir": %q, "compress": true}`, dir), `unknown field "compress"`},
		{"over the size limit", "/v1/vm/snapshot", huge, "bad request: unexpected EOF"},
		{"no dir", "/v1/vm/snapshot", `{}`, `snapshot needs "dir"`},
		{"migrate: no body", "/v1/vm/migrate", "", "bad request: EOF"},
		{"migrate: not JSON", "/v1/vm/migrate", "tcp:10.0.0.1:4444", "bad request: invalid character"},
		{"migrate: wrong type", "/v1/vm/migrate", `{"to": "unix:/x", "downtime_ms": "300"}`, "bad request: json: cannot unmarshal string"},
		{"migrate: unknown field", "/v1/vm/migrate", `{"to": "unix:/x", "postcopy": true}`, `unknown field "postcopy"`},
		{"migrate: no target", "/v1/vm/migrate", `{}`, `address "": want tcp:HOST:PORT or unix:PATH`},
		{"freeze: negative timeout", "/v1/vm/freeze", `{"unfreeze_timeout_s": -1}`, "must not be negative"},
		{"freeze: unknown field", "/v1/vm/freeze", `{"timeout": 5}`, `unknown field "timeout"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := c.do(t, http.MethodPut, tc.path, tc.body)
			assert.Equal(t, http.StatusBadRequest, code)
			errorReply(t, body, tc.msg)
			assert.Equal(t, api.StateRunning, state(t, c), "the VM is untouched")
		})
	}
	_, err := os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "no snapshot was written")
}

// failVM fails every request the way an implementation's errors map to
// statuses; it stands in only for these error paths.
type failVM struct {
	api.VM
	err error
}

func (v failVM) Pause() error                     { return v.err }
func (v failVM) Resume() error                    { return v.err }
func (v failVM) Stop() error                      { return v.err }
func (v failVM) PowerButton() error               { return v.err }
func (v failVM) Reset() error                     { return v.err }
func (v failVM) SoftReboot() error                { return v.err }
func (v failVM) Migrate(api.MigrateRequest) error { return v.err }
func (v failVM) CancelMigration() error           { return v.err }
func (v failVM) Snapshot(api.SnapshotRequest) (api.SnapshotResult, error) {
	return api.SnapshotResult{}, v.err
}

func TestErrorsMapToStatuses(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("%w: cannot pause", api.ErrConflict), http.StatusConflict},
		{fmt.Errorf("%w: no such thing", api.ErrBadRequest), http.StatusBadRequest},
		{errors.New("KVM_RUN: bad address"), http.StatusInternalServerError},
	} {
		sock := filepath.Join(t.TempDir(), "vmm.sock")
		srv, err := api.Listen(sock, failVM{err: tc.err})
		require.NoError(t, err)
		c := api.NewClient(sock)
		ctx := context.Background()
		_, snapErr := c.Snapshot(ctx, api.SnapshotRequest{Dir: "/d"})
		_, shutdownErr := c.Shutdown(ctx)
		_, rebootErr := c.SoftReboot(ctx)
		for name, err := range map[string]error{
			"pause":    c.Pause(ctx),
			"resume":   c.Resume(ctx),
			"stop":     c.Stop(ctx),
			"button":   c.PowerButton(ctx),
			"reset":    c.Reset(ctx),
			"reboot":   rebootErr,
			"shutdown": shutdownErr,
			"snapshot": snapErr,
			"migrate":  c.Migrate(ctx, api.MigrateRequest{To: "unix:/m.sock"}),
			"cancel":   c.CancelMigration(ctx),
		} {
			var e *api.Error
			require.ErrorAs(t, err, &e, name)
			assert.Equal(t, tc.code, e.Status, name)
			assert.Equal(t, tc.err.Error(), e.Msg, name)
		}
		require.NoError(t, srv.Close())
		_, err = os.Stat(sock)
		assert.ErrorIs(t, err, os.ErrNotExist, "Close removes the socket")
	}
}
