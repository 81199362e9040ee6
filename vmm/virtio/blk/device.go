// Package blk is virtio-blk (virtio 1.2 section 5.2) over a block.Disk:
// read, write, flush (fdatasync), get-id (the serial), discard and
// write-zeroes where the image supports them, read-only disks, and
// several request queues (VIRTIO_BLK_F_MQ, one per vCPU typically).
package blk

import (
	"encoding/binary"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/virtio"
	"github.com/kubevmm/kubevmm/vmm/virtio/queue"
)

// Feature bits (5.2.3).
const (
	FSizeMax     = 1 << 1
	FSegMax      = 1 << 2
	FRO          = 1 << 5
	FBlkSize     = 1 << 6
	FFlush       = 1 << 9
	FMQ          = 1 << 12
	FDiscard     = 1 << 13
	FWriteZeroes = 1 << 14
)

const (
	queueSize = 256
	// segMax: data segments per request; two more descriptors carry the
	// header and the status.
	segMax          = queueSize - 2
	maxDiscardSegs  = 32
	maxDiscardSects = 1 << 22 // 2 GiB per segment
	configSize      = 60
	// MaxQueues bounds the request queues of one disk (one per vCPU).
	MaxQueues = 64
)

// Config describes a disk.
type Config struct {
	Disk   block.Disk
	Serial string // at most 20 bytes, reported by GET_ID
	// Queues above 1: that many request queues, VIRTIO_BLK_F_MQ.
	Queues int
}

// Device is a virtio-blk device.
type Device struct {
	disk     block.Disk
	serial   []byte
	features uint64
	config   [configSize]byte

	virtio.Worker
	mu     sync.Mutex
	queues []requestQueue
	irq    virtio.Interrupt
	lim    Limits
	broken bool

	Metrics Metrics
}

// requestQueue is one request queue with the chain and request its
// worker parses into. All queues are served by the device's one worker:
// requests on different queues never run at the same time, so the disk
// needs no locking of its own.
type requestQueue struct {
	q     *queue.Queue
	chain queue.Chain
	req   Request
}

// New creates the device. The disk is owned by the caller (closed after
// the device is reset).
func New(cfg Config) (*Device, error) {
	if len(cfg.Serial) > idBytes {
		return nil, fmt.Errorf("virtio-blk: serial %q longer than %d bytes", cfg.Serial, idBytes)
	}
	n := max(cfg.Queues, 1)
	if n > MaxQueues {
		return nil, fmt.Errorf("virtio-blk: %d queues, at most %d", n, MaxQueues)
	}
	d := &Device{disk: cfg.Disk, serial: []byte(cfg.Serial), queues: make([]requestQueue, n)}
	d.features = virtio.FVersion1 | virtio.FRingEventIdx | virtio.FRingIndirectDesc | FSegMax | FFlush
	if n > 1 {
		d.features |= FMQ
	}
	if cfg.Disk.ReadOnly() {
		d.features |= FRO
	} else {
		// block.Features, not type checks: a migration target's disk is
		// a block.Deferred until the switchover opens the image.
		discard, zeroes := block.Features(cfg.Disk)
		if discard {
			d.features |= FDiscard
		}
		if zeroes {
			d.features |= FWriteZeroes
		}
	}
	le := binary.LittleEndian
	le.PutUint64(d.config[0:], d.Sectors())
	le.PutUint32(d.config[12:], segMax)
	le.PutUint16(d.config[34:], uint16(n))       // num_queues (read with VIRTIO_BLK_F_MQ)
	le.PutUint32(d.config[36:], maxDiscardSects) // max_discard_sectors
	le.PutUint32(d.config[40:], maxDiscardSegs)  // max_discard_seg
	le.PutUint32(d.config[44:], 8)               // discard_sector_alignment: 4 KiB
	le.PutUint32(d.config[48:], maxDiscardSects) // max_write_zeroes_sectors
	le.PutUint32(d.config[52:], maxDiscardSegs)  // max_write_zeroes_seg
	d.config[56] = 1                             // write_zeroes_may_unmap
	return d, nil
}

// Sectors is the capacity in 512-byte sectors (a trailing partial sector
// of the image is not visible).
func (d *Device) Sectors() uint64 { return d.disk.Size() / block.SectorSize }

// Type is virtio.TypeBlock.
func (d *Device) Type() virtio.DeviceType { return virtio.TypeBlock }

// Features offered.
func (d *Device) Features() uint64 { return d.features }

// QueueMaxSizes is one entry per request queue.
func (d *Device) QueueMaxSizes() []uint16 {
	s := make([]uint16, len(d.queues))
	for i := range s {
		s[i] = queueSize
	}
	return s
}

// ReadConfig reads struct virtio_blk_config.
func (d *Device) ReadConfig(off uint64, data []byte) { virtio.ReadConfigBytes(d.config[:], off, data) }

// WriteConfig ignores writes (the writeback toggle is not offered).
func (d *Device) WriteConfig(uint64, []byte) {}

// Activate starts the worker.
func (d *Device) Activate(a virtio.Activation) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(a.Queues) != len(d.queues) || len(a.Notify) != len(d.queues) {
		return fmt.Errorf("virtio-blk: want %d queues, got %d", len(d.queues), len(a.Queues))
	}
	if len(d.queues) > 1 && a.Features&FMQ == 0 {
		return fmt.Errorf("virtio-blk: %d queues, and the driver did not accept VIRTIO_BLK_F_MQ", len(d.queues))
	}
	d.irq, d.broken = a.Interrupt, false
	d.lim = Limits{
		Sectors:      d.Sectors(),
		ReadOnly:     d.disk.ReadOnly(),
		Discard:      a.Features&FDiscard != 0,
		WriteZeroes:  a.Features&FWriteZeroes != 0,
		MaxSegments:  maxDiscardSegs,
		MaxSegSector: maxDiscardSects,
	}
	ws := make([]virtio.Watch, len(d.queues))
	for i := range d.queues {
		rq, kick := &d.queues[i], a.Notify[i]
		rq.q = a.Queues[i]
		ws[i] = virtio.Watch{FD: kick.Int(), Events: unix.EPOLLIN, Handle: func(uint32) {
			kick.Drain()
			d.process(rq)
		}}
	}
	return d.StartWorker(ws...)
}

func (d *Device) process(rq *requestQueue) {
	if d.broken {
		return
	}
	d.broken = !virtio.Drain(rq.q, &rq.chain, d.irq, &d.Metrics.MalformedChains, "request queue", func(c *queue.Chain) uint32 {
		if err := Parse(c, &rq.req); err != nil {
			d.Metrics.MalformedChains.Add(1)
			return 0
		}
		status, n := Execute(&rq.req, d.disk, d.lim, d.serial, &d.Metrics)
		rq.req.Status[0] = status
		return n + 1
	})
}

// Reset stops the worker.
func (d *Device) Reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.StopWorker()
	for i := range d.queues {
		d.queues[i].q = nil
	}
	d.irq = nil
}
