package machine

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/arch/x86"
	"github.com/kubevmm/kubevmm/vmm/kvm"
)

// cpuManager owns the vCPUs: their KVM objects and the OS threads that run
// them, pausing and resuming them, throttling them for auto-converge, and
// their part of the VM's state (Save/Restore) with the MSR list it holds.
// What a vCPU's exit means is the Machine's (exits).
type cpuManager struct {
	sys    *kvm.System
	vm     *kvm.VM
	exits  vcpuExits
	log    *slog.Logger
	count  int
	nested bool // the CPUID policy of a host that emulates guest kernel mode

	vcpus   []*vcpu        // set up by create, then fixed; each guards its run state
	running sync.WaitGroup // the vCPU threads of the current Run

	entered   atomic.Pointer[time.Time] // first KVM_RUN of any vCPU
	enteredCh chan struct{}             // closed then

	msrMu   sync.Mutex
	msrList []uint32 // MSRs saved in states, probed on first use

	throttleMu   sync.Mutex
	throttleStop chan struct{}
	throttleDone chan struct{}
}

func newCPUManager(sys *kvm.System, vm *kvm.VM, count int, nested bool, exits vcpuExits, log *slog.Logger) *cpuManager {
	return &cpuManager{sys: sys, vm: vm, count: count, nested: nested, exits: exits, log: log, enteredCh: make(chan struct{})}
}

// create makes the vCPUs with this host's CPUID policy; with entry != nil
// (a boot) the BSP is put at the kernel's entry (a restore overwrites all
// of it with the saved state). It returns the BSP's CPUID.
func (c *cpuManager) create(entry *uint64) ([]kvm.CPUIDEntry, error) {
	supported, err := c.sys.SupportedCPUID()
	if err != nil {
		return nil, err
	}
	policy := x86.CPUIDPolicy{NumCPUs: c.count, EmulatedKernelMode: c.nested}
	var bsp []kvm.CPUIDEntry
	for i := 0; i < c.count; i++ {
		kc, err := c.vm.CreateVCPU(i)
		if err != nil {
			return nil, err
		}
		v := &vcpu{mgr: c, c: kc, id: i}
		v.cond = sync.NewCond(&v.mu)
		c.vcpus = append(c.vcpus, v)
		cpuid := policy.ForVCPU(supported, i)
		if err := kc.SetCPUID2(cpuid); err != nil {
			return nil, err
		}
		if i == 0 {
			bsp = cpuid
		}
		if err := x86.SetupMSRs(kc); err != nil {
			return nil, err
		}
		if err := x86.SetupFPU(kc); err != nil {
			return nil, err
		}
		if err := x86.SetupLAPIC(kc); err != nil {
			return nil, err
		}
		// Application processors wait in the in-kernel LAPIC for the
		// guest's INIT/SIPI; only the BSP starts at the kernel entry.
		if i == 0 && entry != nil {
			if err := x86.SetupLongMode(kc, *entry); err != nil {
				return nil, err
			}
		}
	}
	return bsp, nil
}

// start runs every vCPU on its own thread; wait returns once they have
// all left.
func (c *cpuManager) start() {
	for _, v := range c.vcpus {
		c.running.Add(1)
		go v.loop()
	}
}

func (c *cpuManager) wait() { c.running.Wait() }

// stop asks every vCPU thread to leave.
func (c *cpuManager) stop() {
	for _, v := range c.vcpus {
		v.request(reqStop)
	}
}

// enteredGuest records the first KVM_RUN.
func (c *cpuManager) enteredGuest() {
	if c.entered.Load() == nil {
		now := time.Now()
		if c.entered.CompareAndSwap(nil, &now) {
			close(c.enteredCh)
		}
	}
}

// firstEntry is closed when the first vCPU enters the guest.
func (c *cpuManager) firstEntry() <-chan struct{} { return c.enteredCh }

// Entered is when the first vCPU entered the guest, zero before.
func (c *cpuManager) Entered() time.Time {
	if t := c.entered.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// Pause stops every vCPU at an instruction boundary and returns once none
// is executing guest code.
func (c *cpuManager) Pause() error {
	for _, v := range c.vcpus {
		v.request(reqPause)
	}
	for _, v := range c.vcpus {
		v.mu.Lock()
		for v.started && !v.paused && !v.exited {
			v.cond.Wait()
		}
		exited := v.exited
		v.mu.Unlock()
		if exited {
			return fmt.Errorf("vCPU %d has stopped: the VM is no longer running", v.id)
		}
	}
	// Tell a kvmclock guest its vCPUs were stopped on purpose, so its
	// soft-lockup watchdog doesn't fire when they run again.
	for _, v := range c.vcpus {
		v.mu.Lock()
		started := v.started // set by the vCPU thread as it starts
		v.mu.Unlock()
		if err := v.c.KVMClockCtrl(); err != nil && started {
			c.log.Warn("KVM_KVMCLOCK_CTRL failed", "vcpu", v.id, "error", err)
		}
	}
	return nil
}

// Resume lets paused vCPUs run again.
func (c *cpuManager) Resume() {
	for _, v := range c.vcpus {
		v.resume()
	}
}

// Paused reports whether every vCPU is parked.
func (c *cpuManager) Paused() bool {
	for _, v := range c.vcpus {
		v.mu.Lock()
		p := v.paused || !v.started
		v.mu.Unlock()
		if !p {
			return false
		}
	}
	return true
}

// Throttle holds the vCPUs for the given fraction of every 100 ms
// (auto-converge); 0 stops throttling. It never leaves the VM paused.
func (c *cpuManager) Throttle(fraction float64) {
	c.throttleMu.Lock()
	defer c.throttleMu.Unlock()
	if c.throttleStop != nil {
		close(c.throttleStop)
		<-c.throttleDone
		c.throttleStop, c.throttleDone = nil, nil
	}
	if fraction <= 0 {
		return
	}
	fraction = min(fraction, 0.99)
	stop, done := make(chan struct{}), make(chan struct{})
	c.throttleStop, c.throttleDone = stop, done
	const period = 100 * time.Millisecond
	held := time.Duration(float64(period) * fraction)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(period - held):
			}
			if err := c.Pause(); err != nil {
				return // the VM ended
			}
			select {
			case <-stop:
				c.Resume()
				return
			case <-time.After(held):
			}
			c.Resume()
		}
	}()
}

// signal interrupts every running vCPU's KVM_RUN without a request: the
// thread re-enters the guest after the Machine saw the interruption (the
// profiler's sample).
func (c *cpuManager) signal() {
	for _, v := range c.vcpus {
		v.mu.Lock()
		tid := v.tid
		v.mu.Unlock()
		if tid != 0 {
			unix.Tgkill(unix.Getpid(), tid, unix.SIGURG)
		}
	}
}

// threadSeconds is the CPU time of each running vCPU's thread, by vCPU id:
// the guest's time in KVM_RUN and the VMM's exit handling on that thread
// (what libvirt reports as a vCPU's time for QEMU's vCPU threads).
func (c *cpuManager) threadSeconds() map[string]float64 {
	out := map[string]float64{}
	for _, v := range c.vcpus {
		v.mu.Lock()
		tid, live := v.tid, v.started && !v.exited
		v.mu.Unlock()
		if !live {
			continue
		}
		// The thread's CPU clock: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
		// of <linux/posix-timers.h>, valid for threads of this process.
		var ts unix.Timespec
		if unix.ClockGettime(int32(^tid<<3|6), &ts) == nil {
			out[strconv.Itoa(v.id)] = float64(ts.Nano()) / 1e9
		}
	}
	return out
}

// savedMSRs lists the MSRs this host's KVM lets us read back, probed once
// on kc: KVM_GET_MSRS stops at the first MSR it refuses, so each is tried
// alone.
func (c *cpuManager) savedMSRs(kc *kvm.VCPU) ([]uint32, error) {
	c.msrMu.Lock()
	defer c.msrMu.Unlock()
	if c.msrList != nil {
		return c.msrList, nil
	}
	all, err := c.sys.MSRIndexList()
	if err != nil {
		return nil, err
	}
	var ok []uint32
	for _, idx := range all {
		if _, err := kc.GetMSR(idx); err == nil {
			ok = append(ok, idx)
		}
	}
	c.msrList = ok
	return ok, nil
}

// Save captures every vCPU. Their threads must be parked.
func (c *cpuManager) Save() ([]*VCPUState, error) {
	var out []*VCPUState
	for _, v := range c.vcpus {
		s, err := v.save()
		if err != nil {
			return nil, fmt.Errorf("vCPU %d: %w", v.id, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// Restore loads saved states into the fresh vCPUs, in parallel: each
// one's ioctls are on its own fd, independent of the others', so a VM
// with many reaches its first entry sooner.
func (c *cpuManager) Restore(states []*VCPUState) error {
	if len(states) != len(c.vcpus) {
		return fmt.Errorf("state has %d vCPUs, the VM %d", len(states), len(c.vcpus))
	}
	errs := make([]error, len(states))
	var wg sync.WaitGroup
	for i, vs := range states {
		wg.Go(func() { errs[i] = restoreVCPU(c.vcpus[i].c, vs) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("vCPU %d: %w", i, err)
		}
	}
	return nil
}

// reset loads the power-on states back, with the BSP at entry. KVM
// refuses to change a vCPU's CPUID once it has run: the guest keeps the
// CPUID it has (a restored guest's is the saved one), and its TSC
// frequency.
func (c *cpuManager) reset(powerOn []*VCPUState, entry uint64) error {
	for i, v := range c.vcpus {
		s := *powerOn[i]
		cpuid, err := v.c.GetCPUID2()
		if err != nil {
			return fmt.Errorf("vCPU %d: %w", i, err)
		}
		s.CPUID, s.TSCKHz = cpuid, 0
		if err := restoreVCPU(v.c, &s); err != nil {
			return fmt.Errorf("vCPU %d: %w", i, err)
		}
	}
	if err := x86.SetupLongMode(c.vcpus[0].c, entry); err != nil {
		return fmt.Errorf("vCPU 0: %w", err)
	}
	return nil
}

// rearm makes the vCPUs' threads startable again after a Run ended: no
// request, none started. The caller holds Machine.exitMu, so no stop
// races with it.
func (c *cpuManager) rearm() {
	for _, v := range c.vcpus {
		v.mu.Lock()
		v.req, v.paused, v.exited, v.started, v.tid = reqNone, false, false, false, 0
		v.mu.Unlock()
	}
}

// close releases the vCPUs; their threads have left.
func (c *cpuManager) close() {
	for _, v := range c.vcpus {
		v.c.Close()
	}
	c.vcpus = nil
}
