package machine

import (
	"time"

	"github.com/kubevmm/kubevmm/vmm/procmem"
)

// Phase is a step of building or restoring the machine and when it ended:
// the timing points of a report, to see where the time to the first vCPU
// entry goes.
type Phase struct {
	Name string
	At   time.Time
}

func (m *Machine) mark(name string) {
	m.phases = append(m.phases, Phase{Name: name, At: time.Now()})
}

// Phases are the steps that built the machine, in order.
func (m *Machine) Phases() []Phase { return m.phases }

// Entered is when the first vCPU entered the guest (KVM_RUN), zero before.
func (m *Machine) Entered() time.Time { return m.cpus.Entered() }

// GuestRAM is where guest RAM is mapped in this process (for
// procmem.Self).
func (m *Machine) GuestRAM() []procmem.Range { return m.memory.ranges() }
