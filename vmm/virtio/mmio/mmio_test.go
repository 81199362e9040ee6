package mmio_test

import (
	"encoding/binary"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/kvm"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/mmio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue/queuetest"
	"github.com/kubevmm/kubevmm/vmm/virtio/rng"
)

// fakeVM stands in for KVM: it records registrations, and the test waits on
// the irqfd itself.
type fakeVM struct {
	mu       sync.Mutex
	irqfd    int
	gsi      uint32
	ioevents []kvm.IOEventFD
}

func (f *fakeVM) AssignIOEventFD(e kvm.IOEventFD) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ioevents = append(f.ioevents, e)
	return nil
}

func (f *fakeVM) DeassignIOEventFD(e kvm.IOEventFD) error { return nil }

func (f *fakeVM) IRQFD(efd int, gsi uint32, _ int) error {
	f.irqfd, f.gsi = efd, gsi
	return nil
}

func (f *fakeVM) DeassignIRQFD(int, uint32) error { return nil }

// waitIRQ blocks until the device raises its interrupt. A device that
// never does fails the test after a minute (a hang guard, not a speed
// limit: devices answer in microseconds).
func (f *fakeVM) waitIRQ(t *testing.T) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(f.irqfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 60_000)
		if err == unix.EINTR {
			continue
		}
		require.NoError(t, err)
		require.Equal(t, 1, n, "the device never raised its interrupt")
		var b [8]byte
		unix.Read(f.irqfd, b[:])
		return
	}
}

const base = 0xd0000000

type drv struct {
	t  *testing.T
	tr *mmio.Transport
}

func (d drv) r(off uint64) uint32 {
	var b [4]byte
	d.tr.Read(off, b[:])
	return binary.LittleEndian.Uint32(b[:])
}

func (d drv) w(off uint64, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	d.tr.Write(off, b[:])
}

// negotiate does what Linux's virtio_mmio + virtio core do up to
// FEATURES_OK, accepting features.
func (d drv) negotiate(features uint64) bool {
	d.w(0x70, 0)
	d.w(0x70, virtio.StatusAcknowledge)
	d.w(0x70, virtio.StatusAcknowledge|virtio.StatusDriver)
	d.w(0x24, 0)
	d.w(0x20, uint32(features))
	d.w(0x24, 1)
	d.w(0x20, uint32(features>>32))
	d.w(0x70, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK)
	return d.r(0x70)&virtio.StatusFeaturesOK != 0
}

func (d drv) setupQueue(i uint32, q *queuetest.Driver) {
	d.w(0x30, i)
	require.Zero(d.t, d.r(0x44), "queue already ready")
	require.NotZero(d.t, d.r(0x34))
	c := q.Cfg
	d.w(0x38, uint32(c.Size))
	d.w(0x80, uint32(c.DescTable))
	d.w(0x84, uint32(c.DescTable>>32))
	d.w(0x90, uint32(c.AvailRing))
	d.w(0x94, uint32(c.AvailRing>>32))
	d.w(0xa0, uint32(c.UsedRing))
	d.w(0xa4, uint32(c.UsedRing>>32))
	d.w(0x44, 1)
}

func (d drv) driverOK() {
	d.w(0x70, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK|virtio.StatusDriverOK)
}

func newRNG(t *testing.T) (*fakeVM, *mmio.Transport, drv, *queuetest.Driver) {
	mem := queuetest.NewMem(t, 1<<20)
	vm := &fakeVM{}
	tr, err := mmio.New(rng.New(), mem, vm, mmio.Config{Base: base, GSI: 5})
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	return vm, tr, drv{t, tr}, queuetest.NewDriver(t, mem, 0x10000, 0x40000, 16)
}

func TestIdentityAndWiring(t *testing.T) {
	vm, tr, d, _ := newRNG(t)
	assert.Equal(t, uint32(0x74726976), d.r(0x000))
	assert.Equal(t, uint32(2), d.r(0x004))
	assert.Equal(t, uint32(virtio.TypeRNG), d.r(0x008))
	assert.Equal(t, "virtio_mmio.device=4K@0xd0000000:5", tr.Cmdline())
	assert.Equal(t, uint32(5), vm.gsi)
	require.Len(t, vm.ioevents, 1)
	ev := vm.ioevents[0]
	assert.Equal(t, uint64(base+0x50), ev.Addr)
	assert.Equal(t, uint32(4), ev.Len)
	require.NotNil(t, ev.Datamatch)
	assert.Equal(t, uint64(0), *ev.Datamatch)
	d.w(0x14, 1)
	assert.Equal(t, uint32(1), d.r(0x10), "VERSION_1 is bit 32")
	d.w(0x14, 0)
	assert.NotZero(t, d.r(0x10)&(1<<29), "EVENT_IDX offered")
	assert.Zero(t, d.r(0x10)&(1<<34>>32), "RING_PACKED not offered")
	assert.Equal(t, uint32(0xffffffff), d.r(0xb0), "no shared memory regions")
	// wrong-width register access is refused, not fatal
	var b [2]byte
	tr.Read(0x70, b[:])
	assert.Equal(t, uint64(1), tr.Metrics.BadAccesses.Load())
}

func TestFeatureNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		features uint64
		ok       bool
	}{
		{"version 1", virtio.FVersion1, true},
		{"version 1 + event idx + indirect", virtio.FVersion1 | virtio.FRingEventIdx | virtio.FRingIndirectDesc, true},
		{"legacy driver", virtio.FRingEventIdx, false},
		{"unoffered feature", virtio.FVersion1 | virtio.FRingPacked, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, d, _ := newRNG(t)
			assert.Equal(t, tc.ok, d.negotiate(tc.features))
		})
	}
}

func TestStatusStateMachine(t *testing.T) {
	_, tr, d, _ := newRNG(t)
	d.w(0x70, virtio.StatusDriver) // skipping ACKNOWLEDGE
	assert.Zero(t, d.r(0x70))
	d.w(0x70, virtio.StatusAcknowledge)
	d.w(0x70, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusDriverOK) // skipping FEATURES_OK
	assert.Equal(t, uint32(virtio.StatusAcknowledge), d.r(0x70))
	assert.Equal(t, uint64(2), tr.Metrics.BadStatus.Load())
	// queue registers can't be written before FEATURES_OK
	d.w(0x30, 0)
	d.w(0x38, 8)
	assert.Equal(t, uint64(1), tr.Metrics.BadAccesses.Load())
}

func TestServeResetAndReactivate(t *testing.T) {
	vm, tr, d, q := newRNG(t)
	for round := 0; round < 2; round++ {
		require.True(t, d.negotiate(virtio.FVersion1|virtio.FRingEventIdx))
		d.setupQueue(0, q)
		d.driverOK()
		assert.Equal(t, uint32(0xf), d.r(0x70))
		head, addrs := q.Add(queuetest.Buf{Write: true, Len: 64})
		d.w(0x50, 0) // kick (the slow path: no KVM ioeventfd here)
		vm.waitIRQ(t)
		assert.Equal(t, uint32(mmio.IntUsedBuffer), d.r(0x60))
		d.w(0x64, mmio.IntUsedBuffer)
		assert.Zero(t, d.r(0x60))
		h, n, ok := q.Used()
		require.True(t, ok)
		assert.Equal(t, head, h)
		assert.Equal(t, uint32(64), n)
		assert.NotEqual(t, make([]byte, 64), q.Read(addrs[0], 64))
		// reset: everything back to zero, ready for a new driver
		d.w(0x70, 0)
		assert.Zero(t, d.r(0x70))
		d.w(0x30, 0)
		assert.Zero(t, d.r(0x44))
		q = queuetest.NewDriver(t, q.Mem, 0x10000, 0x40000, 16) // fresh rings
	}
	assert.Equal(t, uint64(2), tr.Metrics.Activations.Load())
}

func TestBadQueueNeedsReset(t *testing.T) {
	_, tr, d, q := newRNG(t)
	require.True(t, d.negotiate(virtio.FVersion1))
	q.Cfg.UsedRing = 1 << 40 // outside guest RAM
	d.setupQueue(0, q)
	d.driverOK()
	assert.NotZero(t, d.r(0x70)&virtio.StatusDeviceNeedsReset)
	assert.NotZero(t, d.r(0x60)&mmio.IntConfigChange)
	assert.Equal(t, uint64(1), tr.Metrics.ActivateFails.Load())
	d.w(0x70, 0)
	assert.Zero(t, d.r(0x70))
}

// A broken available ring (head index out of range) marks the device
// NEEDS_RESET instead of crashing or spinning.
func TestBrokenRingNeedsReset(t *testing.T) {
	vm, _, d, q := newRNG(t)
	require.True(t, d.negotiate(virtio.FVersion1))
	d.setupQueue(0, q)
	d.driverOK()
	q.Publish(999)
	d.w(0x50, 0)
	vm.waitIRQ(t)
	assert.NotZero(t, d.r(0x70)&virtio.StatusDeviceNeedsReset)
}

func TestSaveRestore(t *testing.T) {
	vm, tr, d, q := newRNG(t)
	require.True(t, d.negotiate(virtio.FVersion1|virtio.FRingEventIdx|virtio.FRingIndirectDesc))
	d.setupQueue(0, q)
	d.driverOK()
	q.Add(queuetest.Buf{Write: true, Len: 8})
	d.w(0x50, 0)
	vm.waitIRQ(t)
	_, _, ok := q.Used()
	require.True(t, ok)
	d.w(0x64, mmio.IntUsedBuffer)

	s := tr.Save()
	require.Len(t, s.Active, 1)
	assert.Equal(t, uint16(1), s.Active[0].NextAvail)
	require.NoError(t, tr.Close())

	vm2 := &fakeVM{}
	tr2, err := mmio.New(rng.New(), q.Mem, vm2, mmio.Config{Base: base, GSI: 5})
	require.NoError(t, err)
	defer tr2.Close()
	require.NoError(t, tr2.Restore(s))
	d2 := drv{t, tr2}
	assert.Equal(t, uint32(0xf), d2.r(0x70))
	head, _ := q.Add(queuetest.Buf{Write: true, Len: 8})
	d2.w(0x50, 0)
	vm2.waitIRQ(t)
	h, n, ok := q.Used()
	require.True(t, ok)
	assert.Equal(t, head, h)
	assert.Equal(t, uint32(8), n)

	bad := s
	bad.Version = 99
	assert.Error(t, tr2.Restore(bad))
}

// A chain the driver announced to the saved device but that it never
// served (the kick went to the old process) is served after a restore
// with no new kick: otherwise a migrated guest's disk waits forever.
func TestRestoreServesWhatWasPendingAtSave(t *testing.T) {
	_, tr, d, q := newRNG(t)
	require.True(t, d.negotiate(virtio.FVersion1|virtio.FRingEventIdx))
	d.setupQueue(0, q)
	d.driverOK()
	head, _ := q.Add(queuetest.Buf{Write: true, Len: 8}) // announced, not served
	s := tr.Save()
	require.NoError(t, tr.Close())

	vm2 := &fakeVM{}
	tr2, err := mmio.New(rng.New(), q.Mem, vm2, mmio.Config{Base: base, GSI: 5})
	require.NoError(t, err)
	defer tr2.Close()
	require.NoError(t, tr2.Restore(s))
	vm2.waitIRQ(t)
	h, n, ok := q.Used()
	require.True(t, ok)
	assert.Equal(t, head, h)
	assert.Equal(t, uint32(8), n)
}

// fakeDev is a device whose interrupt the test drives by hand.
type fakeDev struct {
	irq    virtio.Interrupt
	config [4]byte
	resets int
}

func (f *fakeDev) Type() virtio.DeviceType             { return virtio.TypeConsole }
func (f *fakeDev) Features() uint64                    { return virtio.FVersion1 }
func (f *fakeDev) QueueMaxSizes() []uint16             { return []uint16{8, 8} }
func (f *fakeDev) ReadConfig(off uint64, data []byte)  { virtio.ReadConfigBytes(f.config[:], off, data) }
func (f *fakeDev) WriteConfig(off uint64, data []byte) { copy(f.config[off:], data) }
func (f *fakeDev) Activate(a virtio.Activation) error  { f.irq = a.Interrupt; return nil }
func (f *fakeDev) Reset()                              { f.resets++; f.irq = nil }
func (f *fakeDev) SaveState() (json.RawMessage, error) { return json.RawMessage("{}"), nil }
func (f *fakeDev) RestoreState(json.RawMessage) error  { return nil }
func (f *fakeDev) Counters() map[string]uint64         { return nil }

func TestConfigGenerationAndNeedsReset(t *testing.T) {
	mem := queuetest.NewMem(t, 1<<20)
	vm := &fakeVM{}
	dev := &fakeDev{config: [4]byte{1, 2, 3, 4}}
	tr, err := mmio.New(dev, mem, vm, mmio.Config{Base: base, GSI: 6})
	require.NoError(t, err)
	defer tr.Close()
	assert.Len(t, vm.ioevents, 2, "one ioeventfd per queue")
	assert.Equal(t, uint64(1), *vm.ioevents[1].Datamatch)
	d := drv{t, tr}
	require.True(t, d.negotiate(virtio.FVersion1))
	d.setupQueue(0, queuetest.NewDriver(t, mem, 0x10000, 0x10000, 8))
	d.setupQueue(1, queuetest.NewDriver(t, mem, 0x20000, 0x10000, 8))
	d.driverOK()
	require.NotNil(t, dev.irq)

	// config space: any width, past the end reads zero
	b := make([]byte, 2)
	tr.Read(0x101, b)
	assert.Equal(t, []byte{2, 3}, b)
	tr.Read(0x103, b)
	assert.Equal(t, []byte{4, 0}, b)

	gen := d.r(0xfc)
	dev.irq.ConfigChanged()
	vm.waitIRQ(t)
	assert.Equal(t, gen+1, d.r(0xfc))
	assert.Equal(t, uint32(mmio.IntConfigChange), d.r(0x60))

	dev.irq.Fail(assert.AnError)
	vm.waitIRQ(t)
	assert.NotZero(t, d.r(0x70)&virtio.StatusDeviceNeedsReset)
	assert.Equal(t, uint64(1), tr.Metrics.NeedsResetEvents.Load())
	d.w(0x70, 0)
	assert.Zero(t, d.r(0x70), "reset clears NEEDS_RESET")
	assert.Zero(t, d.r(0x60))
	assert.Equal(t, 1, dev.resets)

	// a queue register write after DRIVER_OK is refused
	require.True(t, d.negotiate(virtio.FVersion1))
	d.setupQueue(0, queuetest.NewDriver(t, mem, 0x10000, 0x10000, 8))
	d.setupQueue(1, queuetest.NewDriver(t, mem, 0x20000, 0x10000, 8))
	d.driverOK()
	bad := tr.Metrics.BadAccesses.Load()
	d.w(0x30, 0)
	d.w(0x38, 4)
	assert.Equal(t, bad+1, tr.Metrics.BadAccesses.Load())
}
