// Package guestimage gives tests the project's test guest (kernel and
// busybox initramfs built by hack/guest-image.sh) and lets them add their
// own /etc/kubevmm/run script, which the guest's /init runs after it
// reports its CPUs and memory.
package guestimage

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// EnvDir names the directory holding vmlinux, bzImage and initramfs.cpio.
// `make test` sets it; a test needing the guest skips (saying why) without it.
const EnvDir = "KUBEVMM_GUEST_DIR"

// Dir returns the guest image directory or skips the test.
func Dir(t testing.TB) string {
	t.Helper()
	d := os.Getenv(EnvDir)
	if d == "" {
		t.Skipf("%s is not set: run through `make test`, which builds the guest image", EnvDir)
	}
	for _, f := range []string{"vmlinux", "bzImage", "initramfs.cpio"} {
		if _, err := os.Stat(filepath.Join(d, f)); err != nil {
			t.Fatalf("guest image incomplete: %v", err)
		}
	}
	return d
}

// Kernel is the path of the uncompressed ELF kernel.
func Kernel(t testing.TB) string { return filepath.Join(Dir(t), "vmlinux") }

// BzImage is the path of the compressed kernel.
func BzImage(t testing.TB) string { return filepath.Join(Dir(t), "bzImage") }

// Initramfs is the path of the base initramfs.
func Initramfs(t testing.TB) string { return filepath.Join(Dir(t), "initramfs.cpio") }

// InitrdWithRun writes, in t.TempDir(), the base initramfs followed by a
// second cpio archive holding /etc/kubevmm/run (mode 0755) with the given
// shell script and any extra files (path -> content). The kernel unpacks
// concatenated archives in order, so these files are added to the base.
func InitrdWithRun(t testing.TB, script string, extra map[string]string) string {
	t.Helper()
	base, err := os.ReadFile(Initramfs(t))
	if err != nil {
		t.Fatal(err)
	}
	files := []File{{Name: "etc/kubevmm/run", Mode: 0o100755, Data: []byte(script)}}
	for name, data := range extra {
		files = append(files, File{Name: name, Mode: 0o100755, Data: []byte(data)})
	}
	out := filepath.Join(t.TempDir(), "initrd.cpio")
	if err := os.WriteFile(out, append(base, CPIO(files)...), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// File is one regular file for CPIO.
type File struct {
	Name string // without leading slash
	Mode uint32 // including the file type bits (0o100000 for a regular file)
	Data []byte
}

// CPIO encodes files as a "newc" cpio archive with its trailer.
func CPIO(files []File) []byte {
	var b bytes.Buffer
	ino := 0x4b564d00 // distinct from the base archive's inode numbers
	add := func(name string, mode uint32, data []byte) {
		ino++
		fmt.Fprintf(&b, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		b.WriteString(name)
		b.WriteByte(0)
		pad(&b)
		b.Write(data)
		pad(&b)
	}
	for _, f := range files {
		add(f.Name, f.Mode, f.Data)
	}
	add("TRAILER!!!", 0, nil)
	return b.Bytes()
}

func pad(b *bytes.Buffer) {
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
}
