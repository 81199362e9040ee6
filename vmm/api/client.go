package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Client talks to a VMM's control socket.
type Client struct {
	path string
	hc   *http.Client
}

// NewClient returns a client for the socket at path.
func NewClient(path string) *Client {
	return NewDialClient(path, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	})
}

// NewDialClient returns a client that reaches the VMM through dial, for a
// caller that must not connect by path (virt-handler: the socket is in a
// directory its launcher controls); name says which socket in errors.
func NewDialClient(name string, dial func(context.Context) (net.Conn, error)) *Client {
	return &Client{
		path: name,
		hc: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		}},
	}
}

// Error is an error reply from the VMM.
type Error struct {
	Status int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://vmm"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("VMM control socket %s: %w", c.path, err)
	}
	defer func() { _ = resp.Body.Close() }() // read side: nothing to lose
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("VMM control socket %s: %w", c.path, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		return &Error{Status: resp.StatusCode, Msg: e.Error}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("VMM reply to %s %s: %w", method, path, err)
		}
	}
	return nil
}

// Info reads the VM's state.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var i Info
	return i, c.do(ctx, http.MethodGet, "/v1/vm", nil, &i)
}

// Pause pauses the VM.
func (c *Client) Pause(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "/v1/vm/pause", nil, nil)
}

// Resume resumes the VM.
func (c *Client) Resume(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "/v1/vm/resume", nil, nil)
}

// Stop ends the VM.
func (c *Client) Stop(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "/v1/vm/stop", nil, nil)
}

// PowerButton presses the guest's ACPI power button.
func (c *Client) PowerButton(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "/v1/vm/powerbutton", nil, nil)
}

// Reset resets the VM: the guest boots again.
func (c *Client) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "/v1/vm/reset", nil, nil)
}

// SoftReboot asks the guest to reboot: its agent, else the power button
// and a new boot when it powers off.
func (c *Client) SoftReboot(ctx context.Context) (ShutdownResult, error) {
	var r ShutdownResult
	return r, c.do(ctx, http.MethodPut, "/v1/vm/softreboot", nil, &r)
}

// Shutdown asks the guest to shut down (its agent, else the power button).
func (c *Client) Shutdown(ctx context.Context) (ShutdownResult, error) {
	var r ShutdownResult
	return r, c.do(ctx, http.MethodPut, "/v1/vm/shutdown", nil, &r)
}

// Freeze freezes the guest's filesystems through its agent.
func (c *Client) Freeze(ctx context.Context, req FreezeRequest) error {
	return c.do(ctx, http.MethodPut, "/v1/vm/freeze", req, nil)
}

// Unfreeze thaws them.
func (c *Client) Unfreeze(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "/v1/vm/unfreeze", nil, nil)
}

// Snapshot writes a snapshot.
func (c *Client) Snapshot(ctx context.Context, req SnapshotRequest) (SnapshotResult, error) {
	var r SnapshotResult
	return r, c.do(ctx, http.MethodPut, "/v1/vm/snapshot", req, &r)
}

// Migrate starts a live migration.
func (c *Client) Migrate(ctx context.Context, req MigrateRequest) error {
	return c.do(ctx, http.MethodPut, "/v1/vm/migrate", req, nil)
}

// Migration reads the migration status.
func (c *Client) Migration(ctx context.Context) (MigrationStatus, error) {
	var s MigrationStatus
	return s, c.do(ctx, http.MethodGet, "/v1/vm/migration", nil, &s)
}

// CancelMigration cancels a running migration.
func (c *Client) CancelMigration(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/v1/vm/migration", nil, nil)
}

// Metrics reads the VMM's counters.
func (c *Client) Metrics(ctx context.Context) (map[string]any, error) {
	var m map[string]any
	return m, c.do(ctx, http.MethodGet, "/v1/metrics", nil, &m)
}

// WaitMigration polls the migration status every interval until it is no
// longer active, calling progress with each status. (The VMM has no
// streaming endpoint; a progress line every half second is what users read.)
func (c *Client) WaitMigration(ctx context.Context, interval time.Duration, progress func(MigrationStatus)) (MigrationStatus, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s, err := c.Migration(ctx)
		if err != nil {
			return s, err
		}
		if progress != nil {
			progress(s)
		}
		if !s.Active {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-t.C:
		}
	}
}
