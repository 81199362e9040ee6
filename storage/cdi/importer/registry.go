package importer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kubevmm/kubevmm/storage/cdi/registry"
	"github.com/kubevmm/kubevmm/storage/cdi/sparse"
)

// SourceRegistry is a registry import's Source.
const SourceRegistry = "registry"

// RegistryOptions are a registry import's: Options.URL is the image
// (docker://...), AccessKey and SecretKey its credentials, CAs its CAs.
type RegistryOptions struct {
	// PullMethod is "pod" (pulled here through storage/cdi/registry) or
	// "node" (the kubelet pulled the image: this process runs in it and
	// the disk is under DiskDir).
	PullMethod string
	// Architecture picks from a multi-platform index (pod only).
	Architecture string
	// Insecure skips TLS verification (pod only).
	Insecure bool
	// DiskDir is the image's disk directory for PullMethod node.
	DiskDir string
	// Timeout bounds each registry request's connect and wait for an
	// answer (default 30s): an unreachable registry fails the attempt.
	Timeout time.Duration
}

// fetchRegistry is a registry source's image to convert, as a local file
// (pulled onto scratch, or in place in the node-pulled image), and what to
// do with it once converted.
func fetchRegistry(ctx context.Context, o Options) (string, func(), error) {
	ref, err := registry.ParseURL(o.URL)
	if err != nil {
		return "", nil, err
	}
	switch o.Registry.PullMethod {
	case "node":
		img, err := nodeDisk(o.Registry.DiskDir, ref)
		return img, func() {}, err
	case "pod", "":
		img, err := pull(ctx, o, ref)
		if err != nil {
			return "", nil, err
		}
		return img, func() { _ = os.Remove(img) }, nil
	}
	return "", nil, fmt.Errorf("registry pull method %q: want pod or node", o.Registry.PullMethod)
}

// nodeDisk is the one regular file in the disk directory of the image
// this process runs in. The importer runs as user 107: a disk that user
// cannot read fails saying so, at once.
func nodeDisk(dir string, ref registry.Ref) (string, error) {
	unreadable := func(err error) error {
		return fmt.Errorf("image %s: the importer cannot read its disk (a containerDisk's disk must be readable by user 107, KubeVirt's qemu user, as hack/containerdisk pushes it): %w",
			ref, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("image %s: %w", ref, registry.ErrNoDisk)
		}
		if errors.Is(err, os.ErrPermission) {
			return "", unreadable(err)
		}
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("image %s: %w", ref, registry.ErrNoDisk)
	}
	sort.Strings(names)
	path := filepath.Join(dir, names[0])
	f, err := os.Open(path)
	if errors.Is(err, os.ErrPermission) {
		return "", unreadable(err)
	}
	if err != nil {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	return path, f.Close()
}

// pull streams the image's disk into the scratch directory (a qcow2 is
// read at random, so it must be whole on a disk first), decompressed if
// it is gz or xz, sparse.
func pull(ctx context.Context, o Options, ref registry.Ref) (string, error) {
	c, err := registry.New(registry.Options{Username: o.AccessKey, Password: o.SecretKey, CAs: o.CAs,
		Insecure: o.Registry.Insecure, Architecture: o.Registry.Architecture, Timeout: o.Registry.Timeout})
	if err != nil {
		return "", err
	}
	path := filepath.Join(o.ScratchDir, "image")
	err = c.Disk(ctx, ref, func(name string, size int64, r io.Reader) error {
		img, err := decompress(&counting{r: r, total: size, p: o.Progress}, o.URL+" ("+name+")")
		if err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
		if err != nil {
			return fmt.Errorf("creating the scratch image: %w", err)
		}
		n, err := sparse.Copy(f, img, true, -1)
		if err == nil {
			err = f.Truncate(n)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("no space on the scratch PVC for the image %s: %w", o.URL, err)
		}
		return err
	})
	if err != nil {
		_ = os.Remove(path)
		return "", err
	}
	return path, nil
}
