package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/kubevmm/kubevmm/net/link"
	"github.com/kubevmm/kubevmm/vmm/block"
	"github.com/kubevmm/kubevmm/vmm/machine"
)

// options splits "a,k=v,flag" at commas; ",," is a literal comma (as in
// QEMU), for paths that contain one.
func options(s string) (first string, opts []string) {
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			if i+1 < len(s) && s[i+1] == ',' {
				cur.WriteByte(',')
				i++
				continue
			}
			parts = append(parts, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteByte(s[i])
	}
	parts = append(parts, cur.String())
	return parts[0], parts[1:]
}

// parseDisk parses --disk PATH[,ro][,format=raw|qcow2][,serial=S] (a
// comma in PATH is written ",,").
func parseDisk(s string) (machine.DiskConfig, error) {
	path, opts := options(s)
	if path == "" {
		return machine.DiskConfig{}, fmt.Errorf("missing image path")
	}
	d := machine.DiskConfig{Path: path, Format: block.FormatRaw}
	for _, o := range opts {
		k, v, hasV := strings.Cut(o, "=")
		switch {
		case k == "ro" && !hasV:
			d.ReadOnly = true
		case k == "format" && hasV:
			f, err := block.ParseFormat(v)
			if err != nil {
				return d, err
			}
			d.Format = f
		case k == "serial" && hasV:
			if len(v) > 20 {
				return d, fmt.Errorf("serial %q is longer than 20 bytes", v)
			}
			d.Serial = v
		default:
			return d, fmt.Errorf("unknown option %q (want ro, format=raw|qcow2, serial=S)", o)
		}
	}
	return d, nil
}

// parseNIC parses --net tap=NAME,mac=MAC.
func parseNIC(s string) (machine.NICConfig, error) {
	var n machine.NICConfig
	for _, o := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "tap":
			if v == "" || len(v) > 15 {
				return n, fmt.Errorf("tap name %q: want 1..15 characters", v)
			}
			n.Tap = v
		case "mac":
			m, err := link.ParseMAC(v)
			if err != nil {
				return n, err
			}
			n.MAC = m
		default:
			return n, fmt.Errorf("unknown option %q (want tap=NAME,mac=MAC)", o)
		}
	}
	if n.Tap == "" || n.MAC == nil {
		return n, fmt.Errorf("need both tap=NAME and mac=MAC")
	}
	return n, nil
}

// parseVsock parses --vsock cid=N,socket=PATH.
func parseVsock(s string) (machine.VsockConfig, error) {
	var v machine.VsockConfig
	for _, o := range strings.Split(s, ",") {
		k, val, _ := strings.Cut(o, "=")
		switch k {
		case "cid":
			cid, err := strconv.ParseUint(val, 10, 32)
			if err != nil || cid < 3 {
				return v, fmt.Errorf("cid %q: want a number of at least 3 (0-2 are reserved)", val)
			}
			v.CID = cid
		case "socket":
			if val == "" {
				return v, fmt.Errorf("empty socket path")
			}
			v.Socket = val
		default:
			return v, fmt.Errorf("unknown option %q (want cid=N,socket=PATH)", o)
		}
	}
	if v.CID == 0 || v.Socket == "" {
		return v, fmt.Errorf("need both cid=N and socket=PATH")
	}
	return v, nil
}

// parseDevices turns the device flags into machine configuration.
func parseDevices(f *runFlags) (machine.Config, error) {
	var c machine.Config
	for _, s := range f.disks {
		d, err := parseDisk(s)
		if err != nil {
			return c, usagef("run: --disk %q: %v", s, err)
		}
		c.Disks = append(c.Disks, d)
	}
	for _, s := range f.nics {
		n, err := parseNIC(s)
		if err != nil {
			return c, usagef("run: --net %q: %v", s, err)
		}
		c.NICs = append(c.NICs, n)
	}
	c.RNG = f.rng
	if f.vsock != "" {
		v, err := parseVsock(f.vsock)
		if err != nil {
			return c, usagef("run: --vsock %q: %v", f.vsock, err)
		}
		c.Vsock = &v
	}
	return c, nil
}
