// Package scsi is virtio-scsi (virtio 1.2 section 5.6): a SCSI host
// controller whose disks come and go while the guest runs, as KubeVirt's
// hot-plugged volumes do. Each disk is LUN 0 of its own target (as QEMU's
// scsi-hd devices on a virtio-scsi controller are addressed), targets
// 0..MaxTargets-1 on channel 0. Attach and Detach tell the driver through
// the event queue (VIRTIO_SCSI_T_TRANSPORT_RESET with reason RESCAN or
// REMOVED, VIRTIO_SCSI_F_HOTPLUG); disk.go is the SCSI command set the
// disks answer.
//
// Requests are served to completion on the device's one worker, so "no
// request in flight" is the worker being idle: Detach takes the disk out
// under Quiesce, and only then flushes and closes it.
package scsi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// Feature bits (5.6.3).
const (
	FInOut   = 1 << 0
	FHotplug = 1 << 1
	FChange  = 1 << 2
)

// Virtqueues: control, event, then the request queues (one here).
const (
	ctlQueue = 0
	evtQueue = 1
	reqQueue = 2
)

// Response codes (5.6.6.1).
const (
	RespOK        = 0
	RespBadTarget = 3
	RespFailure   = 9
)

// Event types and transport-reset reasons (5.6.6.3).
const (
	EventNoEvent        = 0
	EventTransportReset = 1
	EventsMissed        = 0x80000000
	ReasonRescan        = 1 // VIRTIO_SCSI_EVT_RESET_RESCAN (0 is a hard reset)
	ReasonRemoved       = 2
)

// Control queue requests (5.6.6.2).
const (
	ctlTMF       = 0
	ctlANQuery   = 1
	ctlANSubsrcb = 2
)

const (
	// MaxTargets is how many disks one controller holds. Linux scans every
	// target when its driver loads (each one an INQUIRY answered
	// BAD_TARGET when empty, guest kernel time on a nested host), so a
	// few slots, not QEMU's 256.
	MaxTargets = 16

	queueSize  = 128
	segMax     = queueSize - 2 // the request header and the response take two descriptors
	cmdPerLUN  = queueSize
	eventSize  = 16
	configSize = 36

	// The defaults the driver may change (5.6.4: sense_size and
	// cdb_size are driver-writable); Linux writes these same values.
	defaultSenseSize = 96
	defaultCDBSize   = 32
	// Bounds on what the driver may set them to: the request and
	// response headers are read into fixed buffers.
	maxSenseSize = 252
	maxCDBSize   = 255

	reqHeader  = 19 // lun[8], id, task_attr, prio, crn
	respHeader = 12 // sense_len, residual, status_qualifier, status, response

	// maxPending bounds the events kept for a driver that has not given
	// the event queue buffers; past that it is told events were missed
	// (and rescans the bus).
	maxPending = 64
)

// Volume is a disk image on the controller.
type Volume struct {
	// Name is the caller's name for it (a KubeVirt volume name), unique
	// on the controller; the LUN's serial number (VPD page 0x80).
	Name     string
	Path     string
	Format   block.Format
	ReadOnly bool
	// File, when set, is the image already open (a descriptor handed over
	// by a process that could open what this one cannot); Path then only
	// names it. The caller keeps and closes it.
	File *os.File `json:"-"`
}

// Attached is a volume and where the guest finds it.
type Attached struct {
	Volume
	Target int
	Size   uint64 // bytes
}

type slot struct {
	vol Volume
	lun LUN
}

type event struct {
	Event  uint32
	Target uint8
	Reason uint32
}

// Device is a virtio-scsi controller.
type Device struct {
	features uint64

	virtio.Worker
	// mu serialises activation, reset and hot-plug. Order: mu, then the
	// worker's loop (Quiesce), then volMu.
	mu sync.Mutex
	// volMu guards targets for readers outside the worker (Volumes,
	// Disks, SaveState); writers hold the loop too, so the worker reads
	// targets without it.
	volMu   sync.Mutex
	targets [MaxTargets]*slot

	// worker state (under the loop)
	queues  [3]*queue.Queue
	chains  [3]queue.Chain
	irq     virtio.Interrupt
	hotplug bool // VIRTIO_SCSI_F_HOTPLUG negotiated
	broken  bool
	pending []event
	missed  bool
	// the driver-set sizes: atomics, as the vCPU that reads or writes
	// the configuration must not wait for a request in progress
	senseSize atomic.Uint32
	cdbSize   atomic.Uint32
	hdr       [reqHeader + maxCDBSize]byte
	resp      [respHeader + maxSenseSize]byte
	in, out   queue.Buffers

	Metrics Metrics
}

// New creates an empty controller.
func New() *Device {
	d := &Device{features: virtio.FVersion1 | virtio.FRingEventIdx | virtio.FRingIndirectDesc | FHotplug}
	d.senseSize.Store(defaultSenseSize)
	d.cdbSize.Store(defaultCDBSize)
	return d
}

// Type is virtio.TypeSCSI.
func (d *Device) Type() virtio.DeviceType { return virtio.TypeSCSI }

// Features offered.
func (d *Device) Features() uint64 { return d.features }

// QueueMaxSizes is one entry each for the control, event and request queues.
func (d *Device) QueueMaxSizes() []uint16 { return []uint16{queueSize, queueSize, queueSize} }

// ReadConfig reads struct virtio_scsi_config.
func (d *Device) ReadConfig(off uint64, data []byte) {
	var c [configSize]byte
	le := binary.LittleEndian
	le.PutUint32(c[0:], 1) // num_queues
	le.PutUint32(c[4:], segMax)
	le.PutUint32(c[8:], maxTransfer) // max_sectors
	le.PutUint32(c[12:], cmdPerLUN)
	le.PutUint32(c[16:], eventSize) // event_info_size
	le.PutUint32(c[20:], d.senseSize.Load())
	le.PutUint32(c[24:], d.cdbSize.Load())
	le.PutUint16(c[28:], 0)            // max_channel
	le.PutUint16(c[30:], MaxTargets-1) // max_target
	le.PutUint32(c[32:], 0)            // max_lun: LUN 0 of each target
	virtio.ReadConfigBytes(c[:], off, data)
}

// WriteConfig takes the driver's sense_size and cdb_size (whole, aligned
// 32-bit writes within bounds); other writes are ignored.
func (d *Device) WriteConfig(off uint64, data []byte) {
	if len(data) != 4 {
		return
	}
	v := binary.LittleEndian.Uint32(data)
	switch {
	case off == 20 && v <= maxSenseSize:
		d.senseSize.Store(v)
	case off == 24 && v <= maxCDBSize:
		d.cdbSize.Store(v)
	}
}

// Activate starts the worker.
func (d *Device) Activate(a virtio.Activation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(a.Queues) != 3 || len(a.Notify) != 3 {
		return fmt.Errorf("virtio-scsi: want 3 queues, got %d", len(a.Queues))
	}
	copy(d.queues[:], a.Queues)
	d.irq, d.broken = a.Interrupt, false
	d.hotplug = a.Features&FHotplug != 0
	ws := make([]virtio.Watch, 3)
	for i := range ws {
		kick := a.Notify[i]
		ws[i] = virtio.Watch{FD: kick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) {
			kick.Drain()
			d.process(i)
		}}
	}
	return d.StartWorker(ws...)
}

// Reset stops the worker; the disks stay attached. Events not yet
// delivered are dropped: a driver that loads again scans the bus.
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.StopWorker()
	d.queues = [3]*queue.Queue{}
	d.irq = nil
	d.pending, d.missed = nil, false
	d.senseSize.Store(defaultSenseSize)
	d.cdbSize.Store(defaultCDBSize)
}

func (d *Device) process(i int) {
	if d.broken {
		return
	}
	switch i {
	case evtQueue:
		d.deliver()
		return
	case ctlQueue:
		d.broken = !virtio.Drain(d.queues[i], &d.chains[i], d.irq, &d.Metrics.MalformedChains, "control queue", d.control)
	default:
		d.broken = !virtio.Drain(d.queues[i], &d.chains[i], d.irq, &d.Metrics.MalformedChains, "request queue", d.request)
	}
}

// target parses an 8-byte LUN address (5.6.6.1: first byte 1, the target,
// then the LUN in the flat or peripheral format) and returns its slot,
// whether the LUN on it is LUN 0, and whether the target is there.
func (d *Device) target(lun []byte) (s *slot, lun0, ok bool) {
	if lun[0] != 1 || int(lun[1]) >= MaxTargets {
		return nil, false, false
	}
	s = d.targets[lun[1]]
	if s == nil {
		return nil, false, false
	}
	var n uint64
	switch lun[2] >> 6 {
	case 0: // peripheral device addressing
		n = uint64(lun[2])<<8 | uint64(lun[3])
	case 1: // flat space addressing
		n = uint64(lun[2]&0x3f)<<8 | uint64(lun[3])
	default:
		n = 1 // an addressing method not used here: no such LUN
	}
	return s, n == 0 && binary.BigEndian.Uint32(lun[4:]) == 0, true
}

// request serves one virtio_scsi_req_cmd: the header and CDB, data-out,
// then the response and sense, data-in.
func (d *Device) request(c *queue.Chain) uint32 {
	hlen, rlen := uint64(reqHeader+d.cdbSize.Load()), uint64(respHeader+d.senseSize.Load())
	if c.ReadableLen < hlen || c.WritableLen < rlen {
		d.Metrics.MalformedChains.Add(1)
		return 0
	}
	hdr := d.hdr[:hlen]
	c.Readable.ReadAt(hdr, 0)
	d.out = c.Readable.Slice(d.out[:0], hlen, c.ReadableLen-hlen)
	d.in = c.Writable.Slice(d.in[:0], rlen, c.WritableLen-rlen)
	resp := d.resp[:rlen]
	clear(resp)
	s, lun0, ok := d.target(hdr[0:8])
	if !ok {
		d.Metrics.BadTarget.Add(1)
		resp[11] = RespBadTarget
		c.Writable.WriteAt(resp, 0)
		return uint32(rlen)
	}
	var lu *LUN
	if lun0 {
		lu = &s.lun
	}
	r := Execute(lu, hdr[reqHeader:], d.in, d.out, &d.Metrics)
	le := binary.LittleEndian
	if r.Status == StatusCheckCondition {
		sense := r.Sense.Fixed()
		n := copy(resp[respHeader:], sense[:])
		le.PutUint32(resp[0:], uint32(n))
	}
	// residual: what of the data buffer (in or out, whichever the
	// command moves) was not transferred
	residual := d.in.Len() - r.DataIn
	if d.in.Len() == 0 {
		residual = d.out.Len() - r.DataOut
	}
	le.PutUint32(resp[4:], uint32(min(residual, 0xffffffff)))
	resp[10] = r.Status
	resp[11] = RespOK
	c.Writable.WriteAt(resp, 0)
	return uint32(rlen + r.DataIn)
}

// control answers task management (every task is already complete:
// requests run to completion before the next is read) and asynchronous
// notification queries (none are supported).
func (d *Device) control(c *queue.Chain) uint32 {
	var b [24]byte
	n := c.Readable.ReadAt(b[:], 0)
	if n < 4 {
		d.Metrics.MalformedChains.Add(1)
		return 0
	}
	switch binary.LittleEndian.Uint32(b[0:]) {
	case ctlTMF: // type, subtype, lun[8], id; response u8
		if n < 24 || c.WritableLen < 1 {
			d.Metrics.MalformedChains.Add(1)
			return 0
		}
		d.Metrics.TaskManagement.Add(1)
		resp := byte(RespOK)
		if _, _, ok := d.target(b[8:16]); !ok {
			resp = RespBadTarget
		}
		c.Writable.WriteAt([]byte{resp}, 0)
		return 1
	case ctlANQuery, ctlANSubsrcb: // type, lun[8], event_requested; event_actual, response
		if n < 16 || c.WritableLen < 5 {
			d.Metrics.MalformedChains.Add(1)
			return 0
		}
		c.Writable.WriteAt([]byte{0, 0, 0, 0, RespOK}, 0)
		return 5
	}
	d.Metrics.Unsupported.Add(1)
	if c.WritableLen >= 1 {
		c.Writable.WriteAt([]byte{RespFailure}, 0)
		return 1
	}
	return 0
}

// raise queues an event for the driver and delivers what it can. Called
// under the loop.
func (d *Device) raise(e event) {
	if d.queues[evtQueue] == nil || !d.hotplug || d.broken {
		return // no driver listening: it scans the bus when it loads
	}
	if len(d.pending) >= maxPending {
		d.missed = true
	} else {
		d.pending = append(d.pending, e)
	}
	d.deliver()
}

// deliver writes pending events into the buffers the driver gave the
// event queue.
func (d *Device) deliver() {
	q := d.queues[evtQueue]
	if q == nil {
		return
	}
	c := &d.chains[evtQueue]
	sent := false
	for len(d.pending) > 0 || d.missed {
		ok, err := q.Next(c)
		if errors.Is(err, queue.ErrChain) {
			q.Push(c, 0)
			d.Metrics.MalformedChains.Add(1)
			sent = true
			continue
		}
		if err != nil {
			d.broken = true
			d.irq.Fail(fmt.Errorf("event queue: %w", err))
			return
		}
		if !ok {
			break
		}
		if c.WritableLen < eventSize {
			q.Push(c, 0)
			d.Metrics.MalformedChains.Add(1)
			sent = true
			continue
		}
		e := event{Event: EventNoEvent}
		if len(d.pending) > 0 {
			e, d.pending = d.pending[0], d.pending[1:]
		}
		if d.missed {
			e.Event |= EventsMissed
			d.missed = false
			d.Metrics.EventsMissed.Add(1)
		}
		var b [eventSize]byte
		binary.LittleEndian.PutUint32(b[0:], e.Event)
		// LUN 0 of the target, encoded as REPORT LUNS lists it (all
		// zeros), which is how Linux reads it back: with the flat
		// addressing bit it would look for LUN 0x4000
		b[4], b[5] = 1, e.Target
		binary.LittleEndian.PutUint32(b[12:], e.Reason)
		c.Writable.WriteAt(b[:], 0)
		q.Push(c, eventSize)
		d.Metrics.Events.Add(1)
		sent = true
	}
	if sent && q.NeedsInterrupt() {
		d.irq.UsedBuffer()
	}
}

// Attach puts disk, opened from v, at the lowest free target and tells
// the driver (RESCAN): the guest's SCSI layer then probes the new LUN.
// The device owns disk from then on, also when Attach fails.
func (d *Device) Attach(v Volume, disk block.Disk) (Attached, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var (
		at  Attached
		err error
	)
	d.Quiesce(func() { at, err = d.place(v, disk, -1) })
	if err != nil {
		_ = disk.Close() // never seen by the guest: nothing written
		return Attached{}, err
	}
	d.Metrics.Attached.Add(1)
	return at, nil
}

// place puts disk at target t (-1: the lowest free one). Under the loop.
func (d *Device) place(v Volume, disk block.Disk, t int) (Attached, error) {
	if err := checkVolume(v); err != nil {
		return Attached{}, err
	}
	for _, s := range d.targets {
		if s != nil && s.vol.Name == v.Name {
			return Attached{}, fmt.Errorf("%w: a volume named %q is attached already", ErrBadVolume, v.Name)
		}
	}
	if t < 0 {
		for i, s := range d.targets {
			if s == nil {
				t = i
				break
			}
		}
		if t < 0 {
			return Attached{}, fmt.Errorf("%w: all %d SCSI targets are in use", ErrBadVolume, MaxTargets)
		}
	}
	if t >= MaxTargets || d.targets[t] != nil {
		return Attached{}, fmt.Errorf("%w: SCSI target %d is not free", ErrBadVolume, t)
	}
	v.ReadOnly = disk.ReadOnly()
	d.volMu.Lock()
	d.targets[t] = &slot{vol: v, lun: LUN{Disk: disk, Serial: v.Name}}
	d.volMu.Unlock()
	d.raise(event{Event: EventTransportReset, Target: uint8(t), Reason: ReasonRescan})
	return Attached{Volume: v, Target: t, Size: disk.Size()}, nil
}

// maxName bounds a volume's name (its serial, VPD page 0x80: a page of at
// most 255 bytes here).
const maxName = 200

func checkVolume(v Volume) error {
	if v.Name == "" || len(v.Name) > maxName {
		return fmt.Errorf("%w: name %q: want 1 to %d bytes", ErrBadVolume, v.Name, maxName)
	}
	for _, r := range v.Name {
		if r < 0x20 || r > 0x7e {
			return fmt.Errorf("%w: name %q: printable ASCII only (it is the disk's serial)", ErrBadVolume, v.Name)
		}
	}
	if v.Path == "" {
		return fmt.Errorf("%w: volume %q has no path", ErrBadVolume, v.Name)
	}
	return nil
}

// Errors of Attach and Detach the caller's input causes.
var (
	// ErrBadVolume: the volume can't be attached (a name in use or
	// malformed, no free target, an image that can't be opened).
	ErrBadVolume = errors.New("volume refused")
	// ErrNotAttached: Detach of a name the controller lacks.
	ErrNotAttached = errors.New("no such volume")
)

// Detach takes the named volume out (the driver is told: REMOVED), once no
// request is using it, then flushes and closes its image. An error from
// the flush or close is returned; the volume is gone either way.
func (d *Device) Detach(name string) (Attached, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var s *slot
	t := -1
	d.Quiesce(func() {
		for i, x := range d.targets {
			if x != nil && x.vol.Name == name {
				s, t = x, i
				d.volMu.Lock()
				d.targets[i] = nil
				d.volMu.Unlock()
				d.raise(event{Event: EventTransportReset, Target: uint8(i), Reason: ReasonRemoved})
				return
			}
		}
	})
	if s == nil {
		return Attached{}, fmt.Errorf("virtio-scsi: %w: %q", ErrNotAttached, name)
	}
	d.Metrics.Detached.Add(1)
	at := Attached{Volume: s.vol, Target: t, Size: s.lun.Disk.Size()}
	var errs []error
	if !s.lun.Disk.ReadOnly() {
		errs = append(errs, s.lun.Disk.Flush())
	}
	errs = append(errs, s.lun.Disk.Close())
	if err := errors.Join(errs...); err != nil {
		return at, fmt.Errorf("virtio-scsi: detach %q (%s): %w", name, s.vol.Path, err)
	}
	return at, nil
}

// Volumes lists the attached volumes by target.
func (d *Device) Volumes() []Attached {
	d.volMu.Lock()
	defer d.volMu.Unlock()
	var out []Attached
	for i, s := range d.targets {
		if s != nil {
			out = append(out, Attached{Volume: s.vol, Target: i, Size: s.lun.Disk.Size()})
		}
	}
	return out
}

// Disks are the attached volumes' images, by name (for the machine's
// flushes and a migration's lock hand-over).
func (d *Device) Disks() map[string]block.Disk {
	d.volMu.Lock()
	defer d.volMu.Unlock()
	out := map[string]block.Disk{}
	for _, s := range d.targets {
		if s != nil {
			out[s.vol.Name] = s.lun.Disk
		}
	}
	return out
}

// Close closes every attached image (the machine closes the device after
// stopping it); what the guest wrote is flushed first.
func (d *Device) Close() error {
	d.volMu.Lock()
	defer d.volMu.Unlock()
	var errs []error
	for i, s := range d.targets {
		if s == nil {
			continue
		}
		var err error
		if !s.lun.Disk.ReadOnly() {
			err = s.lun.Disk.Flush()
		}
		if err = errors.Join(err, s.lun.Disk.Close()); err != nil {
			errs = append(errs, fmt.Errorf("virtio-scsi volume %q (%s): %w", s.vol.Name, s.vol.Path, err))
		}
		d.targets[i] = nil
	}
	return errors.Join(errs...)
}
