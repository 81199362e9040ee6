package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/kubevmm/kubevmm/launcher/qemu"
)

// ioResult is one VMM's storage and network numbers. Both sections run in
// the same guest, booted once per VMM: boots are what costs time here.
type ioResult struct {
	disk          diskResult
	net           netResult
	diskOK, netOK bool
	err           error // what failed: the boot, the disk or the network part
}

func (e *env) ioSections(ctx context.Context) (ours, theirs ioResult) {
	nn, err := e.newNetns(1)
	if err != nil {
		err = fmt.Errorf("network namespace: %w", err)
		return ioResult{err: err}, ioResult{err: err}
	}
	return e.ioKubevmm(ctx, nn), e.ioQEMU(ctx, nn)
}

func (e *env) ioKubevmm(ctx context.Context, nn *netns) ioResult {
	img := filepath.Join(e.work, "kubevmm-disk.img")
	if err := writeDiskImage(img); err != nil {
		return ioResult{err: err}
	}
	k, err := e.bootKubevmm(ctx, "kubevmm-io", 128, nn.ns.Name,
		"--disk", img, "--net", fmt.Sprintf("tap=%s,mac=%s", nn.taps[0], guestMAC))
	if err != nil {
		return ioResult{err: err}
	}
	// The measurement is taken; a failed stop kills the VMM itself.
	defer func() { _ = k.stop() }()
	return measureIO(ctx, k.con, nn, func() time.Duration { return vmmCPU(k.p.pid()) })
}

func (e *env) ioQEMU(ctx context.Context, nn *netns) ioResult {
	img := filepath.Join(e.work, "qemu-disk.img")
	if err := writeDiskImage(img); err != nil {
		return ioResult{err: err}
	}
	cfg, err := e.qemuConfig("qemu-io", 128, nn.ns.Name)
	if err != nil {
		return ioResult{err: err}
	}
	cfg.Disks = []qemu.Disk{{Path: img}}
	cfg.NICs = []qemu.NIC{{Tap: nn.taps[0], MAC: guestMAC}}
	q, err := e.startQEMU(ctx, cfg)
	if err != nil {
		return ioResult{err: err}
	}
	defer q.kill()
	return measureIO(ctx, q.con, nn, nil)
}

func measureIO(ctx context.Context, con *console, nn *netns, cpu func() time.Duration) ioResult {
	var r ioResult
	var derr, nerr error
	if r.disk, derr = measureDisk(ctx, con, cpu); derr == nil {
		r.diskOK = true
	}
	if r.net, nerr = measureNet(ctx, con, nn, cpu); nerr == nil {
		r.netOK = true
	}
	r.err = errors.Join(derr, nerr)
	return r
}
