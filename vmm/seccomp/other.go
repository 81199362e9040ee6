//go:build !(linux && amd64)

package seccomp

import "fmt"

// Install has no system call table for this platform: only Off works.
func Install(mode Mode) error {
	if mode == Off {
		return nil
	}
	return fmt.Errorf("seccomp: no filter for this platform; use --seccomp=off")
}
