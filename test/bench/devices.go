package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/kubevmm/kubevmm/test/hosttools"
)

// The devices section: what virtio-net and virtio-blk cost the VMM
// without a guest. The devices' Go benchmarks (vmm/virtio/net
// BenchmarkDevice, vmm/virtio/blk BenchmarkRequest) play the guest's
// driver at full speed on a locked thread against a real tap in a network
// namespace and a real file, and report the CPU the rest of the process
// spent: the device's own cost, apart from this host's emulated guest
// kernel.

// devicesRequests is how many frames or requests each benchmark moves.
const devicesRequests = 20000

var deviceBenches = []struct{ pkg, bench string }{
	{"./vmm/virtio/net", "^BenchmarkDevice$"},
	{"./vmm/virtio/blk", "^BenchmarkRequest$"},
}

// deviceResult is one benchmark's line.
type deviceResult struct {
	name                    string
	perMiB, perReq          float64 // device CPU, ms per MiB and µs per request
	mbps                    float64 // the driver's wall-clock throughput
	hasMiB, hasReq, hasMBps bool
}

type devicesSection struct {
	results []deviceResult
	err     error
}

func (e *env) devicesSection(ctx context.Context) devicesSection {
	var s devicesSection
	goBin, err := hosttools.Find("go")
	if err != nil {
		s.err = err
		return s
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "../..")
	for _, b := range deviceBenches {
		log("devices: %s %s", b.pkg, b.bench)
		cmd := exec.CommandContext(ctx, goBin, "test", "-count=1", "-run=^$", "-bench="+b.bench,
			fmt.Sprintf("-benchtime=%dx", devicesRequests), b.pkg)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			s.err = fmt.Errorf("go test %s: %w: %s", b.pkg, err, lastLines(string(out), 5))
			return s
		}
		s.results = append(s.results, parseBench(out)...)
	}
	return s
}

// parseBench reads the benchmark lines of go test output: name, count,
// then value-unit pairs.
func parseBench(out []byte) []deviceResult {
	var rs []deviceResult
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0][strings.IndexByte(f[0], '/')+1:]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		r := deviceResult{name: strings.ReplaceAll(name, "_", " ")}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "vmm-ms/MiB":
				r.perMiB, r.hasMiB = v, true
			case "vmm-µs/req":
				r.perReq, r.hasReq = v, true
			case "MB/s":
				r.mbps, r.hasMBps = v, true
			}
		}
		rs = append(rs, r)
	}
	return rs
}

func (s devicesSection) render(b *strings.Builder) {
	b.WriteString("## Devices without a guest: VMM CPU per MiB and per request\n\n")
	fmt.Fprintf(b, "Method: the devices' Go benchmarks (`go test -bench` of `BenchmarkDevice` in vmm/virtio/net and `BenchmarkRequest` in vmm/virtio/blk, %d frames or requests each) "+
		"play the guest's driver at full speed on one locked thread: descriptor tables and rings in guest memory, kicks on the queue's notify eventfd "+
		"(what KVM's ioeventfd signals on the guest's MMIO write), waits on the interrupt eventfd (the irqfd). virtio-net runs on a real tap in a network namespace: "+
		"transmitted frames are dropped by the host's stack on arrival (a destination MAC that is not the tap's), received ones are sent into the tap by a packet socket "+
		"on the driver's thread, into 4 KiB mergeable buffers; virtio-blk serves a 64 MiB raw file in the page cache, requests in 4 KiB segments through an indirect table. "+
		"VMM CPU is the process's CPU time (getrusage) less the driver thread's (RUSAGE_THREAD): the device's worker, the kernel work of its system calls and the Go runtime.\n\n",
		devicesRequests)
	if s.err != nil {
		fmt.Fprintf(b, "failed: %s\n\n", oneLine(s.err))
		return
	}
	b.WriteString("| device | frame or request | VMM CPU per MiB | VMM CPU per request | driver's throughput |\n|---|---|---|---|---|\n")
	for _, r := range s.results {
		dev, what := "virtio-blk", r.name
		if d, rest, ok := strings.Cut(r.name, "/"); ok {
			// "1514 one per wake-up": the frame size, then the pacing
			size, pacing, _ := strings.Cut(rest, " ")
			dev, what = "virtio-net "+d, size+" bytes"
			if pacing != "" {
				what += ", " + pacing
			}
		}
		perMiB, perReq, tput := "n/a", "n/a", "n/a"
		if r.hasMiB {
			perMiB = fmt.Sprintf("%.3f ms", r.perMiB)
		}
		if r.hasReq {
			perReq = fmt.Sprintf("%.2f µs", r.perReq)
		}
		if r.hasMBps {
			tput = fmt.Sprintf("%.0f MB/s", r.mbps)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s |\n", dev, what, perMiB, perReq, tput)
	}
}
