package seccomp

import "fmt"

// Mode says what a system call outside the list does.
type Mode string

// The modes.
const (
	Off  Mode = "off"  // no filter
	Log  Mode = "log"  // the call runs and the kernel logs it (audit, dmesg)
	Kill Mode = "kill" // the whole process dies of SIGSYS
)

// ParseMode parses a --seccomp value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, Log, Kill:
		return m, nil
	}
	return "", fmt.Errorf("seccomp mode %q: want off, log or kill", s)
}
