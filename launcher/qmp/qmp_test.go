package qmp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// generous: how long a step that should succeed may take on a loaded
// 2-core CI machine. Nothing waits for it unless something is broken.
const generous = 60 * time.Second

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// connectFake dials the fake monitor and completes the handshake.
func connectFake(t *testing.T) (*Client, *fakeConn, *fakeMonitor) {
	t.Helper()
	f := newFakeMonitor(t)
	type result struct {
		c   *Client
		err error
	}
	dialed := make(chan result, 1)
	go func() {
		c, err := Dial(testCtx(t, generous), f.path)
		dialed <- result{c, err}
	}()
	conn := f.accept()
	conn.handshake()
	r := <-dialed
	require.NoError(t, r.err)
	t.Cleanup(func() { r.c.Close() })
	return r.c, conn, f
}

// execAsync runs Execute in the background and returns where its error lands.
func execAsync(ctx context.Context, c *Client, cmd string, args, reply any) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Execute(ctx, cmd, args, reply) }()
	return done
}

func TestHandshakeAndTypedReply(t *testing.T) {
	c, conn, _ := connectFake(t)
	assert.Equal(t, "7.2.0", c.Greeting().Version.String())
	assert.Equal(t, []string{"oob"}, c.Greeting().Capabilities)

	var st StatusInfo
	done := execAsync(testCtx(t, generous), c, "query-status", nil, &st)
	cmd := conn.recv()
	assert.Equal(t, "query-status", cmd.Execute)
	assert.Empty(t, cmd.Arguments, "no arguments object when args is nil")
	conn.reply(cmd.ID, map[string]any{"running": false, "status": "paused", "singlestep": false})
	require.NoError(t, <-done)
	assert.Equal(t, StatusInfo{Running: false, Status: "paused"}, st)

	// Arguments are sent as given.
	done = execAsync(testCtx(t, generous), c, "migrate-set-parameters", map[string]any{"downtime-limit": 300}, nil)
	cmd = conn.recv()
	assert.JSONEq(t, `{"downtime-limit": 300}`, string(cmd.Arguments))
	conn.reply(cmd.ID, map[string]any{})
	require.NoError(t, <-done)
}

func TestErrorReplies(t *testing.T) {
	c, conn, _ := connectFake(t)
	for _, tc := range []struct {
		class ErrorClass
		desc  string
	}{
		{GenericError, "Parameter 'downtime_limit' expects an integer in the range of 0 to 2000 seconds"},
		{CommandNotFound, "The command no-such-command has not been found"},
		{DeviceNotActive, "No balloon device has been activated"},
		{DeviceNotFound, "Device 'nic9' not found"},
		{KVMMissingCap, "Using KVM without synchronous MMU, balloon unavailable"},
	} {
		t.Run(string(tc.class), func(t *testing.T) {
			done := execAsync(testCtx(t, generous), c, "some-command", nil, nil)
			cmd := conn.recv()
			conn.replyError(cmd.ID, string(tc.class), tc.desc)
			err := <-done
			var qe *Error
			require.ErrorAs(t, err, &qe)
			assert.Equal(t, &Error{Command: "some-command", Class: tc.class, Desc: tc.desc}, qe)
			assert.True(t, IsClass(err, tc.class))
			assert.Contains(t, err.Error(), tc.desc)
			assert.NotErrorIs(t, err, ErrClosed, "a refused command leaves the monitor usable")
		})
	}
	// The connection is still usable after refusals.
	done := execAsync(testCtx(t, generous), c, "query-status", nil, nil)
	conn.reply(conn.recv().ID, map[string]any{"running": true, "status": "running"})
	require.NoError(t, <-done)
}

func TestEventsAreDeliveredInOrderWithTimestamps(t *testing.T) {
	c, conn, _ := connectFake(t)
	all := c.Subscribe()
	migration := c.Subscribe(EventMigration, EventMigrationPass)
	// A subscriber that never reads must not hold up replies or others.
	idle := c.Subscribe()
	defer idle.Close()

	done := execAsync(testCtx(t, generous), c, "migrate", map[string]string{"uri": "tcp:127.0.0.1:4444"}, nil)
	cmd := conn.recv()
	// Events may arrive before the reply of the command that caused them.
	conn.event(EventMigration, 1700000000, 123456, map[string]string{"status": "setup"})
	conn.event(EventStop, 1700000001, 5, nil)
	conn.reply(cmd.ID, map[string]any{})
	require.NoError(t, <-done)
	for i := 1; i <= 100; i++ {
		conn.event(EventMigrationPass, 1700000002, int64(i), map[string]int{"pass": i})
	}
	conn.event(EventMigration, 1700000003, 0, map[string]string{"status": "completed"})

	ctx := testCtx(t, generous)
	ev, err := all.WaitFor(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, EventMigration, ev.Name)
	assert.Equal(t, time.Unix(1700000000, 123456000), ev.Time)
	var md MigrationData
	require.NoError(t, ev.DecodeData(&md))
	assert.Equal(t, "setup", md.Status)

	ev, err = all.WaitFor(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, EventStop, ev.Name)
	assert.Error(t, ev.DecodeData(&md), "STOP carries no data")

	// The filtered subscription skips STOP and sees every pass in order.
	ev, err = migration.WaitFor(ctx, nil)
	require.NoError(t, err)
	assert.Equal(t, EventMigration, ev.Name)
	for i := 1; i <= 100; i++ {
		ev, err = migration.WaitFor(ctx, nil)
		require.NoError(t, err)
		var pd MigrationPassData
		require.NoError(t, ev.DecodeData(&pd))
		require.Equal(t, i, pd.Pass)
	}
	ev, err = migration.WaitFor(ctx, func(e Event) bool { return e.Name == EventMigration })
	require.NoError(t, err)
	require.NoError(t, ev.DecodeData(&md))
	assert.Equal(t, "completed", md.Status)
}

func TestHungMonitor(t *testing.T) {
	t.Run("no greeting", func(t *testing.T) {
		f := newFakeMonitor(t)
		dialed := make(chan error, 1)
		go func() {
			_, err := Dial(testCtx(t, 300*time.Millisecond), f.path)
			dialed <- err
		}()
		f.accept() // accepts, then says nothing
		err := <-dialed
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "greeting")
		assert.Contains(t, err.Error(), f.path)
	})

	t.Run("capabilities never answered", func(t *testing.T) {
		f := newFakeMonitor(t)
		dialed := make(chan error, 1)
		go func() {
			_, err := Dial(testCtx(t, 300*time.Millisecond), f.path)
			dialed <- err
		}()
		conn := f.accept()
		conn.sendRaw(fakeGreeting)
		assert.Equal(t, "qmp_capabilities", conn.recv().Execute)
		err := <-dialed
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "capability negotiation")
	})

	t.Run("command never answered, late reply discarded", func(t *testing.T) {
		c, conn, _ := connectFake(t)
		done := execAsync(testCtx(t, 300*time.Millisecond), c, "query-status", nil, nil)
		stale := conn.recv()
		err := <-done
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "query-status")
		assert.Contains(t, err.Error(), "no reply from monitor")

		// The monitor wakes up: its late reply must not be taken as the
		// reply of the next command.
		var v Version
		done = execAsync(testCtx(t, generous), c, "query-version", nil, &v)
		next := conn.recv()
		conn.reply(stale.ID, map[string]any{"running": true, "status": "running"})
		conn.reply(next.ID, map[string]any{"qemu": map[string]int{"major": 7, "minor": 2, "micro": 9}, "package": ""})
		require.NoError(t, <-done)
		assert.Equal(t, "7.2.9", v.String())
	})

	t.Run("context ended before sending", func(t *testing.T) {
		c, conn, _ := connectFake(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, c.Execute(ctx, "query-status", nil, nil), context.Canceled)
		// Nothing was written: the connection is intact.
		done := execAsync(testCtx(t, generous), c, "query-version", nil, nil)
		cmd := conn.recv()
		assert.Equal(t, "query-version", cmd.Execute)
		conn.reply(cmd.ID, map[string]any{})
		require.NoError(t, <-done)
	})

	t.Run("cancelled by the caller", func(t *testing.T) {
		c, conn, _ := connectFake(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := execAsync(ctx, c, "query-status", nil, nil)
		conn.recv()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}

func TestClosedMonitor(t *testing.T) {
	t.Run("pending commands fail naming the monitor", func(t *testing.T) {
		c, conn, f := connectFake(t)
		sub := c.Subscribe()
		first := execAsync(testCtx(t, generous), c, "query-status", nil, nil)
		second := execAsync(testCtx(t, generous), c, "query-migrate", nil, nil)
		conn.recv()
		conn.recv()
		conn.conn.Close() // QEMU died

		for _, done := range []<-chan error{first, second} {
			err := <-done
			require.ErrorIs(t, err, ErrClosed)
			var ce *ClosedError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, f.path, ce.Monitor)
			assert.Contains(t, err.Error(), f.path)
		}
		<-c.Done()
		require.ErrorIs(t, c.Err(), ErrClosed)

		// Later commands fail at once; subscriptions end.
		require.ErrorIs(t, c.Execute(testCtx(t, generous), "query-status", nil, nil), ErrClosed)
		_, err := sub.WaitFor(testCtx(t, generous), nil)
		require.ErrorIs(t, err, ErrClosed)
		_, ok := <-c.Subscribe().C()
		assert.False(t, ok, "subscribing to a closed client gives an ended subscription")
	})

	t.Run("events before the end are still delivered", func(t *testing.T) {
		c, conn, _ := connectFake(t)
		sub := c.Subscribe(EventShutdown)
		conn.event(EventShutdown, 1700000000, 0, map[string]any{"guest": true, "reason": "guest-reset"})
		conn.conn.Close()
		<-c.Done()
		ev, err := sub.WaitFor(testCtx(t, generous), nil)
		require.NoError(t, err)
		var sd ShutdownData
		require.NoError(t, ev.DecodeData(&sd))
		assert.Equal(t, ShutdownData{Guest: true, Reason: "guest-reset"}, sd)
		_, err = sub.WaitFor(testCtx(t, generous), nil)
		require.ErrorIs(t, err, ErrClosed)
	})

	t.Run("protocol garbage ends the connection", func(t *testing.T) {
		for _, tc := range []struct{ name, line, want string }{
			{"not json", `this is not json`, "invalid character"},
			{"unknown message", `{"foo": 1}`, "neither a reply nor an event"},
			{"numeric id", `{"return": {}, "id": 7}`, "unexpected id"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c, conn, _ := connectFake(t)
				done := execAsync(testCtx(t, generous), c, "query-status", nil, nil)
				conn.recv()
				conn.sendRaw(tc.line)
				err := <-done
				require.ErrorIs(t, err, ErrClosed)
				assert.Contains(t, err.Error(), tc.want)
			})
		}
	})

	t.Run("Close fails pending commands", func(t *testing.T) {
		c, conn, _ := connectFake(t)
		done := execAsync(testCtx(t, generous), c, "query-status", nil, nil)
		conn.recv()
		require.NoError(t, c.Close())
		require.NoError(t, c.Close(), "closing twice is harmless")
		err := <-done
		require.ErrorIs(t, err, ErrClosed)
		assert.Contains(t, err.Error(), "closed by client")
	})
}

func TestDialErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(c *fakeConn)
		want  string
	}{
		{"not a greeting", func(c *fakeConn) { c.sendRaw(`{"return": {}}`) }, "not a QMP greeting"},
		{"closed before greeting", func(c *fakeConn) { c.conn.Close() }, "reading the greeting"},
		{"capabilities refused", func(c *fakeConn) {
			c.sendRaw(fakeGreeting)
			c.replyError(c.recv().ID, "GenericError", "Capabilities negotiation is already complete")
		}, "Capabilities negotiation is already complete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeMonitor(t)
			dialed := make(chan error, 1)
			go func() {
				_, err := Dial(testCtx(t, generous), f.path)
				dialed <- err
			}()
			tc.serve(f.accept())
			err := <-dialed
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), f.path)
		})
	}

	t.Run("no socket", func(t *testing.T) {
		path := fmt.Sprintf("%s/missing.sock", t.TempDir())
		_, err := Dial(testCtx(t, generous), path)
		require.Error(t, err)
		assert.Contains(t, err.Error(), path)
	})
}

func TestArgumentsThatDoNotEncode(t *testing.T) {
	c, _, _ := connectFake(t)
	err := c.Execute(testCtx(t, generous), "x", map[string]any{"f": func() {}}, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "encoding arguments")
	var syntax *json.UnsupportedTypeError
	assert.True(t, errors.As(err, &syntax))
}

// TestExecuteWithFileNeedsUnixSocket: a client on a connection that cannot
// carry descriptors says so, sends nothing, and stays usable.
func TestExecuteWithFileNeedsUnixSocket(t *testing.T) {
	client, server := net.Pipe()
	t.Cleanup(func() { server.Close() })
	conn := &fakeConn{t: t, conn: server, dec: json.NewDecoder(server)}
	type result struct {
		c   *Client
		err error
	}
	dialed := make(chan result, 1)
	go func() {
		c, err := NewClient(testCtx(t, generous), client, "pipe")
		dialed <- result{c, err}
	}()
	conn.handshake()
	r := <-dialed
	require.NoError(t, r.err)
	c := r.c
	t.Cleanup(func() { c.Close() })

	f, err := os.Open(os.DevNull)
	require.NoError(t, err)
	defer f.Close()
	err = c.ExecuteWithFile(testCtx(t, generous), "add-fd", nil, nil, f)
	require.ErrorContains(t, err, "unix socket")
	require.ErrorContains(t, err, "pipe")

	done := execAsync(testCtx(t, generous), c, "query-status", nil, nil)
	cmd := conn.recv()
	assert.Equal(t, "query-status", cmd.Execute, "nothing was sent for the refused command")
	conn.reply(cmd.ID, map[string]any{"running": true, "status": "running"})
	require.NoError(t, <-done)
}
