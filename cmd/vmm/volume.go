package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/kubevmm/kubevmm/vmm/api"
)

const volumeUsage = "add --api SOCKET --name NAME --path IMAGE [--format raw|qcow2] [--ro] | remove --api SOCKET --name NAME | list --api SOCKET"

// cmdVolume runs `vmm volume add|remove|list`: hot-plug on a VM started
// with --scsi.
func cmdVolume(args []string, stdout io.Writer) (int, error) {
	if len(args) == 0 {
		return 0, usagef("volume: want %s", volumeUsage)
	}
	op := args[0]
	if op == "-h" || op == "--help" {
		fmt.Fprintf(stdout, "usage: vmm volume %s\n", volumeUsage)
		return exitOK, nil
	}
	fs := flag.NewFlagSet("vmm volume "+op, flag.ContinueOnError)
	sock := clientFlags(fs)
	var name, path, format *string
	var ro *bool
	usage := "--api SOCKET"
	switch op {
	case "add":
		name = fs.String("name", "", "the volume's name, unique on the VM; also the disk's SCSI serial (required)")
		path = fs.String("path", "", "the disk image (required)")
		format = fs.String("format", "raw", "raw or qcow2")
		ro = fs.Bool("ro", false, "attach it read-only")
		usage += " --name NAME --path IMAGE [--format raw|qcow2] [--ro]"
	case "remove":
		name = fs.String("name", "", "the volume to unplug (required)")
		usage += " --name NAME"
	case "list":
	default:
		return 0, usagef("volume: unknown operation %q: want add, remove or list", op)
	}
	if done, err := parseFlags(fs, "volume "+op, usage, args[1:], stdout); done || err != nil {
		return exitOK, err
	}
	c, err := client(*sock, "volume "+op)
	if err != nil {
		return 0, err
	}
	if name != nil && *name == "" {
		return 0, usagef("volume %s: --name is required", op)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch op {
	case "add":
		if *path == "" {
			return 0, usagef("volume add: --path is required")
		}
		abs, err := absPath(*path)
		if err != nil {
			return 0, usagef("volume add: --path: %v", err)
		}
		v, err := c.AttachVolume(ctx, api.VolumeRequest{Name: *name, Path: abs, Format: *format, ReadOnly: *ro})
		if err != nil {
			return exitGuest, fmt.Errorf("volume add: %w", err)
		}
		fmt.Fprintf(stdout, "volume %s attached: SCSI target %d, LUN 0, %d bytes\n", v.Name, v.Target, v.SizeBytes)
	case "remove":
		v, err := c.DetachVolume(ctx, *name)
		if err != nil {
			return exitGuest, fmt.Errorf("volume remove: %w", err)
		}
		fmt.Fprintf(stdout, "volume %s detached from SCSI target %d\n", v.Name, v.Target)
	case "list":
		vs, err := c.Volumes(ctx)
		if err != nil {
			return exitGuest, fmt.Errorf("volume list: %w", err)
		}
		b, _ := json.MarshalIndent(vs, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	}
	return exitOK, nil
}
