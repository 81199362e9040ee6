package block

import (
	"fmt"
	"strings"
)

// Identity is what a saved VM (a snapshot, a migration's state) records
// of each image so that the VMM that restores it recognizes the image
// again: the format and virtual size the guest saw and, for qcow2, the
// header fields that shape what it reads (version, cluster size, backing
// file). Guest writes change none of them, so a snapshot of a VM that
// kept running still restores; an image replaced by another format or
// layout, resized, or put over another backing file is refused. File
// identity (inode, mtime) is left out on purpose: every guest write
// changes mtime, and the same image copied to another host, where a
// snapshot may be restored or a VM migrated to, has another inode.
type Identity struct {
	Format        Format `json:"format"`
	Size          uint64 `json:"size"`
	Qcow2Version  uint32 `json:"qcow2_version,omitempty"`
	ClusterBits   uint32 `json:"cluster_bits,omitempty"`
	BackingFile   string `json:"backing_file,omitempty"`
	BackingFormat string `json:"backing_format,omitempty"`
}

// Identify describes an open disk.
func Identify(d Disk) Identity {
	switch d := d.(type) {
	case *Deferred:
		if d.disk != nil {
			return Identify(d.disk)
		}
		f := d.opt.Format
		if f == "" {
			f = FormatRaw
		}
		return Identity{Format: f, Size: d.size}
	case *Qcow2:
		return Identity{Format: FormatQcow2, Size: d.h.Size, Qcow2Version: d.h.Version,
			ClusterBits: d.h.ClusterBits, BackingFile: d.h.BackingFile, BackingFormat: d.h.BackingFormat}
	case *Raw:
		return Identity{Format: FormatRaw, Size: d.size}
	}
	return Identity{Size: d.Size()}
}

// Check compares the identity of an image opened now with the saved one
// and says, in one line, what differs.
func (saved Identity) Check(now Identity) error {
	var diffs []string
	add := func(what string, now, saved any) {
		if now != saved {
			diffs = append(diffs, fmt.Sprintf("%s %v, saved %v", what, now, saved))
		}
	}
	add("format", now.Format, saved.Format)
	add("virtual size", now.Size, saved.Size)
	add("qcow2 version", now.Qcow2Version, saved.Qcow2Version)
	add("cluster bits", now.ClusterBits, saved.ClusterBits)
	add("backing file", fmt.Sprintf("%q", now.BackingFile), fmt.Sprintf("%q", saved.BackingFile))
	add("backing format", fmt.Sprintf("%q", now.BackingFormat), fmt.Sprintf("%q", saved.BackingFormat))
	if len(diffs) > 0 {
		return fmt.Errorf("the image is not the one saved: %s", strings.Join(diffs, "; "))
	}
	return nil
}
