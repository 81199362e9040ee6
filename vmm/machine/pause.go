package machine

import "fmt"

// Pause stops every vCPU at an instruction boundary and returns once none
// is executing guest code. Devices keep their state; callers that need a
// quiescent machine (snapshots) pause devices separately.
func (m *Machine) Pause() error {
	for _, v := range m.vcpus {
		v.request(reqPause)
	}
	for _, v := range m.vcpus {
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
	for _, v := range m.vcpus {
		v.mu.Lock()
		started := v.started // set by the vCPU thread as it starts
		v.mu.Unlock()
		if err := v.c.KVMClockCtrl(); err != nil && started {
			m.Log().Warn("KVM_KVMCLOCK_CTRL failed", "vcpu", v.id, "error", err)
		}
	}
	return nil
}

// Resume lets paused vCPUs run again.
func (m *Machine) Resume() {
	for _, v := range m.vcpus {
		v.resume()
	}
}

// Paused reports whether every vCPU is parked.
func (m *Machine) Paused() bool {
	for _, v := range m.vcpus {
		v.mu.Lock()
		p := v.paused || !v.started
		v.mu.Unlock()
		if !p {
			return false
		}
	}
	return true
}
