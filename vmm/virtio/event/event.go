// Package event provides what a virtio device's worker goroutine waits on:
// eventfds (KVM's ioeventfd and irqfd are eventfds) and an epoll loop that
// dispatches readiness to handlers on a single goroutine.
package event

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// FD is a non-blocking eventfd.
type FD struct {
	fd int
}

// NewFD creates an eventfd (non-blocking, close-on-exec).
func NewFD() (*FD, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &FD{fd: fd}, nil
}

// Int is the descriptor, for KVM registration and epoll.
func (e *FD) Int() int { return e.fd }

// Signal adds one to the counter, waking a waiter.
func (e *FD) Signal() error {
	var b [8]byte
	b[0] = 1
	if _, err := unix.Write(e.fd, b[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("signal eventfd: %w", err)
	}
	return nil
}

// Drain resets the counter and reports whether it was non-zero.
func (e *FD) Drain() bool {
	var b [8]byte
	n, err := unix.Read(e.fd, b[:])
	return err == nil && n == 8
}

// Close releases the eventfd.
func (e *FD) Close() error {
	if e.fd < 0 {
		return nil
	}
	err := unix.Close(e.fd)
	e.fd = -1
	return err
}

// Handler is called on the loop's goroutine with the epoll events that
// made fd ready.
type Handler func(events uint32)

// Loop is an epoll loop run by one goroutine. Handlers run one at a time,
// holding the loop's lock, so state they own needs no further locking;
// Do runs a function under the same lock from another goroutine.
type Loop struct {
	epfd     int
	stop     *FD
	mu       sync.Mutex
	handlers map[int]Handler
	done     chan struct{}
	started  bool
	held     atomic.Bool // Hold is in effect: mu is taken on the holder's behalf
}

// NewLoop creates an idle loop.
func NewLoop() (*Loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	stop, err := NewFD()
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	l := &Loop{epfd: epfd, stop: stop, handlers: map[int]Handler{}, done: make(chan struct{})}
	if err := l.add(stop.Int(), unix.EPOLLIN); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

func (l *Loop) add(fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("epoll add fd %d: %w", fd, err)
	}
	return nil
}

// Add watches fd for events (EPOLLIN, EPOLLOUT, EPOLLET, ...) and calls h
// when they occur. Safe to call from a handler.
func (l *Loop) Add(fd int, events uint32, h Handler) error {
	if err := l.add(fd, events); err != nil {
		return err
	}
	l.handlers[fd] = h
	return nil
}

// Modify changes the events watched on fd. Safe to call from a handler.
func (l *Loop) Modify(fd int, events uint32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, fd, &ev); err != nil {
		return fmt.Errorf("epoll mod fd %d: %w", fd, err)
	}
	return nil
}

// Remove stops watching fd. Safe to call from a handler.
func (l *Loop) Remove(fd int) {
	// Fails only for an fd already closed, which epoll has dropped itself.
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	delete(l.handlers, fd)
}

// Start runs the loop on a new goroutine until Stop.
func (l *Loop) Start() {
	l.started = true
	go l.run()
}

func (l *Loop) run() {
	defer close(l.done)
	events := make([]unix.EpollEvent, 32)
	for {
		n, err := unix.EpollWait(l.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return // the epoll fd is broken: nothing sensible left to do
		}
		l.mu.Lock()
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == l.stop.Int() {
				l.mu.Unlock()
				return
			}
			if h, ok := l.handlers[fd]; ok {
				h(ev.Events)
			}
		}
		l.mu.Unlock()
	}
}

// Do runs f while no handler runs (for snapshots and metrics readers).
// Under Hold the loop is already idle and f runs at once: the holder (a
// snapshot or migration) is the one asking.
func (l *Loop) Do(f func()) {
	if l.held.Load() {
		f()
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

// Hold keeps every handler from running until Release, across as many
// calls as the holder needs (a snapshot saves device state, then guest RAM;
// no device may touch either in between).
func (l *Loop) Hold() {
	l.mu.Lock()
	l.held.Store(true)
}

// Release ends Hold.
func (l *Loop) Release() {
	l.held.Store(false)
	l.mu.Unlock()
}

// Stop ends the loop, waits for its goroutine and releases the epoll fd.
// The registered fds are not closed: their owners close them.
func (l *Loop) Stop() {
	if l.started {
		_ = l.stop.Signal() // fails only once closed, at teardown
		<-l.done
	}
	l.close()
}

func (l *Loop) close() {
	unix.Close(l.epfd)
	l.stop.Close()
}
