// Package kvm is a thin, typed layer over the Linux KVM API (/dev/kvm).
//
// Every struct here mirrors one from <linux/kvm.h> / <asm/kvm.h> byte for
// byte; abi_test.go compares sizes, field offsets and ioctl numbers against
// the kernel headers through cgo, so a wrong layout fails the build's tests
// rather than corrupting a guest.
package kvm

import "unsafe"

// ioctl number encoding (asm-generic/ioctl.h).
const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2

	kvmio = 0xAE
)

// IoctlType is the type byte (bits 8-15) of every KVM ioctl number: the
// VMM's seccomp filter allows ioctls by it.
const IoctlType = kvmio

func ioc(dir, nr, size uintptr) uintptr { return dir<<30 | size<<16 | kvmio<<8 | nr }
func io(nr uintptr) uintptr             { return ioc(iocNone, nr, 0) }
func ior(nr, size uintptr) uintptr      { return ioc(iocRead, nr, size) }
func iow(nr, size uintptr) uintptr      { return ioc(iocWrite, nr, size) }
func iowr(nr, size uintptr) uintptr     { return ioc(iocRead|iocWrite, nr, size) }

// System ioctls (on the /dev/kvm fd).
var (
	ioctlGetAPIVersion       = io(0x00)
	ioctlCreateVM            = io(0x01)
	ioctlGetMSRIndexList     = iowr(0x02, unsafe.Sizeof(msrList{}))
	ioctlCheckExtension      = io(0x03)
	ioctlGetVCPUMmapSize     = io(0x04)
	ioctlGetSupportedCPUID   = iowr(0x05, unsafe.Sizeof(cpuid2Header{}))
	ioctlGetMSRFeatureIndexL = iowr(0x0a, unsafe.Sizeof(msrList{}))
)

// VM ioctls.
var (
	ioctlCreateVCPU          = io(0x41)
	ioctlGetDirtyLog         = iow(0x42, unsafe.Sizeof(dirtyLog{}))
	ioctlSetUserMemoryRegion = iow(0x46, unsafe.Sizeof(UserspaceMemoryRegion{}))
	ioctlSetTSSAddr          = io(0x47)
	ioctlSetIdentityMapAddr  = iow(0x48, 8)
	ioctlCreateIRQChip       = io(0x60)
	ioctlIRQLine             = iow(0x61, unsafe.Sizeof(irqLevel{}))
	ioctlGetIRQChip          = iowr(0x62, unsafe.Sizeof(IRQChip{}))
	ioctlSetIRQChip          = ior(0x63, unsafe.Sizeof(IRQChip{})) // _IOR in the header, for historical reasons
	ioctlSetGSIRouting       = iow(0x6a, unsafe.Sizeof(irqRoutingHeader{}))
	ioctlIRQFD               = iow(0x76, unsafe.Sizeof(irqfd{}))
	ioctlCreatePIT2          = iow(0x77, unsafe.Sizeof(PITConfig{}))
	ioctlIOEventFD           = iow(0x79, unsafe.Sizeof(ioeventfd{}))
	ioctlSetClock            = iow(0x7b, unsafe.Sizeof(ClockData{}))
	ioctlGetClock            = ior(0x7c, unsafe.Sizeof(ClockData{}))
	ioctlGetPIT2             = ior(0x9f, unsafe.Sizeof(PITState2{}))
	ioctlSetPIT2             = iow(0xa0, unsafe.Sizeof(PITState2{}))
	ioctlEnableCap           = iow(0xa3, unsafe.Sizeof(enableCap{}))
	ioctlSignalMSI           = iow(0xa5, unsafe.Sizeof(MSI{}))
	ioctlClearDirtyLog       = iowr(0xc0, unsafe.Sizeof(clearDirtyLog{}))
)

// vCPU ioctls.
var (
	ioctlRun           = io(0x80)
	ioctlGetRegs       = ior(0x81, unsafe.Sizeof(Regs{}))
	ioctlSetRegs       = iow(0x82, unsafe.Sizeof(Regs{}))
	ioctlGetSregs      = ior(0x83, unsafe.Sizeof(Sregs{}))
	ioctlSetSregs      = iow(0x84, unsafe.Sizeof(Sregs{}))
	ioctlTranslate     = iowr(0x85, unsafe.Sizeof(Translation{}))
	ioctlGetMSRs       = iowr(0x88, unsafe.Sizeof(msrsHeader{}))
	ioctlSetMSRs       = iow(0x89, unsafe.Sizeof(msrsHeader{}))
	ioctlGetFPU        = ior(0x8c, unsafe.Sizeof(FPU{}))
	ioctlSetFPU        = iow(0x8d, unsafe.Sizeof(FPU{}))
	ioctlGetLAPIC      = ior(0x8e, unsafe.Sizeof(LAPICState{}))
	ioctlSetLAPIC      = iow(0x8f, unsafe.Sizeof(LAPICState{}))
	ioctlSetCPUID2     = iow(0x90, unsafe.Sizeof(cpuid2Header{}))
	ioctlGetCPUID2     = iowr(0x91, unsafe.Sizeof(cpuid2Header{}))
	ioctlNMI           = io(0x9a)
	ioctlGetMPState    = ior(0x98, unsafe.Sizeof(MPState{}))
	ioctlSetMPState    = iow(0x99, unsafe.Sizeof(MPState{}))
	ioctlGetVCPUEvents = ior(0x9f, unsafe.Sizeof(VCPUEvents{}))
	ioctlSetVCPUEvents = iow(0xa0, unsafe.Sizeof(VCPUEvents{}))
	ioctlGetDebugRegs  = ior(0xa1, unsafe.Sizeof(DebugRegs{}))
	ioctlSetDebugRegs  = iow(0xa2, unsafe.Sizeof(DebugRegs{}))
	ioctlSetTSCKHz     = io(0xa2)
	ioctlGetTSCKHz     = io(0xa3)
	ioctlGetXSave      = ior(0xa4, unsafe.Sizeof(XSave{}))
	ioctlSetXSave      = iow(0xa5, unsafe.Sizeof(XSave{}))
	ioctlGetXCRs       = ior(0xa6, unsafe.Sizeof(XCRs{}))
	ioctlSetXCRs       = iow(0xa7, unsafe.Sizeof(XCRs{}))
	ioctlKVMClockCtrl  = io(0xad)
)

// Cap is a capability (KVM_CAP_*), for CheckExtension and EnableCap.
type Cap uintptr

// The capabilities this package asks about.
const (
	CapIRQChip                Cap = 0
	CapHLT                    Cap = 1
	CapUserMemory             Cap = 3
	CapSetTSSAddr             Cap = 4
	CapExtCPUID               Cap = 7
	CapNrVCPUs                Cap = 9
	CapNrMemslots             Cap = 10
	CapPIT                    Cap = 11
	CapMPState                Cap = 14
	CapIRQRouting             Cap = 25
	CapIRQFD                  Cap = 32
	CapPIT2                   Cap = 33
	CapPITState2              Cap = 35
	CapIOEventFD              Cap = 36
	CapSetIdentityMapAddr     Cap = 37
	CapAdjustClock            Cap = 39
	CapVCPUEvents             Cap = 41
	CapDebugRegs              Cap = 50
	CapXSave                  Cap = 55
	CapXCRs                   Cap = 56
	CapTSCControl             Cap = 60
	CapGetTSCKHz              Cap = 61
	CapMaxVCPUs               Cap = 66
	CapTSCDeadlineTimer       Cap = 72
	CapKVMClockCtrl           Cap = 76
	CapSignalMSI              Cap = 77
	CapSplitIRQChip           Cap = 121
	CapMaxVCPUID              Cap = 128
	CapX2APICAPI              Cap = 129
	CapImmediateExit          Cap = 136
	CapGetMSRFeatures         Cap = 153
	CapManualDirtyLogProtect2 Cap = 168
	CapDirtyLogRing           Cap = 192
	CapXSave2                 Cap = 208
)

// Flags and enumerations of the ioctls below.
const (
	APIVersion                     = 12
	MemLogDirtyPages               = 1 << 0 // KVM_MEM_LOG_DIRTY_PAGES
	MemReadonly                    = 1 << 1 // KVM_MEM_READONLY
	DirtyLogManualProtectEnable    = 1 << 0 // KVM_DIRTY_LOG_MANUAL_PROTECT_ENABLE
	DirtyLogInitiallySet           = 1 << 1 // KVM_DIRTY_LOG_INITIALLY_SET
	PITSpeakerDummy                = 1      // KVM_PIT_SPEAKER_DUMMY
	IRQFDFlagDeassign              = 1 << 0
	IRQFDFlagResample              = 1 << 1
	IOEventFDFlagDatamatch         = 1 << 0
	IOEventFDFlagPIO               = 1 << 1
	IOEventFDFlagDeassign          = 1 << 2
	IRQRoutingIRQChip              = 1
	IRQRoutingMSI                  = 2
	IRQChipPICMaster               = 0
	IRQChipPICSlave                = 1
	IRQChipIOAPIC                  = 2
	VCPUEventValidNMIPending       = 0x1
	VCPUEventValidSIPIVector       = 0x2
	VCPUEventValidShadow           = 0x4
	VCPUEventValidSMM              = 0x8
	VCPUEventValidPayload          = 0x10
	VCPUEventValidTripleFault      = 0x20
	ClockTSCStable                 = 2 // KVM_CLOCK_TSC_STABLE
	MPStateRunnable                = 0
	MPStateUninitialized           = 1
	MPStateInitReceived            = 2
	MPStateHalted                  = 3
	MPStateSIPIReceived            = 4
	CPUIDFlagSignificantIndex      = 1 << 0
	ExitIOIn                       = 0
	ExitIOOut                      = 1
	InternalErrorEmulation         = 1
	InternalErrorSimulEx           = 2
	InternalErrorDeliveryEv        = 3
	InternalErrorUnexpectedExitRsn = 4
	SystemEventShutdown            = 1
	SystemEventReset               = 2
	SystemEventCrash               = 3
)

// ExitReason is kvm_run.exit_reason.
type ExitReason uint32

// The ExitReason values (KVM_EXIT_*).
const (
	ExitUnknown       ExitReason = 0
	ExitException     ExitReason = 1
	ExitIO            ExitReason = 2
	ExitHypercall     ExitReason = 3
	ExitDebug         ExitReason = 4
	ExitHLT           ExitReason = 5
	ExitMMIO          ExitReason = 6
	ExitIRQWindowOpen ExitReason = 7
	ExitShutdown      ExitReason = 8
	ExitFailEntry     ExitReason = 9
	ExitIntr          ExitReason = 10
	ExitNMI           ExitReason = 16
	ExitInternalError ExitReason = 17
	ExitSystemEvent   ExitReason = 24
	ExitIOAPICEOI     ExitReason = 26
	ExitDirtyRingFull ExitReason = 31
)

var exitNames = map[ExitReason]string{
	ExitUnknown: "unknown", ExitException: "exception", ExitIO: "io", ExitHypercall: "hypercall",
	ExitDebug: "debug", ExitHLT: "hlt", ExitMMIO: "mmio", ExitIRQWindowOpen: "irq-window-open",
	ExitShutdown: "shutdown", ExitFailEntry: "fail-entry", ExitIntr: "intr", ExitNMI: "nmi",
	ExitInternalError: "internal-error", ExitSystemEvent: "system-event", ExitIOAPICEOI: "ioapic-eoi",
	ExitDirtyRingFull: "dirty-ring-full",
}

func (r ExitReason) String() string {
	if n, ok := exitNames[r]; ok {
		return n
	}
	return "exit-" + itoa(uint64(r))
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

// Regs is struct kvm_regs.
type Regs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

// Segment is struct kvm_segment.
type Segment struct {
	Base                           uint64
	Limit                          uint32
	Selector                       uint16
	Type                           uint8
	Present, DPL, DB, S, L, G, AVL uint8
	Unusable                       uint8
	_                              uint8
}

// DTable is struct kvm_dtable (GDT/IDT register).
type DTable struct {
	Base  uint64
	Limit uint16
	_     [3]uint16
}

// Sregs is struct kvm_sregs.
type Sregs struct {
	CS, DS, ES, FS, GS, SS, TR, LDT Segment
	GDT, IDT                        DTable
	CR0, CR2, CR3, CR4, CR8         uint64
	EFER                            uint64
	APICBase                        uint64
	InterruptBitmap                 [4]uint64
}

// FPU is struct kvm_fpu (legacy FXSAVE view of the x87/SSE state).
type FPU struct {
	FPR        [8][16]uint8
	FCW        uint16
	FSW        uint16
	FTWX       uint8
	_          uint8
	LastOpcode uint16
	LastIP     uint64
	LastDP     uint64
	XMM        [16][16]uint8
	MXCSR      uint32
	_          uint32
}

// MSREntry is struct kvm_msr_entry.
type MSREntry struct {
	Index uint32
	_     uint32
	Data  uint64
}

type msrsHeader struct {
	NMSRs uint32
	_     uint32
}

type msrList struct {
	NMSRs uint32
}

// CPUIDEntry is struct kvm_cpuid_entry2.
type CPUIDEntry struct {
	Function, Index, Flags uint32
	EAX, EBX, ECX, EDX     uint32
	_                      [3]uint32
}

type cpuid2Header struct {
	NEnt uint32
	_    uint32
}

// LAPICState is struct kvm_lapic_state: the local APIC's 1 KiB register page.
type LAPICState struct {
	Regs [1024]byte
}

// VCPUEvents is struct kvm_vcpu_events: pending/injected exceptions,
// interrupts, NMIs and SIPI state.
type VCPUEvents struct {
	Exception struct {
		Injected, Nr, HasErrorCode, Pending uint8
		ErrorCode                           uint32
	}
	Interrupt struct {
		Injected, Nr, Soft, Shadow uint8
	}
	NMI struct {
		Injected, Pending, Masked, _ uint8
	}
	SIPIVector uint32
	Flags      uint32
	SMI        struct {
		SMM, Pending, SMMInsideNMI, LatchedInit uint8
	}
	TripleFaultPending  uint8
	_                   [26]uint8
	ExceptionHasPayload uint8
	ExceptionPayload    uint64
}

// MPState is struct kvm_mp_state.
type MPState struct {
	State uint32
}

// DebugRegs is struct kvm_debugregs.
type DebugRegs struct {
	DB    [4]uint64
	DR6   uint64
	DR7   uint64
	Flags uint64
	_     [9]uint64
}

// XSave is struct kvm_xsave (the legacy 4 KiB form; enough for x87, SSE,
// AVX and AVX-512, i.e. up to XCR0 0xe7).
type XSave struct {
	Region [1024]uint32
}

// Bytes views the XSAVE area as bytes (standard, non-compacted format).
func (x *XSave) Bytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&x.Region[0])), len(x.Region)*4)
}

// XCR is struct kvm_xcr.
type XCR struct {
	XCR   uint32
	_     uint32
	Value uint64
}

// XCRs is struct kvm_xcrs.
type XCRs struct {
	NrXCRs uint32
	Flags  uint32
	XCRs   [16]XCR
	_      [16]uint64
}

// IRQChip is struct kvm_irqchip; Chip holds a kvm_pic_state or
// kvm_ioapic_state depending on ChipID.
type IRQChip struct {
	ChipID uint32
	_      uint32
	Chip   [512]byte
}

// PITChannelState is struct kvm_pit_channel_state.
type PITChannelState struct {
	Count                               uint32
	LatchedCount                        uint16
	CountLatched, StatusLatched, Status uint8
	ReadState, WriteState, WriteLatch   uint8
	RWMode, Mode, BCD, Gate             uint8
	CountLoadTime                       int64
}

// PITState2 is struct kvm_pit_state2.
type PITState2 struct {
	Channels [3]PITChannelState
	Flags    uint32
	_        [9]uint32
}

// PITConfig is struct kvm_pit_config.
type PITConfig struct {
	Flags uint32
	_     [15]uint32
}

// ClockData is struct kvm_clock_data.
type ClockData struct {
	Clock    uint64
	Flags    uint32
	_        uint32
	Realtime uint64
	HostTSC  uint64
	_        [4]uint32
}

// UserspaceMemoryRegion is struct kvm_userspace_memory_region.
type UserspaceMemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

type dirtyLog struct {
	Slot   uint32
	_      uint32
	Bitmap uint64 // user pointer
}

type clearDirtyLog struct {
	Slot      uint32
	NumPages  uint32
	FirstPage uint64
	Bitmap    uint64 // user pointer
}

type irqLevel struct {
	IRQ   uint32
	Level uint32
}

type irqfd struct {
	FD         uint32
	GSI        uint32
	Flags      uint32
	ResampleFD uint32
	_          [16]uint8
}

type ioeventfd struct {
	Datamatch uint64
	Addr      uint64
	Len       uint32
	FD        int32
	Flags     uint32
	_         [36]uint8
}

// MSI is struct kvm_msi.
type MSI struct {
	AddressLo, AddressHi, Data, Flags, DevID uint32
	_                                        [12]uint8
}

type irqRoutingHeader struct {
	Nr    uint32
	Flags uint32
}

// IRQRoutingEntry is struct kvm_irq_routing_entry. U holds the union:
// for IRQRoutingIRQChip {irqchip, pin}, for IRQRoutingMSI {address_lo,
// address_hi, data, devid}.
type IRQRoutingEntry struct {
	GSI   uint32
	Type  uint32
	Flags uint32
	_     uint32
	U     [8]uint32
}

type enableCap struct {
	Cap   uint32
	Flags uint32
	Args  [4]uint64
	_     [64]uint8
}

// Translation is struct kvm_translate.
type Translation struct {
	LinearAddress   uint64
	PhysicalAddress uint64
	Valid           uint8
	Writeable       uint8
	Usermode        uint8
	_               [5]uint8
}

// Offsets inside struct kvm_run (the shared page every vCPU maps).
const (
	runImmediateExit = 1
	runExitReason    = 8
	runExitUnion     = 32 // start of the per-exit-reason union
)
