package machine

import (
	"sort"
	"sync"
	"time"
)

// Profiler samples where the guest's vCPUs are (RIP) at a fixed rate. On
// hosts that emulate guest kernel mode, boot time is spent wherever the
// guest kernel runs most instructions; this shows where, by address (map it
// to symbols with the kernel's System.map).
type Profiler struct {
	mu      sync.Mutex
	samples map[uint64]int
	stop    chan struct{}
	done    chan struct{}
}

// StartProfile starts sampling every period. Sampling interrupts KVM_RUN
// with a signal; the vCPU reads its RIP and re-enters the guest.
func (m *Machine) StartProfile(period time.Duration) *Profiler {
	p := &Profiler{samples: map[uint64]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	m.profiler.Store(p)
	go func() {
		defer close(p.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			m.cpus.signal()
		}
	}()
	return p
}

func (p *Profiler) record(rip uint64) {
	p.mu.Lock()
	p.samples[rip]++
	p.mu.Unlock()
}

// Sample is a guest address and how often a vCPU was found there.
type Sample struct {
	RIP   uint64
	Count int
}

// Stop ends sampling and returns the samples, most frequent first.
func (p *Profiler) Stop() []Sample {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Sample, 0, len(p.samples))
	for rip, n := range p.samples {
		out = append(out, Sample{rip, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}
