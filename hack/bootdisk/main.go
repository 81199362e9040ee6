// Command bootdisk writes a bootable test disk: a qcow2 image with a GPT
// whose one ext4 partition holds /boot with a Boot Loader Specification
// entry for the given kernel and initramfs (disktest.BLSPart, the layout
// the tests of `vmm run --boot-disk` use). hack/cluster/guest-disk.sh puts
// it in the test guest's containerDisk image.
//
//	bootdisk -kernel bzImage [-initrd initramfs.cpio] [-options "..."] -o disk.qcow2
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kubevmm/kubevmm/vmm/boot/disk/disktest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bootdisk:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("bootdisk", flag.ContinueOnError)
	out := fs.String("o", "", "output qcow2 image")
	kernelPath := fs.String("kernel", "", "kernel (bzImage) for the entry")
	initrdPath := fs.String("initrd", "", "initramfs for the entry (optional)")
	version := fs.String("version", "6.1", "the entry's version (file names under /boot)")
	options := fs.String("options", "", "the entry's kernel options")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *kernelPath == "" || fs.NArg() > 0 {
		return errors.New("usage: bootdisk -kernel FILE [-initrd FILE] [-version V] [-options S] -o OUT.qcow2")
	}
	kernel, err := os.ReadFile(*kernelPath)
	if err != nil {
		return err
	}
	var initrd []byte
	if *initrdPath != "" {
		if initrd, err = os.ReadFile(*initrdPath); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp(filepath.Dir(*out), ".bootdisk-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }() // scratch files only
	img, err := disktest.Write(dir, disktest.Disk{Label: "gpt", Qcow2: true, Parts: []disktest.Part{
		disktest.BLSPart(*version, kernel, initrd, *options),
	}})
	if err != nil {
		return err
	}
	return os.Rename(img, *out)
}
