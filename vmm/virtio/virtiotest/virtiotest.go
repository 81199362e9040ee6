// Package virtiotest activates a virtio device directly (no transport) on
// real guest memory for device tests, and records its interrupts.
package virtiotest

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/memory"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/event"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
)

// Interrupt records what a device signals. Besides the channels it
// signals FD, an eventfd, as the transport signals its KVM irqfd: a
// benchmark's driver waits on that, so the device pays what it pays in a
// VMM.
type Interrupt struct {
	Used   chan struct{}
	Failed chan error
	FD     *event.FD
}

// UsedBuffer implements virtio.Interrupt.
func (i *Interrupt) UsedBuffer() {
	_ = i.FD.Signal() // fails only once closed, at teardown
	select {
	case i.Used <- struct{}{}:
	default: // one pending wake-up is enough
	}
}

// ConfigChanged implements virtio.Interrupt.
func (i *Interrupt) ConfigChanged() {}

// Fail implements virtio.Interrupt.
func (i *Interrupt) Fail(err error) {
	defer func() { _ = i.FD.Signal() }() // wakes WaitInterrupt, which reports err
	select {
	case i.Failed <- err:
	default:
	}
}

// Harness is an activated device with a test driver per queue.
type Harness struct {
	t      testing.TB
	Mem    *memory.Guest
	Dev    virtio.Device
	Queues []*queuetest.Driver
	// Active are the device's side of the queues, as activated.
	Active []*queue.Queue
	Notify []*event.FD
	IRQ    *Interrupt
}

// Activate negotiates features (masked by what the device offers) and
// starts dev with one test driver per queue, each in its own 1 MiB of a
// 64 MiB guest.
func Activate(t testing.TB, dev virtio.Device, features uint64) *Harness {
	t.Helper()
	mem := queuetest.NewMem(t, 64<<20)
	irq, err := event.NewFD()
	require.NoError(t, err)
	t.Cleanup(func() { irq.Close() })
	h := &Harness{t: t, Mem: mem, Dev: dev, IRQ: &Interrupt{Used: make(chan struct{}, 1), Failed: make(chan error, 1), FD: irq}}
	features &= dev.Features()
	opt := queue.Options{EventIdx: features&virtio.FRingEventIdx != 0, Indirect: features&virtio.FRingIndirectDesc != 0}
	var qs []*queue.Queue
	for i, max := range dev.QueueMaxSizes() {
		size := min(max, 256)
		d := queuetest.NewDriver(t, mem, uint64(i+1)<<20, 1<<20, size)
		q, err := queue.New(mem, d.Cfg, max, opt)
		require.NoError(t, err)
		fd, err := event.NewFD()
		require.NoError(t, err)
		t.Cleanup(func() { fd.Close() })
		h.Queues = append(h.Queues, d)
		h.Notify = append(h.Notify, fd)
		qs = append(qs, q)
	}
	h.Active = qs
	require.NoError(t, dev.Activate(virtio.Activation{Mem: mem, Features: features, Queues: qs, Notify: h.Notify, Interrupt: h.IRQ}))
	t.Cleanup(dev.Reset)
	return h
}

// Kick notifies queue i.
func (h *Harness) Kick(i int) { require.NoError(h.t, h.Notify[i].Signal()) }

// WaitUsed kicks queue i (if kick) and waits until the device has
// returned n chains on it, returning their (head, length) pairs.
func (h *Harness) WaitUsed(i, n int, kick bool) [][2]uint32 {
	h.t.Helper()
	if kick {
		h.Kick(i)
	}
	var out [][2]uint32
	for len(out) < n {
		if head, l, ok := h.Queues[i].Used(); ok {
			out = append(out, [2]uint32{uint32(head), l})
			continue
		}
		select {
		case <-h.IRQ.Used:
		case err := <-h.IRQ.Failed:
			h.t.Fatalf("device failed: %v", err)
		}
	}
	return out
}

// RequireTracked runs op (kicks and waits, no driver writes) and fails the
// test for any guest page the device changed without marking it dirty for
// live migration (queuetest.RequireTracked).
func (h *Harness) RequireTracked(op func()) {
	h.t.Helper()
	queuetest.RequireTracked(h.t, h.Mem, op)
}

// WaitInterrupt blocks until the device has raised an interrupt since the
// last call (on IRQ.FD, as a guest waits on its irqfd) and fails the test
// if the device failed instead.
func (h *Harness) WaitInterrupt() {
	h.t.Helper()
	fds := []unix.PollFd{{Fd: int32(h.IRQ.FD.Int()), Events: unix.POLLIN}}
	for !h.IRQ.FD.Drain() {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			h.t.Fatalf("poll the interrupt eventfd: %v", err)
		}
	}
	select {
	case err := <-h.IRQ.Failed:
		h.t.Fatalf("device failed: %v", err)
	default:
	}
}

// CPU measures what a device costs: the process's CPU time less that of
// the calling goroutine's OS thread, which StartCPU locks. A benchmark
// runs its driver (and whatever feeds or drains the device from the host
// side) on that thread, so what remains is the device's worker, the
// kernel work its system calls do, and the Go runtime serving it.
type CPU struct {
	process, driver time.Duration
}

// StartCPU locks the calling goroutine to its thread and starts counting.
func StartCPU(t testing.TB) *CPU {
	runtime.LockOSThread()
	c := &CPU{process: rusage(t, unix.RUSAGE_SELF), driver: rusage(t, unix.RUSAGE_THREAD)}
	return c
}

// Stop ends the measurement, unlocks the thread and returns the device's
// CPU time.
func (c *CPU) Stop(t testing.TB) time.Duration {
	driver := rusage(t, unix.RUSAGE_THREAD) - c.driver
	process := rusage(t, unix.RUSAGE_SELF) - c.process
	runtime.UnlockOSThread()
	return process - driver
}

func rusage(t testing.TB, who int) time.Duration {
	var r unix.Rusage
	if err := unix.Getrusage(who, &r); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

// ReportCPU reports a device's CPU time per MiB and per request moved in
// a benchmark: the figures test/bench's devices section collects.
func ReportCPU(b *testing.B, cpu time.Duration, bytes int64, requests int) {
	b.SetBytes(bytes / int64(max(b.N, 1)))
	if bytes > 0 {
		b.ReportMetric(cpu.Seconds()*1e3/(float64(bytes)/(1<<20)), "vmm-ms/MiB")
	}
	if requests > 0 {
		b.ReportMetric(cpu.Seconds()*1e6/float64(requests), "vmm-µs/req")
	}
}
