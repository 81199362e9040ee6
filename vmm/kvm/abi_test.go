package kvm

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubevmm/kubevmm/vmm/kvm/internal/kabi"
)

func TestStructSizesMatchKernelHeaders(t *testing.T) {
	goSizes := map[string]uintptr{
		"kvm_regs":                    unsafe.Sizeof(Regs{}),
		"kvm_sregs":                   unsafe.Sizeof(Sregs{}),
		"kvm_segment":                 unsafe.Sizeof(Segment{}),
		"kvm_dtable":                  unsafe.Sizeof(DTable{}),
		"kvm_fpu":                     unsafe.Sizeof(FPU{}),
		"kvm_msr_entry":               unsafe.Sizeof(MSREntry{}),
		"kvm_msrs":                    unsafe.Sizeof(msrsHeader{}),
		"kvm_msr_list":                unsafe.Sizeof(msrList{}),
		"kvm_cpuid_entry2":            unsafe.Sizeof(CPUIDEntry{}),
		"kvm_cpuid2":                  unsafe.Sizeof(cpuid2Header{}),
		"kvm_lapic_state":             unsafe.Sizeof(LAPICState{}),
		"kvm_vcpu_events":             unsafe.Sizeof(VCPUEvents{}),
		"kvm_mp_state":                unsafe.Sizeof(MPState{}),
		"kvm_debugregs":               unsafe.Sizeof(DebugRegs{}),
		"kvm_xsave":                   unsafe.Sizeof(XSave{}),
		"kvm_xcr":                     unsafe.Sizeof(XCR{}),
		"kvm_xcrs":                    unsafe.Sizeof(XCRs{}),
		"kvm_irqchip":                 unsafe.Sizeof(IRQChip{}),
		"kvm_pit_channel_state":       unsafe.Sizeof(PITChannelState{}),
		"kvm_pit_state2":              unsafe.Sizeof(PITState2{}),
		"kvm_pit_config":              unsafe.Sizeof(PITConfig{}),
		"kvm_clock_data":              unsafe.Sizeof(ClockData{}),
		"kvm_userspace_memory_region": unsafe.Sizeof(UserspaceMemoryRegion{}),
		"kvm_dirty_log":               unsafe.Sizeof(dirtyLog{}),
		"kvm_clear_dirty_log":         unsafe.Sizeof(clearDirtyLog{}),
		"kvm_irq_level":               unsafe.Sizeof(irqLevel{}),
		"kvm_irqfd":                   unsafe.Sizeof(irqfd{}),
		"kvm_ioeventfd":               unsafe.Sizeof(ioeventfd{}),
		"kvm_msi":                     unsafe.Sizeof(MSI{}),
		"kvm_irq_routing":             unsafe.Sizeof(irqRoutingHeader{}),
		"kvm_irq_routing_entry":       unsafe.Sizeof(IRQRoutingEntry{}),
		"kvm_enable_cap":              unsafe.Sizeof(enableCap{}),
		"kvm_translation":             unsafe.Sizeof(Translation{}),
	}
	require.Len(t, goSizes, len(kabi.Sizes), "every mirrored struct is checked")
	for name, want := range kabi.Sizes {
		assert.Equal(t, want, goSizes[name], "sizeof(struct %s)", name)
	}
}

func TestFieldOffsetsMatchKernelHeaders(t *testing.T) {
	var ev VCPUEvents
	var fpu FPU
	var sregs Sregs
	var pit PITChannelState
	var ioe ioeventfd
	var clk ClockData
	var re IRQRoutingEntry
	var xcrs XCRs
	goOffsets := map[string]uintptr{
		"kvm_run.immediate_exit":                runImmediateExit,
		"kvm_run.exit_reason":                   runExitReason,
		"kvm_run.io":                            runExitUnion,
		"kvm_run.io.port":                       runExitUnion + 2,
		"kvm_run.io.count":                      runExitUnion + 4,
		"kvm_run.io.data_offset":                runExitUnion + 8,
		"kvm_run.mmio.data":                     runExitUnion + 8,
		"kvm_run.mmio.len":                      runExitUnion + 16,
		"kvm_run.mmio.is_write":                 runExitUnion + 20,
		"kvm_run.internal.ndata":                runExitUnion + 4,
		"kvm_run.internal.data":                 runExitUnion + 8,
		"kvm_vcpu_events.sipi_vector":           unsafe.Offsetof(ev.SIPIVector),
		"kvm_vcpu_events.smi":                   unsafe.Offsetof(ev.SMI),
		"kvm_vcpu_events.triple_fault":          unsafe.Offsetof(ev.TripleFaultPending),
		"kvm_vcpu_events.exception_has_payload": unsafe.Offsetof(ev.ExceptionHasPayload),
		"kvm_vcpu_events.exception_payload":     unsafe.Offsetof(ev.ExceptionPayload),
		"kvm_fpu.last_ip":                       unsafe.Offsetof(fpu.LastIP),
		"kvm_fpu.mxcsr":                         unsafe.Offsetof(fpu.MXCSR),
		"kvm_sregs.cr0":                         unsafe.Offsetof(sregs.CR0),
		"kvm_sregs.apic_base":                   unsafe.Offsetof(sregs.APICBase),
		"kvm_pit_channel_state.count_load_time": unsafe.Offsetof(pit.CountLoadTime),
		"kvm_ioeventfd.fd":                      unsafe.Offsetof(ioe.FD),
		"kvm_clock_data.realtime":               unsafe.Offsetof(clk.Realtime),
		"kvm_irq_routing_entry.u":               unsafe.Offsetof(re.U),
		"kvm_xcrs.xcrs":                         unsafe.Offsetof(xcrs.XCRs),
	}
	require.Len(t, goOffsets, len(kabi.Offsets))
	for name, want := range kabi.Offsets {
		assert.Equal(t, want, goOffsets[name], "offsetof(%s)", name)
	}
}

func TestIoctlNumbersMatchKernelHeaders(t *testing.T) {
	goIoctls := map[string]uintptr{
		"KVM_GET_API_VERSION": ioctlGetAPIVersion, "KVM_CREATE_VM": ioctlCreateVM,
		"KVM_GET_MSR_INDEX_LIST": ioctlGetMSRIndexList, "KVM_CHECK_EXTENSION": ioctlCheckExtension,
		"KVM_GET_VCPU_MMAP_SIZE": ioctlGetVCPUMmapSize, "KVM_GET_SUPPORTED_CPUID": ioctlGetSupportedCPUID,
		"KVM_GET_MSR_FEATURE_INDEX_LIST": ioctlGetMSRFeatureIndexL, "KVM_CREATE_VCPU": ioctlCreateVCPU,
		"KVM_GET_DIRTY_LOG": ioctlGetDirtyLog, "KVM_SET_USER_MEMORY_REGION": ioctlSetUserMemoryRegion,
		"KVM_SET_TSS_ADDR": ioctlSetTSSAddr, "KVM_SET_IDENTITY_MAP_ADDR": ioctlSetIdentityMapAddr,
		"KVM_CREATE_IRQCHIP": ioctlCreateIRQChip, "KVM_IRQ_LINE": ioctlIRQLine,
		"KVM_GET_IRQCHIP": ioctlGetIRQChip, "KVM_SET_IRQCHIP": ioctlSetIRQChip,
		"KVM_SET_GSI_ROUTING": ioctlSetGSIRouting, "KVM_IRQFD": ioctlIRQFD,
		"KVM_CREATE_PIT2": ioctlCreatePIT2, "KVM_IOEVENTFD": ioctlIOEventFD,
		"KVM_SET_CLOCK": ioctlSetClock, "KVM_GET_CLOCK": ioctlGetClock,
		"KVM_GET_PIT2": ioctlGetPIT2, "KVM_SET_PIT2": ioctlSetPIT2,
		"KVM_ENABLE_CAP": ioctlEnableCap, "KVM_SIGNAL_MSI": ioctlSignalMSI,
		"KVM_CLEAR_DIRTY_LOG": ioctlClearDirtyLog, "KVM_RUN": ioctlRun,
		"KVM_GET_REGS": ioctlGetRegs, "KVM_SET_REGS": ioctlSetRegs,
		"KVM_GET_SREGS": ioctlGetSregs, "KVM_SET_SREGS": ioctlSetSregs,
		"KVM_TRANSLATE": ioctlTranslate, "KVM_GET_MSRS": ioctlGetMSRs, "KVM_SET_MSRS": ioctlSetMSRs,
		"KVM_GET_FPU": ioctlGetFPU, "KVM_SET_FPU": ioctlSetFPU,
		"KVM_GET_LAPIC": ioctlGetLAPIC, "KVM_SET_LAPIC": ioctlSetLAPIC,
		"KVM_SET_CPUID2": ioctlSetCPUID2, "KVM_GET_CPUID2": ioctlGetCPUID2, "KVM_NMI": ioctlNMI,
		"KVM_GET_MP_STATE": ioctlGetMPState, "KVM_SET_MP_STATE": ioctlSetMPState,
		"KVM_GET_VCPU_EVENTS": ioctlGetVCPUEvents, "KVM_SET_VCPU_EVENTS": ioctlSetVCPUEvents,
		"KVM_GET_DEBUGREGS": ioctlGetDebugRegs, "KVM_SET_DEBUGREGS": ioctlSetDebugRegs,
		"KVM_SET_TSC_KHZ": ioctlSetTSCKHz, "KVM_GET_TSC_KHZ": ioctlGetTSCKHz,
		"KVM_GET_XSAVE": ioctlGetXSave, "KVM_SET_XSAVE": ioctlSetXSave,
		"KVM_GET_XCRS": ioctlGetXCRs, "KVM_SET_XCRS": ioctlSetXCRs,
		"KVM_KVMCLOCK_CTRL": ioctlKVMClockCtrl,
	}
	require.Len(t, goIoctls, len(kabi.Ioctls))
	for name, want := range kabi.Ioctls {
		assert.Equal(t, want, goIoctls[name], "%s", name)
	}
}

func TestConstantsMatchKernelHeaders(t *testing.T) {
	goCaps := map[string]uintptr{
		"KVM_CAP_IRQCHIP": uintptr(CapIRQChip), "KVM_CAP_HLT": uintptr(CapHLT),
		"KVM_CAP_USER_MEMORY": uintptr(CapUserMemory), "KVM_CAP_SET_TSS_ADDR": uintptr(CapSetTSSAddr),
		"KVM_CAP_EXT_CPUID": uintptr(CapExtCPUID), "KVM_CAP_NR_VCPUS": uintptr(CapNrVCPUs),
		"KVM_CAP_NR_MEMSLOTS": uintptr(CapNrMemslots), "KVM_CAP_PIT": uintptr(CapPIT),
		"KVM_CAP_MP_STATE": uintptr(CapMPState), "KVM_CAP_IRQ_ROUTING": uintptr(CapIRQRouting),
		"KVM_CAP_IRQFD": uintptr(CapIRQFD), "KVM_CAP_PIT2": uintptr(CapPIT2),
		"KVM_CAP_PIT_STATE2": uintptr(CapPITState2), "KVM_CAP_IOEVENTFD": uintptr(CapIOEventFD),
		"KVM_CAP_SET_IDENTITY_MAP_ADDR": uintptr(CapSetIdentityMapAddr), "KVM_CAP_ADJUST_CLOCK": uintptr(CapAdjustClock),
		"KVM_CAP_VCPU_EVENTS": uintptr(CapVCPUEvents), "KVM_CAP_DEBUGREGS": uintptr(CapDebugRegs),
		"KVM_CAP_XSAVE": uintptr(CapXSave), "KVM_CAP_XCRS": uintptr(CapXCRs),
		"KVM_CAP_TSC_CONTROL": uintptr(CapTSCControl), "KVM_CAP_GET_TSC_KHZ": uintptr(CapGetTSCKHz),
		"KVM_CAP_MAX_VCPUS": uintptr(CapMaxVCPUs), "KVM_CAP_TSC_DEADLINE_TIMER": uintptr(CapTSCDeadlineTimer),
		"KVM_CAP_KVMCLOCK_CTRL": uintptr(CapKVMClockCtrl), "KVM_CAP_SIGNAL_MSI": uintptr(CapSignalMSI),
		"KVM_CAP_SPLIT_IRQCHIP": uintptr(CapSplitIRQChip), "KVM_CAP_MAX_VCPU_ID": uintptr(CapMaxVCPUID),
		"KVM_CAP_X2APIC_API": uintptr(CapX2APICAPI), "KVM_CAP_IMMEDIATE_EXIT": uintptr(CapImmediateExit),
		"KVM_CAP_GET_MSR_FEATURES": uintptr(CapGetMSRFeatures), "KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2": uintptr(CapManualDirtyLogProtect2),
		"KVM_CAP_DIRTY_LOG_RING": uintptr(CapDirtyLogRing), "KVM_CAP_XSAVE2": uintptr(CapXSave2),
	}
	require.Len(t, goCaps, len(kabi.Caps))
	for name, want := range kabi.Caps {
		assert.Equal(t, want, goCaps[name], "%s", name)
	}
	goExits := map[string]uintptr{}
	for r, n := range exitNames {
		goExits["KVM_EXIT_"+map[string]string{
			"unknown": "UNKNOWN", "exception": "EXCEPTION", "io": "IO", "hypercall": "HYPERCALL",
			"debug": "DEBUG", "hlt": "HLT", "mmio": "MMIO", "irq-window-open": "IRQ_WINDOW_OPEN",
			"shutdown": "SHUTDOWN", "fail-entry": "FAIL_ENTRY", "intr": "INTR", "nmi": "NMI",
			"internal-error": "INTERNAL_ERROR", "system-event": "SYSTEM_EVENT", "ioapic-eoi": "IOAPIC_EOI",
			"dirty-ring-full": "DIRTY_RING_FULL",
		}[n]] = uintptr(r)
	}
	require.Len(t, goExits, len(kabi.Exits))
	for name, want := range kabi.Exits {
		assert.Equal(t, want, goExits[name], "%s", name)
	}
}
