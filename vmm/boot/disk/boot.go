// Package disk boots the disk images users have without running their
// firmware or boot loader: it reads the partition table and filesystems of
// the boot disk in userspace, read-only, finds the default boot entry
// (Boot Loader Specification entries, then grub.cfg, then the newest
// /boot/vmlinuz-*) and returns its kernel, initrd and command line for the
// Linux loader.
package disk

import (
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
)

// Boot is what to boot from a disk.
type Boot struct {
	Kernel  []byte
	Initrd  []byte
	Cmdline string // the entry's options
	// Source says where the entry came from, e.g.
	// "partition 2 (ext4) /boot/loader/entries/debian.conf".
	Source string
}

// volume is a partition with a filesystem we can read.
type volume struct {
	part Partition
	fs   filesystem
}

func (v *volume) String() string {
	return fmt.Sprintf("partition %d (%s)", v.part.Index, v.fs.Type())
}

// entry is a boot entry found on a volume; paths are not yet resolved.
type entry struct {
	vol     *volume
	source  string
	kernel  string
	initrds []string
	options string
}

// Find reads the disk's partitions and returns its default boot entry.
func Find(r io.ReaderAt, size int64) (*Boot, error) {
	parts, err := Partitions(r, size)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("the partition table has no partitions")
	}
	var vols []*volume
	var why []string
	for _, p := range parts {
		f, err := openFS(io.NewSectionReader(r, p.Start, p.Size), p.Size)
		if err != nil {
			why = append(why, fmt.Sprintf("partition %d: %v", p.Index, err))
			continue
		}
		vols = append(vols, &volume{part: p, fs: f})
	}
	if len(vols) == 0 {
		return nil, fmt.Errorf("no readable filesystem: %s", strings.Join(why, "; "))
	}
	e, err := findEntry(vols)
	if err != nil {
		return nil, err
	}
	return e.load(vols)
}

func findEntry(vols []*volume) (*entry, error) {
	vmlinuz := func(v *volume) (*entry, error) { return findVmlinuz(v, vols) }
	for _, find := range []func(*volume) (*entry, error){findBLS, findGrub, vmlinuz} {
		for _, v := range vols {
			e, err := find(v)
			if err != nil {
				return nil, err
			}
			if e != nil {
				return e, nil
			}
		}
	}
	var names []string
	for _, v := range vols {
		names = append(names, v.String())
	}
	return nil, fmt.Errorf("no boot entry (no loader/entries/*.conf, grub.cfg or vmlinuz-*) on %s", strings.Join(names, ", "))
}

// load reads the entry's kernel and initrds. A path is looked up on the
// entry's own volume first, then on the other volumes; on each as itself,
// under /boot and without /boot: an entry may name its files relative to
// the root filesystem or to a separate /boot partition, and which one it
// means depends on where the boot loader's root pointed.
func (e *entry) load(vols []*volume) (*Boot, error) {
	b := &Boot{Cmdline: e.options, Source: e.source}
	var err error
	if e.kernel == "" {
		return nil, fmt.Errorf("%s: the entry names no kernel", e.source)
	}
	if b.Kernel, err = e.read(vols, e.kernel, maxKernelSize); err != nil {
		return nil, fmt.Errorf("%s: kernel %s unreadable: %w", e.source, e.kernel, err)
	}
	for _, p := range e.initrds {
		d, err := e.read(vols, p, maxInitrdSize-int64(len(b.Initrd)))
		if err != nil {
			return nil, fmt.Errorf("%s: initrd %s unreadable: %w", e.source, p, err)
		}
		b.Initrd = append(b.Initrd, d...)
	}
	return b, nil
}

func (e *entry) read(vols []*volume, p string, max int64) ([]byte, error) {
	order := []*volume{e.vol}
	for _, v := range vols {
		if v != e.vol {
			order = append(order, v)
		}
	}
	var first error
	for _, v := range order {
		cands := []string{p, path.Join("/boot", p)}
		if rest, ok := strings.CutPrefix(p, "/boot/"); ok {
			cands[1] = "/" + rest
		}
		for _, c := range cands {
			d, err := v.fs.ReadFile(c, max)
			if err == nil {
				return d, nil
			}
			if first == nil || !errors.Is(err, errNotFound) && errors.Is(first, errNotFound) {
				first = err
			}
		}
	}
	return nil, first
}

// readConfig reads a small text file; a missing one is ("", false, nil).
func readConfig(v *volume, p string) (string, bool, error) {
	b, err := v.fs.ReadFile(p, maxConfigSize)
	if errors.Is(err, errNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("%s %s: %w", v, p, err)
	}
	return string(b), true, nil
}

// findBLS looks for Boot Loader Specification entries: /loader/entries on
// a separate /boot (or ESP), /boot/loader/entries on a root filesystem.
func findBLS(v *volume) (*entry, error) {
	for _, dir := range []string{"/boot/loader", "/loader"} {
		names, err := v.fs.ReadDir(dir + "/entries")
		if errors.Is(err, errNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s/entries: %w", v, dir, err)
		}
		var ents []blsEntry
		sort.Strings(names)
		for _, n := range names {
			if !strings.HasSuffix(n, ".conf") {
				continue
			}
			if len(ents) == maxBLSEntries {
				return nil, fmt.Errorf("%s %s/entries: more than %d entries", v, dir, maxBLSEntries)
			}
			p := dir + "/entries/" + n
			text, ok, err := readConfig(v, p)
			if err != nil {
				return nil, err
			}
			if ok {
				ents = append(ents, parseBLS(strings.TrimSuffix(n, ".conf"), p, text))
			}
		}
		if len(ents) == 0 {
			continue
		}
		conf, _, err := readConfig(v, dir+"/loader.conf")
		if err != nil {
			return nil, err
		}
		be := defaultBLS(ents, blsDefault(conf))
		return &entry{vol: v, source: fmt.Sprintf("%s %s", v, be.path), kernel: be.linux, initrds: be.initrds, options: be.options}, nil
	}
	return nil, nil
}

// maxBLSEntries bounds the work on a directory of entries (a real one has
// a few, one per installed kernel).
const maxBLSEntries = 256

type blsEntry struct {
	id, path                string
	version, sortKey, linux string
	initrds                 []string
	options                 string
}

func parseBLS(id, p, text string) blsEntry {
	e := blsEntry{id: id, path: p}
	var opts []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		k, val, _ := strings.Cut(line, " ")
		val = strings.TrimSpace(val)
		switch k {
		case "version":
			e.version = val
		case "sort-key":
			e.sortKey = val
		case "linux":
			e.linux = val
		case "initrd":
			e.initrds = append(e.initrds, val)
		case "options":
			opts = append(opts, val)
		}
	}
	e.options = strings.Join(opts, " ")
	return e
}

// blsDefault returns loader.conf's "default" pattern, or "".
func blsDefault(conf string) string {
	for _, line := range strings.Split(conf, "\n") {
		if k, v, _ := strings.Cut(strings.TrimSpace(line), " "); k == "default" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// defaultBLS picks the entry matching the default pattern, else the first
// in the specification's order: by sort-key, then the highest version,
// then the highest file name.
func defaultBLS(ents []blsEntry, pattern string) blsEntry {
	sort.Slice(ents, func(i, j int) bool {
		a, b := ents[i], ents[j]
		if a.sortKey != b.sortKey {
			if a.sortKey == "" || b.sortKey == "" {
				return b.sortKey == "" // entries with a sort-key first
			}
			return a.sortKey < b.sortKey
		}
		if c := vercmp(a.version, b.version); c != 0 {
			return c > 0
		}
		return vercmp(a.id, b.id) > 0
	})
	if pattern != "" {
		for _, e := range ents {
			for _, name := range []string{e.id, e.id + ".conf"} {
				if ok, _ := path.Match(pattern, name); ok {
					return e
				}
			}
		}
	}
	return ents[0]
}

// vercmp compares versions as rpm and the BLS do: runs of digits
// numerically, runs of letters as strings, a digit run above a letter
// run, '~' below everything, other characters only separate.
func vercmp(a, b string) int {
	isAlnum := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	for {
		for len(a) > 0 && !isAlnum(a[0]) && a[0] != '~' {
			a = a[1:]
		}
		for len(b) > 0 && !isAlnum(b[0]) && b[0] != '~' {
			b = b[1:]
		}
		switch {
		case strings.HasPrefix(a, "~") || strings.HasPrefix(b, "~"):
			if !strings.HasPrefix(b, "~") {
				return -1
			}
			if !strings.HasPrefix(a, "~") {
				return 1
			}
			a, b = a[1:], b[1:]
			continue
		case a == "" || b == "":
			return strings.Compare(a, b) // the longer one is newer
		}
		digits := isDigit(a[0])
		if digits != isDigit(b[0]) {
			if digits {
				return 1
			}
			return -1
		}
		seg := func(s string) (string, string) {
			i := 0
			for i < len(s) && isAlnum(s[i]) && isDigit(s[i]) == digits {
				i++
			}
			return s[:i], s[i:]
		}
		var sa, sb string
		sa, a = seg(a)
		sb, b = seg(b)
		if digits {
			sa, sb = strings.TrimLeft(sa, "0"), strings.TrimLeft(sb, "0")
			if len(sa) != len(sb) {
				if len(sa) > len(sb) {
					return 1
				}
				return -1
			}
		}
		if c := strings.Compare(sa, sb); c != 0 {
			return c
		}
	}
}

// findVmlinuz falls back to the newest /boot/vmlinuz-* (or /vmlinuz-* on
// a separate /boot) with its matching initrd, rooted at the filesystem
// that holds /etc.
func findVmlinuz(v *volume, vols []*volume) (*entry, error) {
	for _, dir := range []string{"/boot", "/"} {
		names, err := v.fs.ReadDir(dir)
		if errors.Is(err, errNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", v, dir, err)
		}
		var best string
		for _, n := range names {
			if ver, ok := strings.CutPrefix(n, "vmlinuz-"); ok && (best == "" || vercmp(ver, best) > 0) {
				best = ver
			}
		}
		if best == "" {
			continue
		}
		e := &entry{vol: v, kernel: path.Join(dir, "vmlinuz-"+best)}
		e.source = fmt.Sprintf("%s %s", v, e.kernel)
		for _, n := range []string{"initrd.img-" + best, "initramfs-" + best + ".img", "initrd-" + best + ".img"} {
			if hasName(names, n) {
				e.initrds = []string{path.Join(dir, n)}
				break
			}
		}
		root := v
		if dir == "/" { // a separate /boot: the root is the one with /etc
			root = nil
			for _, o := range vols {
				if _, err := o.fs.ReadDir("/etc"); err == nil && o != v {
					root = o
					break
				}
			}
			if root == nil {
				return nil, fmt.Errorf("%s: found %s but no root filesystem beside it (none holds /etc)", v, e.kernel)
			}
		}
		e.options = "root=UUID=" + root.fs.UUID() + " ro"
		return e, nil
	}
	return nil, nil
}

func hasName(names []string, n string) bool {
	for _, m := range names {
		if m == n {
			return true
		}
	}
	return false
}
