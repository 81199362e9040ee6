package qmp

import (
	"context"
	"time"
)

// StatusInfo is the reply of query-status.
type StatusInfo struct {
	Running bool `json:"running"`
	// Status is QEMU's run state: running, paused, prelaunch, inmigrate,
	// postmigrate, finish-migrate, shutdown, guest-panicked, internal-error,
	// io-error, suspended, watchdog, colo, restore-vm, save-vm, debug.
	Status string `json:"status"`
}

// QueryStatus runs query-status.
func (c *Client) QueryStatus(ctx context.Context) (StatusInfo, error) {
	var s StatusInfo
	err := c.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// MigrationInfo is the reply of query-migrate (the fields we use). Times are
// in milliseconds as QEMU reports them; see the methods for time.Durations.
type MigrationInfo struct {
	// Status: none, setup, active, pre-switchover, device, postcopy-*,
	// cancelling, cancelled, completed, failed, wait-unplug.
	Status           string          `json:"status"`
	RAM              *MigrationStats `json:"ram,omitempty"`
	TotalTimeMs      int64           `json:"total-time,omitempty"`
	DowntimeMs       int64           `json:"downtime,omitempty"`
	ExpectedDowntime int64           `json:"expected-downtime,omitempty"`
	SetupTimeMs      int64           `json:"setup-time,omitempty"`
	ErrorDesc        string          `json:"error-desc,omitempty"`
	// SocketAddress is where an incoming migration listens (the real port
	// when the URI asked for port 0).
	SocketAddress []SocketAddress `json:"socket-address,omitempty"`
}

// TotalTime is how long the migration ran (so far, or in all).
func (m MigrationInfo) TotalTime() time.Duration {
	return time.Duration(m.TotalTimeMs) * time.Millisecond
}

// Downtime is how long the guest was stopped for the final switchover.
func (m MigrationInfo) Downtime() time.Duration {
	return time.Duration(m.DowntimeMs) * time.Millisecond
}

// MigrationStats is the "ram" part of query-migrate.
type MigrationStats struct {
	Transferred      int64   `json:"transferred"`
	Remaining        int64   `json:"remaining"`
	Total            int64   `json:"total"`
	Duplicate        int64   `json:"duplicate"`
	Normal           int64   `json:"normal"`
	NormalBytes      int64   `json:"normal-bytes"`
	DirtyPagesRate   int64   `json:"dirty-pages-rate"`
	Mbps             float64 `json:"mbps"`
	DirtySyncCount   int64   `json:"dirty-sync-count"`
	PostcopyRequests int64   `json:"postcopy-requests"`
	PageSize         int64   `json:"page-size"`
}

// SocketAddress is QEMU's SocketAddress union (inet and unix members).
type SocketAddress struct {
	Type string `json:"type"` // inet, unix, vsock, fd
	Host string `json:"host,omitempty"`
	Port string `json:"port,omitempty"`
	Path string `json:"path,omitempty"`
}

// QueryMigrate runs query-migrate.
func (c *Client) QueryMigrate(ctx context.Context) (MigrationInfo, error) {
	var m MigrationInfo
	err := c.Execute(ctx, "query-migrate", nil, &m)
	return m, err
}
