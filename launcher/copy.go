package launcher

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// CopyFiles copies SRC DST pairs: what the init containers of kernelBoot
// and containerDisk images run (the launcher binary, copied into the pod
// first, is the only program such images need to contain). A directory
// SRC must hold exactly one regular file, which is copied (KubeVirt's
// containerDisk convention: the image under /disk).
func CopyFiles(args []string) error {
	if len(args) == 0 || len(args)%2 != 0 {
		return fmt.Errorf("copy: want SRC DST pairs, got %d arguments", len(args))
	}
	for i := 0; i < len(args); i += 2 {
		src, err := singleFile(args[i])
		if err != nil {
			return err
		}
		if err := copyFile(src, args[i+1], 0o644); err != nil {
			return err
		}
	}
	return nil
}

func singleFile(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("copy: %w", err)
	}
	if !st.IsDir() {
		return p, nil
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return "", fmt.Errorf("copy: %w", err)
	}
	var found []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			found = append(found, filepath.Join(p, e.Name()))
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("copy: %s holds %d files; name the image with path", p, len(found))
	}
	return found[0], nil
}

// Install copies the running executable into dir, for init containers of
// other images to run.
func Install(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return copyFile(self, filepath.Join(dir, filepath.Base(self)), 0o755)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	defer func() { _ = in.Close() }() // read-only
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close() // the copy failed already; the temporary is not renamed
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return os.Rename(tmp, dst)
}
