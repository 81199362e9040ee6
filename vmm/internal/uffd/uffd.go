// Package uffd is the userfaultfd ABI (<linux/userfaultfd.h>) the VMM
// uses: post-copy migration's missing-page faults (vmm/memory) and the
// asynchronous write protection that turns off fault-around on the VMM's
// own text (vmm/procmem). One copy of the numbers, checked against the
// kernel's header in this package's tests.
package uffd

// Ioctl numbers, feature and mode bits, events.
const (
	API                 = 0xaa
	IocAPI              = 0xc018aa3f // _IOWR(0xaa, 0x3f, struct uffdio_api)
	IocRegister         = 0xc020aa00 // _IOWR(0xaa, 0x00, struct uffdio_register)
	IocUnregister       = 0x8010aa01 // _IOR(0xaa, 0x01, struct uffdio_range)
	IocWake             = 0x8010aa02 // _IOR(0xaa, 0x02, struct uffdio_range)
	IocCopy             = 0xc028aa03 // _IOWR(0xaa, 0x03, struct uffdio_copy)
	IocZeropage         = 0xc020aa04 // _IOWR(0xaa, 0x04, struct uffdio_zeropage)
	IocNew              = 0xaa00     // USERFAULTFD_IOC_NEW: _IO(0xaa, 0x00), on /dev/userfaultfd (Linux 6.1)
	UserModeOnly        = 1          // UFFD_USER_MODE_ONLY, a userfaultfd(2) flag: needs no privilege
	RegisterMissing     = 1          // UFFDIO_REGISTER_MODE_MISSING
	RegisterWP          = 1 << 1     // UFFDIO_REGISTER_MODE_WP
	FeatureMissingShmem = 1 << 5     // UFFD_FEATURE_MISSING_SHMEM
	FeatureWPAsync      = 1 << 15    // UFFD_FEATURE_WP_ASYNC, Linux 6.7
	EventPagefault      = 0x12       // UFFD_EVENT_PAGEFAULT
	// Bits of uffdio_register.ioctls: the ioctls the range supports.
	HasCopy     = 1 << 3 // 1 << _UFFDIO_COPY
	HasZeropage = 1 << 4 // 1 << _UFFDIO_ZEROPAGE
)

// struct uffd_msg: its size and the offsets read from it.
const (
	MsgSize    = 32
	MsgEvent   = 0
	MsgAddress = 16 // arg.pagefault.address
)

// APIArg is struct uffdio_api.
type APIArg struct{ API, Features, Ioctls uint64 }

// Range is struct uffdio_range.
type Range struct{ Start, Len uint64 }

// RegisterArg is struct uffdio_register.
type RegisterArg struct {
	Range  Range
	Mode   uint64
	Ioctls uint64
}

// CopyArg is struct uffdio_copy.
type CopyArg struct {
	Dst, Src, Len, Mode uint64
	Copy                int64
}

// ZeropageArg is struct uffdio_zeropage.
type ZeropageArg struct {
	Range    Range
	Mode     uint64
	Zeropage int64
}
