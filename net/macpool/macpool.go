// Package macpool is kubemacpool's allocator: a range of unicast MAC
// addresses, who holds which, the next free one. It knows nothing of the
// API server: the webhook (package net/kubemacpool) asks it for MACs and
// tells it what the VirtualMachines hold.
//
// A MAC has owners (a VM's "namespace/name"); one held by two owners is a
// collision, which the pool does not prevent (a user may ask for a MAC in
// use) but reports. An owner may be pending: an admission whose object has
// no name yet (generateName); a real owner that later holds the same MAC
// takes it over.
package macpool

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	v1 "github.com/kubevmm/kubevmm/api/core/v1"
)

// MAC is a 48-bit MAC address as a number (its first octet the highest).
type MAC uint64

// String is the lowercase colon form, as KubeVirt writes it.
func (m MAC) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", byte(m>>40), byte(m>>32), byte(m>>24), byte(m>>16), byte(m>>8), byte(m))
}

// Multicast reports the group bit of the first octet.
func (m MAC) Multicast() bool { return m>>40&1 == 1 }

// ParseMAC parses a 48-bit MAC in any form net.ParseMAC accepts (colons,
// hyphens, dots) and refuses a multicast one: a NIC's address is unicast.
func ParseMAC(s string) (MAC, error) {
	hw, err := net.ParseMAC(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a MAC address", s)
	}
	if len(hw) != 6 {
		return 0, fmt.Errorf("%q is not a 48-bit MAC address", s)
	}
	var m MAC
	for _, b := range hw {
		m = m<<8 | MAC(b)
	}
	if m.Multicast() {
		return 0, fmt.Errorf("%q is a multicast MAC address, a NIC's must be unicast", s)
	}
	return m, nil
}

// Range is the pool's addresses, Start to End inclusive.
type Range struct{ Start, End MAC }

// ParseRange parses kubemacpool's range: both ends or neither (the zero
// Range, ok false), each unicast, End after Start.
func ParseRange(start, end string) (r Range, ok bool, err error) {
	if start == "" && end == "" {
		return Range{}, false, nil
	}
	if start == "" || end == "" {
		return Range{}, false, errors.New("the MAC range needs both its start and its end")
	}
	if r.Start, err = ParseMAC(start); err != nil {
		return Range{}, false, fmt.Errorf("range start: %w", err)
	}
	if r.End, err = ParseMAC(end); err != nil {
		return Range{}, false, fmt.Errorf("range end: %w", err)
	}
	if r.End <= r.Start {
		return Range{}, false, fmt.Errorf("range end %s is not after its start %s", r.End, r.Start)
	}
	return r, true, nil
}

// RandomRange is upstream's default when no range is configured:
// 02:XX:XX:00:00:00-02:XX:XX:FF:FF:FF with random XX:XX, a locally
// administered unicast prefix. The caller keeps it: a new one at each
// start would hand out MACs another range already gave.
func RandomRange() (Range, error) {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Range{}, fmt.Errorf("random MAC range: %w", err)
	}
	start := MAC(0x02)<<40 | MAC(b[0])<<32 | MAC(b[1])<<24
	return Range{Start: start, End: start | 0xffffff}, nil
}

// ErrExhausted is returned when every MAC of the range is held.
var ErrExhausted = errors.New("the MAC pool is exhausted: every address of its range is in use")

// Pool hands out MACs of a range, each once while it is held. Safe for
// concurrent use.
type Pool struct {
	mu      sync.Mutex
	r       Range
	next    MAC                         // where the next search starts
	owners  map[MAC][]string            // sorted
	held    map[string]map[MAC]struct{} // by owner
	pending map[string]bool
	// reserved are the MACs admissions gave owners whose VM, as stored,
	// may not have them (Confirm says), until when they may wait.
	reserved map[string]map[MAC]time.Time
}

// New is an empty pool of r.
func New(r Range) *Pool {
	return &Pool{r: r, next: r.Start, owners: map[MAC][]string{}, held: map[string]map[MAC]struct{}{}, pending: map[string]bool{},
		reserved: map[string]map[MAC]time.Time{}}
}

// Range is the pool's current range.
func (p *Pool) Range() Range {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.r
}

// SetRange changes the range; what is held stays held (a MAC outside the
// new range is still never handed out twice).
func (p *Pool) SetRange(r Range) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.r != r {
		p.r, p.next = r, r.Start
	}
}

// Allocate gives owner the next free MAC of the range after the last one
// handed out, wrapping around to the start.
func (p *Pool) Allocate(owner string) (MAC, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	size := uint64(p.r.End - p.r.Start + 1)
	m := p.next
	if m < p.r.Start || m > p.r.End {
		m = p.r.Start
	}
	for range size {
		if len(p.owners[m]) == 0 {
			p.hold(owner, m)
			p.next = m + 1
			if p.next > p.r.End {
				p.next = p.r.Start
			}
			return m, nil
		}
		m++
		if m > p.r.End {
			m = p.r.Start
		}
	}
	return 0, ErrExhausted
}

// Hold marks m held by owner as well and returns its other owners (a
// collision when there are any).
func (p *Pool) Hold(owner string, m MAC) (others []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold(owner, m)
	return p.others(owner, m)
}

// MarkPending says owner is an admission whose object has no name yet:
// a real owner that holds one of its MACs takes it over (Set).
func (p *Pool) MarkPending(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending[owner] = true
}

// Set makes owner hold exactly macs (a VM as stored: what it no longer
// has is free again); pending owners of them let them go.
func (p *Pool) Set(owner string, macs []MAC) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release(owner)
	for _, m := range macs {
		for _, o := range p.others(owner, m) {
			if p.pending[o] {
				p.drop(o, m)
			}
		}
		p.hold(owner, m)
	}
}

// Confirm is Set for a VM as stored (the watch saw it): it holds macs
// until it changes or is deleted (Release), none of them reserved.
func (p *Pool) Confirm(owner string, macs []MAC) {
	p.Set(owner, macs)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.reserved, owner)
}

// Reserve says an admission gave owner macs that its VM, as stored, may
// never have (another webhook may refuse it, or the caller was no API
// server at all): unless the VM is stored with them (Confirm) by
// deadline, Expire frees them, as upstream's reservations expire. Only
// the MACs an admission added are reserved: what a stored VM held before
// stays its own.
func (p *Pool) Reserve(owner string, macs []MAC, deadline time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range macs {
		if _, ok := p.held[owner][m]; !ok {
			continue
		}
		if p.reserved[owner] == nil {
			p.reserved[owner] = map[MAC]time.Time{}
		}
		p.reserved[owner][m] = deadline
	}
}

// Expire frees the reserved MACs whose reservation ended before now and
// returns their owners, sorted.
func (p *Pool) Expire(now time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for o, ms := range p.reserved {
		n := 0
		for m, d := range ms {
			if d.Before(now) {
				delete(ms, m)
				if _, ok := p.held[o][m]; ok {
					p.drop(o, m)
					n++
				}
			}
		}
		if len(ms) == 0 {
			delete(p.reserved, o)
		}
		if n > 0 {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// Release frees what owner holds (its VM is deleted).
func (p *Pool) Release(owner string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.release(owner)
}

// Held is what owner holds, in order.
func (p *Pool) Held(owner string) []MAC {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]MAC, 0, len(p.held[owner]))
	for m := range p.held[owner] {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Owners are m's owners, sorted.
func (p *Pool) Owners(m MAC) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.owners[m])
}

// Collisions are the MACs held by more than one owner, with how many.
func (p *Pool) Collisions() map[MAC]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[MAC]int{}
	for m, o := range p.owners {
		if len(o) > 1 {
			out[m] = len(o)
		}
	}
	return out
}

// Rebuild makes the pool hold what vms hold, as after a restart: every
// interface MAC of each VM's template, under the VM's "namespace/name".
// MACs that do not parse (the webhook never admitted them: written while
// it was off or opted out) are left out, each reported.
func (p *Pool) Rebuild(vms []v1.VirtualMachine) []error {
	var errs []error
	for i := range vms {
		macs, bad := VMMACs(&vms[i])
		errs = append(errs, bad...)
		p.Confirm(Owner(vms[i].Namespace, vms[i].Name), macs)
	}
	return errs
}

// Owner is a VM's owner key.
func Owner(namespace, name string) string { return namespace + "/" + name }

// VMMACs are the MACs a VM's interfaces ask for; an unparsable one is an
// error naming its interface.
func VMMACs(vm *v1.VirtualMachine) ([]MAC, []error) {
	if vm.Spec.Template == nil {
		return nil, nil
	}
	var macs []MAC
	var errs []error
	for _, iface := range vm.Spec.Template.Spec.Domain.Devices.Interfaces {
		if iface.MacAddress == "" {
			continue
		}
		m, err := ParseMAC(iface.MacAddress)
		if err != nil {
			errs = append(errs, fmt.Errorf("VM %s/%s interface %s: %w", vm.Namespace, vm.Name, iface.Name, err))
			continue
		}
		macs = append(macs, m)
	}
	return macs, errs
}

// InterfaceError is an interface's refused MAC.
type InterfaceError struct {
	Index int // in spec.template.spec.domain.devices.interfaces
	Name  string
	Err   error
}

// Field is the refused field's path.
func (e InterfaceError) Field() string {
	return fmt.Sprintf("spec.template.spec.domain.devices.interfaces[%d].macAddress", e.Index)
}

func (e InterfaceError) Error() string {
	return fmt.Sprintf("%s (interface %s): %v", e.Field(), e.Name, e.Err)
}

// CheckInterfaces refuses what kubemacpool refuses in one VM: a MAC that
// does not parse or is multicast, and a MAC asked for by two interfaces
// (in any spelling).
func CheckInterfaces(ifaces []v1.Interface) []InterfaceError {
	var errs []InterfaceError
	first := map[MAC]int{}
	for i, iface := range ifaces {
		if iface.MacAddress == "" {
			continue
		}
		m, err := ParseMAC(iface.MacAddress)
		if err != nil {
			errs = append(errs, InterfaceError{Index: i, Name: iface.Name, Err: err})
			continue
		}
		if j, dup := first[m]; dup {
			errs = append(errs, InterfaceError{Index: i, Name: iface.Name,
				Err: fmt.Errorf("MAC %s is already interface %s's in this VM", iface.MacAddress, ifaces[j].Name)})
			continue
		}
		first[m] = i
	}
	return errs
}

func (p *Pool) hold(owner string, m MAC) {
	if p.held[owner] == nil {
		p.held[owner] = map[MAC]struct{}{}
	}
	if _, ok := p.held[owner][m]; ok {
		return
	}
	p.held[owner][m] = struct{}{}
	p.owners[m] = append(p.owners[m], owner)
	slices.Sort(p.owners[m])
}

func (p *Pool) drop(owner string, m MAC) {
	delete(p.held[owner], m)
	if len(p.held[owner]) == 0 {
		delete(p.held, owner)
		delete(p.pending, owner)
	}
	o := slices.DeleteFunc(p.owners[m], func(s string) bool { return s == owner })
	if len(o) == 0 {
		delete(p.owners, m)
	} else {
		p.owners[m] = o
	}
}

func (p *Pool) release(owner string) {
	for m := range p.held[owner] {
		p.drop(owner, m)
	}
	delete(p.pending, owner)
	delete(p.reserved, owner)
}

func (p *Pool) others(owner string, m MAC) []string {
	var out []string
	for _, o := range p.owners[m] {
		if o != owner {
			out = append(out, o)
		}
	}
	return out
}
