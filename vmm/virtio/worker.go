package virtio

import (
	"errors"
	"sync"

	"github.com/kubevmm/kubevmm/vmm/virtio/event"
)

// Watch is one file descriptor an active device's worker waits on (a queue
// kick, a tap, a socket) and what to do when it is ready.
type Watch struct {
	FD     int
	Events uint32 // epoll events, e.g. unix.EPOLLIN
	Handle event.Handler
}

// Worker is the goroutine an active device does all its queue work on: an
// event loop over the device's Watches. Devices embed it; it gives them
// Quiesce (the transport's Save reads queue positions under it) and Loop
// (the machine holds every device still across a snapshot or the end of a
// migration).
type Worker struct {
	mu   sync.Mutex
	loop *event.Loop
}

// StartWorker starts the worker on ws.
func (w *Worker) StartWorker(ws ...Watch) error {
	loop, err := event.NewLoop()
	if err != nil {
		return err
	}
	var errs []error
	for _, x := range ws {
		errs = append(errs, loop.Add(x.FD, x.Events, x.Handle))
	}
	if err := errors.Join(errs...); err != nil {
		loop.Stop()
		return err
	}
	w.mu.Lock()
	w.loop = loop
	w.mu.Unlock()
	loop.Start()
	return nil
}

// StopWorker stops the worker, waiting for a handler that is running, and
// reports whether it was running.
func (w *Worker) StopWorker() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.loop == nil {
		return false
	}
	w.loop.Stop()
	w.loop = nil
	return true
}

// Quiesce runs f with the worker idle.
func (w *Worker) Quiesce(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.loop == nil {
		f()
		return
	}
	w.loop.Do(f)
}

// Loop is the worker's event loop while it runs (nil otherwise).
func (w *Worker) Loop() *event.Loop {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.loop
}
