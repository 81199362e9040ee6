package qmp

import (
	"context"
	"errors"
	"sync"
)

var errSubscriptionClosed = errors.New("qmp: subscription closed")

// Well-known event names (qapi/run-state.json, qapi/migration.json,
// qapi/qdev.json).
const (
	EventStop          = "STOP"
	EventResume        = "RESUME"
	EventShutdown      = "SHUTDOWN"
	EventPowerdown     = "POWERDOWN"
	EventReset         = "RESET"
	EventMigration     = "MIGRATION"
	EventMigrationPass = "MIGRATION_PASS"
	EventGuestPanicked = "GUEST_PANICKED"
	EventDeviceDeleted = "DEVICE_DELETED"
)

// ShutdownData is the data of a SHUTDOWN event.
type ShutdownData struct {
	Guest  bool   `json:"guest"`  // the guest asked for it (poweroff, reset with -no-reboot)
	Reason string `json:"reason"` // guest-shutdown, guest-reset, host-qmp-quit, host-signal, ...
}

// MigrationData is the data of a MIGRATION event.
type MigrationData struct {
	Status string `json:"status"`
}

// MigrationPassData is the data of a MIGRATION_PASS event.
type MigrationPassData struct {
	Pass int `json:"pass"`
}

// Subscription receives the events published after it was created, in
// order. Nothing is dropped and the client's reader never waits for a slow
// subscriber: undelivered events queue in memory until taken or until the
// subscription is closed.
type Subscription struct {
	c      *Client
	filter map[string]bool // nil: every event
	ch     chan Event

	mu     sync.Mutex
	queue  []Event
	ended  bool // no more events will be queued
	wake   chan struct{}
	closed chan struct{} // Close called
	once   sync.Once
}

// Subscribe returns a subscription to the named events (all events when no
// name is given). Subscribe before the action whose events you wait for.
// On a closed client the subscription is already ended.
func (c *Client) Subscribe(names ...string) *Subscription {
	s := &Subscription{
		c:      c,
		ch:     make(chan Event),
		wake:   make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
	if len(names) > 0 {
		s.filter = make(map[string]bool, len(names))
		for _, n := range names {
			s.filter[n] = true
		}
	}
	c.mu.Lock()
	if c.subs == nil {
		s.ended = true
	} else {
		c.subs[s] = struct{}{}
	}
	c.mu.Unlock()
	go s.pump()
	return s
}

// C delivers the events; it is closed after the connection ended and every
// queued event was delivered, or when Close is called.
func (s *Subscription) C() <-chan Event { return s.ch }

// Next returns the next event. ok is false once the subscription is over
// (connection ended and queue drained, or Close); err is ctx's error when ctx
// ended first.
func (s *Subscription) Next(ctx context.Context) (ev Event, ok bool, err error) {
	select {
	case ev, ok := <-s.ch:
		return ev, ok, nil
	case <-ctx.Done():
		return Event{}, false, context.Cause(ctx)
	}
}

// Close stops delivery and releases the queue.
func (s *Subscription) Close() {
	s.once.Do(func() { close(s.closed) })
	s.c.mu.Lock()
	if s.c.subs != nil {
		delete(s.c.subs, s)
	}
	s.c.mu.Unlock()
}

// push is called by the client's reader; it never blocks.
func (s *Subscription) push(ev Event) {
	s.mu.Lock()
	s.queue = append(s.queue, ev)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// finish marks the end of the stream: the pump closes C after draining.
func (s *Subscription) finish() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Subscription) pump() {
	defer close(s.ch)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			ended := s.ended
			s.mu.Unlock()
			if ended {
				return
			}
			select {
			case <-s.wake:
				continue
			case <-s.closed:
				return
			}
		}
		ev := s.queue[0]
		s.queue[0] = Event{}
		s.queue = s.queue[1:]
		s.mu.Unlock()
		select {
		case s.ch <- ev:
		case <-s.closed:
			return
		}
	}
}

func (c *Client) publish(ev Event) {
	c.mu.Lock()
	var targets []*Subscription
	for s := range c.subs {
		if s.filter == nil || s.filter[ev.Name] {
			targets = append(targets, s)
		}
	}
	c.mu.Unlock()
	for _, s := range targets {
		s.push(ev)
	}
}

// WaitFor returns the first event for which match is true (any event when
// match is nil). It fails with ctx's error when ctx ends first, and with the
// client's *ClosedError when the connection ended before such an event.
func (s *Subscription) WaitFor(ctx context.Context, match func(Event) bool) (Event, error) {
	for {
		ev, ok, err := s.Next(ctx)
		if err != nil {
			return Event{}, err
		}
		if !ok {
			if err := s.c.Err(); err != nil {
				return Event{}, err
			}
			return Event{}, errSubscriptionClosed
		}
		if match == nil || match(ev) {
			return ev, nil
		}
	}
}
