// Package kabi reads struct sizes, field offsets and ioctl numbers from the
// kernel's own <linux/kvm.h> through cgo. Only the kvm package's tests import
// it, so the VMM binary itself stays free of cgo.
package kabi

/*
#include <stddef.h>
#include <linux/kvm.h>

static size_t off_run_immediate_exit(void) { return offsetof(struct kvm_run, immediate_exit); }
static size_t off_run_exit_reason(void)    { return offsetof(struct kvm_run, exit_reason); }
static size_t off_run_io(void)             { return offsetof(struct kvm_run, io); }
static size_t off_run_io_port(void)        { return offsetof(struct kvm_run, io.port); }
static size_t off_run_io_count(void)       { return offsetof(struct kvm_run, io.count); }
static size_t off_run_io_data_offset(void) { return offsetof(struct kvm_run, io.data_offset); }
static size_t off_run_mmio_data(void)      { return offsetof(struct kvm_run, mmio.data); }
static size_t off_run_mmio_len(void)       { return offsetof(struct kvm_run, mmio.len); }
static size_t off_run_mmio_is_write(void)  { return offsetof(struct kvm_run, mmio.is_write); }
static size_t off_run_internal_ndata(void) { return offsetof(struct kvm_run, internal.ndata); }
static size_t off_run_internal_data(void)  { return offsetof(struct kvm_run, internal.data); }
static size_t off_events_sipi(void)        { return offsetof(struct kvm_vcpu_events, sipi_vector); }
static size_t off_events_smi(void)         { return offsetof(struct kvm_vcpu_events, smi); }
static size_t off_events_triple(void)      { return offsetof(struct kvm_vcpu_events, triple_fault); }
static size_t off_events_payload(void)     { return offsetof(struct kvm_vcpu_events, exception_payload); }
static size_t off_events_has_payload(void) { return offsetof(struct kvm_vcpu_events, exception_has_payload); }
static size_t off_fpu_last_ip(void)        { return offsetof(struct kvm_fpu, last_ip); }
static size_t off_fpu_mxcsr(void)          { return offsetof(struct kvm_fpu, mxcsr); }
static size_t off_sregs_cr0(void)          { return offsetof(struct kvm_sregs, cr0); }
static size_t off_sregs_apic_base(void)    { return offsetof(struct kvm_sregs, apic_base); }
static size_t off_pit_count_load(void)     { return offsetof(struct kvm_pit_channel_state, count_load_time); }
static size_t off_ioeventfd_fd(void)       { return offsetof(struct kvm_ioeventfd, fd); }
static size_t off_clock_realtime(void)     { return offsetof(struct kvm_clock_data, realtime); }
static size_t off_routing_u(void)          { return offsetof(struct kvm_irq_routing_entry, u); }
static size_t off_xcrs_xcrs(void)          { return offsetof(struct kvm_xcrs, xcrs); }
*/
import "C"

// Sizes of the structs the kvm package mirrors, by C name.
var Sizes = map[string]uintptr{
	"kvm_regs":                    C.sizeof_struct_kvm_regs,
	"kvm_sregs":                   C.sizeof_struct_kvm_sregs,
	"kvm_segment":                 C.sizeof_struct_kvm_segment,
	"kvm_dtable":                  C.sizeof_struct_kvm_dtable,
	"kvm_fpu":                     C.sizeof_struct_kvm_fpu,
	"kvm_msr_entry":               C.sizeof_struct_kvm_msr_entry,
	"kvm_msrs":                    C.sizeof_struct_kvm_msrs,
	"kvm_msr_list":                C.sizeof_struct_kvm_msr_list,
	"kvm_cpuid_entry2":            C.sizeof_struct_kvm_cpuid_entry2,
	"kvm_cpuid2":                  C.sizeof_struct_kvm_cpuid2,
	"kvm_lapic_state":             C.sizeof_struct_kvm_lapic_state,
	"kvm_vcpu_events":             C.sizeof_struct_kvm_vcpu_events,
	"kvm_mp_state":                C.sizeof_struct_kvm_mp_state,
	"kvm_debugregs":               C.sizeof_struct_kvm_debugregs,
	"kvm_xsave":                   C.sizeof_struct_kvm_xsave,
	"kvm_xcr":                     C.sizeof_struct_kvm_xcr,
	"kvm_xcrs":                    C.sizeof_struct_kvm_xcrs,
	"kvm_irqchip":                 C.sizeof_struct_kvm_irqchip,
	"kvm_pit_channel_state":       C.sizeof_struct_kvm_pit_channel_state,
	"kvm_pit_state2":              C.sizeof_struct_kvm_pit_state2,
	"kvm_pit_config":              C.sizeof_struct_kvm_pit_config,
	"kvm_clock_data":              C.sizeof_struct_kvm_clock_data,
	"kvm_userspace_memory_region": C.sizeof_struct_kvm_userspace_memory_region,
	"kvm_dirty_log":               C.sizeof_struct_kvm_dirty_log,
	"kvm_clear_dirty_log":         C.sizeof_struct_kvm_clear_dirty_log,
	"kvm_irq_level":               C.sizeof_struct_kvm_irq_level,
	"kvm_irqfd":                   C.sizeof_struct_kvm_irqfd,
	"kvm_ioeventfd":               C.sizeof_struct_kvm_ioeventfd,
	"kvm_msi":                     C.sizeof_struct_kvm_msi,
	"kvm_irq_routing":             C.sizeof_struct_kvm_irq_routing,
	"kvm_irq_routing_entry":       C.sizeof_struct_kvm_irq_routing_entry,
	"kvm_enable_cap":              C.sizeof_struct_kvm_enable_cap,
	"kvm_translation":             C.sizeof_struct_kvm_translation,
}

// Offsets of fields the kvm package reads by hand or that follow padding.
var Offsets = map[string]uintptr{
	"kvm_run.immediate_exit":                uintptr(C.off_run_immediate_exit()),
	"kvm_run.exit_reason":                   uintptr(C.off_run_exit_reason()),
	"kvm_run.io":                            uintptr(C.off_run_io()),
	"kvm_run.io.port":                       uintptr(C.off_run_io_port()),
	"kvm_run.io.count":                      uintptr(C.off_run_io_count()),
	"kvm_run.io.data_offset":                uintptr(C.off_run_io_data_offset()),
	"kvm_run.mmio.data":                     uintptr(C.off_run_mmio_data()),
	"kvm_run.mmio.len":                      uintptr(C.off_run_mmio_len()),
	"kvm_run.mmio.is_write":                 uintptr(C.off_run_mmio_is_write()),
	"kvm_run.internal.ndata":                uintptr(C.off_run_internal_ndata()),
	"kvm_run.internal.data":                 uintptr(C.off_run_internal_data()),
	"kvm_vcpu_events.sipi_vector":           uintptr(C.off_events_sipi()),
	"kvm_vcpu_events.smi":                   uintptr(C.off_events_smi()),
	"kvm_vcpu_events.triple_fault":          uintptr(C.off_events_triple()),
	"kvm_vcpu_events.exception_has_payload": uintptr(C.off_events_has_payload()),
	"kvm_vcpu_events.exception_payload":     uintptr(C.off_events_payload()),
	"kvm_fpu.last_ip":                       uintptr(C.off_fpu_last_ip()),
	"kvm_fpu.mxcsr":                         uintptr(C.off_fpu_mxcsr()),
	"kvm_sregs.cr0":                         uintptr(C.off_sregs_cr0()),
	"kvm_sregs.apic_base":                   uintptr(C.off_sregs_apic_base()),
	"kvm_pit_channel_state.count_load_time": uintptr(C.off_pit_count_load()),
	"kvm_ioeventfd.fd":                      uintptr(C.off_ioeventfd_fd()),
	"kvm_clock_data.realtime":               uintptr(C.off_clock_realtime()),
	"kvm_irq_routing_entry.u":               uintptr(C.off_routing_u()),
	"kvm_xcrs.xcrs":                         uintptr(C.off_xcrs_xcrs()),
}

// Ioctls are the request numbers, by macro name.
var Ioctls = map[string]uintptr{
	"KVM_GET_API_VERSION":            C.KVM_GET_API_VERSION,
	"KVM_CREATE_VM":                  C.KVM_CREATE_VM,
	"KVM_GET_MSR_INDEX_LIST":         C.KVM_GET_MSR_INDEX_LIST,
	"KVM_CHECK_EXTENSION":            C.KVM_CHECK_EXTENSION,
	"KVM_GET_VCPU_MMAP_SIZE":         C.KVM_GET_VCPU_MMAP_SIZE,
	"KVM_GET_SUPPORTED_CPUID":        C.KVM_GET_SUPPORTED_CPUID,
	"KVM_GET_MSR_FEATURE_INDEX_LIST": C.KVM_GET_MSR_FEATURE_INDEX_LIST,
	"KVM_CREATE_VCPU":                C.KVM_CREATE_VCPU,
	"KVM_GET_DIRTY_LOG":              C.KVM_GET_DIRTY_LOG,
	"KVM_SET_USER_MEMORY_REGION":     C.KVM_SET_USER_MEMORY_REGION,
	"KVM_SET_TSS_ADDR":               C.KVM_SET_TSS_ADDR,
	"KVM_SET_IDENTITY_MAP_ADDR":      C.KVM_SET_IDENTITY_MAP_ADDR,
	"KVM_CREATE_IRQCHIP":             C.KVM_CREATE_IRQCHIP,
	"KVM_IRQ_LINE":                   C.KVM_IRQ_LINE,
	"KVM_GET_IRQCHIP":                C.KVM_GET_IRQCHIP,
	"KVM_SET_IRQCHIP":                C.KVM_SET_IRQCHIP,
	"KVM_SET_GSI_ROUTING":            C.KVM_SET_GSI_ROUTING,
	"KVM_IRQFD":                      C.KVM_IRQFD,
	"KVM_CREATE_PIT2":                C.KVM_CREATE_PIT2,
	"KVM_IOEVENTFD":                  C.KVM_IOEVENTFD,
	"KVM_SET_CLOCK":                  C.KVM_SET_CLOCK,
	"KVM_GET_CLOCK":                  C.KVM_GET_CLOCK,
	"KVM_GET_PIT2":                   C.KVM_GET_PIT2,
	"KVM_SET_PIT2":                   C.KVM_SET_PIT2,
	"KVM_ENABLE_CAP":                 C.KVM_ENABLE_CAP,
	"KVM_SIGNAL_MSI":                 C.KVM_SIGNAL_MSI,
	"KVM_CLEAR_DIRTY_LOG":            C.KVM_CLEAR_DIRTY_LOG,
	"KVM_RUN":                        C.KVM_RUN,
	"KVM_GET_REGS":                   C.KVM_GET_REGS,
	"KVM_SET_REGS":                   C.KVM_SET_REGS,
	"KVM_GET_SREGS":                  C.KVM_GET_SREGS,
	"KVM_SET_SREGS":                  C.KVM_SET_SREGS,
	"KVM_TRANSLATE":                  C.KVM_TRANSLATE,
	"KVM_GET_MSRS":                   C.KVM_GET_MSRS,
	"KVM_SET_MSRS":                   C.KVM_SET_MSRS,
	"KVM_GET_FPU":                    C.KVM_GET_FPU,
	"KVM_SET_FPU":                    C.KVM_SET_FPU,
	"KVM_GET_LAPIC":                  C.KVM_GET_LAPIC,
	"KVM_SET_LAPIC":                  C.KVM_SET_LAPIC,
	"KVM_SET_CPUID2":                 C.KVM_SET_CPUID2,
	"KVM_GET_CPUID2":                 C.KVM_GET_CPUID2,
	"KVM_NMI":                        C.KVM_NMI,
	"KVM_GET_MP_STATE":               C.KVM_GET_MP_STATE,
	"KVM_SET_MP_STATE":               C.KVM_SET_MP_STATE,
	"KVM_GET_VCPU_EVENTS":            C.KVM_GET_VCPU_EVENTS,
	"KVM_SET_VCPU_EVENTS":            C.KVM_SET_VCPU_EVENTS,
	"KVM_GET_DEBUGREGS":              C.KVM_GET_DEBUGREGS,
	"KVM_SET_DEBUGREGS":              C.KVM_SET_DEBUGREGS,
	"KVM_SET_TSC_KHZ":                C.KVM_SET_TSC_KHZ,
	"KVM_GET_TSC_KHZ":                C.KVM_GET_TSC_KHZ,
	"KVM_GET_XSAVE":                  C.KVM_GET_XSAVE,
	"KVM_SET_XSAVE":                  C.KVM_SET_XSAVE,
	"KVM_GET_XCRS":                   C.KVM_GET_XCRS,
	"KVM_SET_XCRS":                   C.KVM_SET_XCRS,
	"KVM_KVMCLOCK_CTRL":              C.KVM_KVMCLOCK_CTRL,
}

// Caps are capability numbers, by macro name.
var Caps = map[string]uintptr{
	"KVM_CAP_IRQCHIP":                   C.KVM_CAP_IRQCHIP,
	"KVM_CAP_HLT":                       C.KVM_CAP_HLT,
	"KVM_CAP_USER_MEMORY":               C.KVM_CAP_USER_MEMORY,
	"KVM_CAP_SET_TSS_ADDR":              C.KVM_CAP_SET_TSS_ADDR,
	"KVM_CAP_EXT_CPUID":                 C.KVM_CAP_EXT_CPUID,
	"KVM_CAP_NR_VCPUS":                  C.KVM_CAP_NR_VCPUS,
	"KVM_CAP_NR_MEMSLOTS":               C.KVM_CAP_NR_MEMSLOTS,
	"KVM_CAP_PIT":                       C.KVM_CAP_PIT,
	"KVM_CAP_MP_STATE":                  C.KVM_CAP_MP_STATE,
	"KVM_CAP_IRQ_ROUTING":               C.KVM_CAP_IRQ_ROUTING,
	"KVM_CAP_IRQFD":                     C.KVM_CAP_IRQFD,
	"KVM_CAP_PIT2":                      C.KVM_CAP_PIT2,
	"KVM_CAP_PIT_STATE2":                C.KVM_CAP_PIT_STATE2,
	"KVM_CAP_IOEVENTFD":                 C.KVM_CAP_IOEVENTFD,
	"KVM_CAP_SET_IDENTITY_MAP_ADDR":     C.KVM_CAP_SET_IDENTITY_MAP_ADDR,
	"KVM_CAP_ADJUST_CLOCK":              C.KVM_CAP_ADJUST_CLOCK,
	"KVM_CAP_VCPU_EVENTS":               C.KVM_CAP_VCPU_EVENTS,
	"KVM_CAP_DEBUGREGS":                 C.KVM_CAP_DEBUGREGS,
	"KVM_CAP_XSAVE":                     C.KVM_CAP_XSAVE,
	"KVM_CAP_XCRS":                      C.KVM_CAP_XCRS,
	"KVM_CAP_TSC_CONTROL":               C.KVM_CAP_TSC_CONTROL,
	"KVM_CAP_GET_TSC_KHZ":               C.KVM_CAP_GET_TSC_KHZ,
	"KVM_CAP_MAX_VCPUS":                 C.KVM_CAP_MAX_VCPUS,
	"KVM_CAP_TSC_DEADLINE_TIMER":        C.KVM_CAP_TSC_DEADLINE_TIMER,
	"KVM_CAP_KVMCLOCK_CTRL":             C.KVM_CAP_KVMCLOCK_CTRL,
	"KVM_CAP_SIGNAL_MSI":                C.KVM_CAP_SIGNAL_MSI,
	"KVM_CAP_SPLIT_IRQCHIP":             C.KVM_CAP_SPLIT_IRQCHIP,
	"KVM_CAP_MAX_VCPU_ID":               C.KVM_CAP_MAX_VCPU_ID,
	"KVM_CAP_X2APIC_API":                C.KVM_CAP_X2APIC_API,
	"KVM_CAP_IMMEDIATE_EXIT":            C.KVM_CAP_IMMEDIATE_EXIT,
	"KVM_CAP_GET_MSR_FEATURES":          C.KVM_CAP_GET_MSR_FEATURES,
	"KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2": C.KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2,
	"KVM_CAP_DIRTY_LOG_RING":            C.KVM_CAP_DIRTY_LOG_RING,
	"KVM_CAP_XSAVE2":                    C.KVM_CAP_XSAVE2,
}

// Exits are exit reasons, by macro name.
var Exits = map[string]uintptr{
	"KVM_EXIT_UNKNOWN":         C.KVM_EXIT_UNKNOWN,
	"KVM_EXIT_EXCEPTION":       C.KVM_EXIT_EXCEPTION,
	"KVM_EXIT_IO":              C.KVM_EXIT_IO,
	"KVM_EXIT_HYPERCALL":       C.KVM_EXIT_HYPERCALL,
	"KVM_EXIT_DEBUG":           C.KVM_EXIT_DEBUG,
	"KVM_EXIT_HLT":             C.KVM_EXIT_HLT,
	"KVM_EXIT_MMIO":            C.KVM_EXIT_MMIO,
	"KVM_EXIT_IRQ_WINDOW_OPEN": C.KVM_EXIT_IRQ_WINDOW_OPEN,
	"KVM_EXIT_SHUTDOWN":        C.KVM_EXIT_SHUTDOWN,
	"KVM_EXIT_FAIL_ENTRY":      C.KVM_EXIT_FAIL_ENTRY,
	"KVM_EXIT_INTR":            C.KVM_EXIT_INTR,
	"KVM_EXIT_NMI":             C.KVM_EXIT_NMI,
	"KVM_EXIT_INTERNAL_ERROR":  C.KVM_EXIT_INTERNAL_ERROR,
	"KVM_EXIT_SYSTEM_EVENT":    C.KVM_EXIT_SYSTEM_EVENT,
	"KVM_EXIT_IOAPIC_EOI":      C.KVM_EXIT_IOAPIC_EOI,
	"KVM_EXIT_DIRTY_RING_FULL": C.KVM_EXIT_DIRTY_RING_FULL,
}
