// Package cabi reads struct sizes, field offsets and ioctl numbers from
// the kernel's own <linux/userfaultfd.h> through cgo. Only the uffd
// package's tests import it, so the VMM binary itself stays free of cgo.
package cabi

/*
#include <stddef.h>
#include <sys/ioctl.h>
#include <linux/userfaultfd.h>

static size_t off_msg_event(void)       { return offsetof(struct uffd_msg, event); }
static size_t off_msg_address(void)     { return offsetof(struct uffd_msg, arg.pagefault.address); }
static size_t off_copy_copy(void)       { return offsetof(struct uffdio_copy, copy); }
static size_t off_zeropage_zero(void)   { return offsetof(struct uffdio_zeropage, zeropage); }
static size_t off_register_ioctls(void) { return offsetof(struct uffdio_register, ioctls); }
// The ioctl numbers are function-like macros, which cgo can't evaluate.
static unsigned long ioc_api(void)        { return UFFDIO_API; }
static unsigned long ioc_register(void)   { return UFFDIO_REGISTER; }
static unsigned long ioc_unregister(void) { return UFFDIO_UNREGISTER; }
static unsigned long ioc_wake(void)       { return UFFDIO_WAKE; }
static unsigned long ioc_copy(void)       { return UFFDIO_COPY; }
static unsigned long ioc_zeropage(void)   { return UFFDIO_ZEROPAGE; }
static unsigned long ioc_new(void)        { return USERFAULTFD_IOC_NEW; }
*/
import "C"

// Sizes of the structs the uffd package mirrors, by C name.
var Sizes = map[string]uintptr{
	"uffd_msg":        C.sizeof_struct_uffd_msg,
	"uffdio_api":      C.sizeof_struct_uffdio_api,
	"uffdio_range":    C.sizeof_struct_uffdio_range,
	"uffdio_register": C.sizeof_struct_uffdio_register,
	"uffdio_copy":     C.sizeof_struct_uffdio_copy,
	"uffdio_zeropage": C.sizeof_struct_uffdio_zeropage,
}

// Offsets of the fields the VMM reads or writes.
var Offsets = map[string]uintptr{
	"uffd_msg.event":                 uintptr(C.off_msg_event()),
	"uffd_msg.arg.pagefault.address": uintptr(C.off_msg_address()),
	"uffdio_copy.copy":               uintptr(C.off_copy_copy()),
	"uffdio_zeropage.zeropage":       uintptr(C.off_zeropage_zero()),
	"uffdio_register.ioctls":         uintptr(C.off_register_ioctls()),
}

// Constants the VMM uses. UFFD_FEATURE_WP_ASYNC (Linux 6.7) is not among
// them: Debian 12's headers (6.1) predate it.
var Constants = map[string]uint64{
	"UFFD_API":                     C.UFFD_API,
	"UFFDIO_API":                   uint64(C.ioc_api()),
	"UFFDIO_REGISTER":              uint64(C.ioc_register()),
	"UFFDIO_UNREGISTER":            uint64(C.ioc_unregister()),
	"UFFDIO_WAKE":                  uint64(C.ioc_wake()),
	"UFFDIO_COPY":                  uint64(C.ioc_copy()),
	"UFFDIO_ZEROPAGE":              uint64(C.ioc_zeropage()),
	"USERFAULTFD_IOC_NEW":          uint64(C.ioc_new()),
	"UFFDIO_REGISTER_MODE_MISSING": C.UFFDIO_REGISTER_MODE_MISSING,
	"UFFDIO_REGISTER_MODE_WP":      C.UFFDIO_REGISTER_MODE_WP,
	"UFFD_USER_MODE_ONLY":          C.UFFD_USER_MODE_ONLY,
	"UFFD_FEATURE_MISSING_SHMEM":   C.UFFD_FEATURE_MISSING_SHMEM,
	"UFFD_EVENT_PAGEFAULT":         C.UFFD_EVENT_PAGEFAULT,
	"_UFFDIO_COPY":                 C._UFFDIO_COPY,
	"_UFFDIO_ZEROPAGE":             C._UFFDIO_ZEROPAGE,
}
