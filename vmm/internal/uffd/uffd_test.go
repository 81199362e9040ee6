package uffd

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/kubevmm/kubevmm/vmm/internal/uffd/internal/cabi"
)

func TestABIMatchesKernelHeaders(t *testing.T) {
	assert.Equal(t, map[string]uintptr{
		"uffd_msg":        MsgSize,
		"uffdio_api":      unsafe.Sizeof(APIArg{}),
		"uffdio_range":    unsafe.Sizeof(Range{}),
		"uffdio_register": unsafe.Sizeof(RegisterArg{}),
		"uffdio_copy":     unsafe.Sizeof(CopyArg{}),
		"uffdio_zeropage": unsafe.Sizeof(ZeropageArg{}),
	}, cabi.Sizes)
	var c CopyArg
	var z ZeropageArg
	var r RegisterArg
	assert.Equal(t, map[string]uintptr{
		"uffd_msg.event":                 MsgEvent,
		"uffd_msg.arg.pagefault.address": MsgAddress,
		"uffdio_copy.copy":               unsafe.Offsetof(c.Copy),
		"uffdio_zeropage.zeropage":       unsafe.Offsetof(z.Zeropage),
		"uffdio_register.ioctls":         unsafe.Offsetof(r.Ioctls),
	}, cabi.Offsets)
	assert.Equal(t, map[string]uint64{
		"UFFD_API":                     API,
		"UFFDIO_API":                   IocAPI,
		"UFFDIO_REGISTER":              IocRegister,
		"UFFDIO_UNREGISTER":            IocUnregister,
		"UFFDIO_WAKE":                  IocWake,
		"UFFDIO_COPY":                  IocCopy,
		"UFFDIO_ZEROPAGE":              IocZeropage,
		"USERFAULTFD_IOC_NEW":          IocNew,
		"UFFDIO_REGISTER_MODE_MISSING": RegisterMissing,
		"UFFDIO_REGISTER_MODE_WP":      RegisterWP,
		"UFFD_USER_MODE_ONLY":          UserModeOnly,
		"UFFD_FEATURE_MISSING_SHMEM":   FeatureMissingShmem,
		"UFFD_EVENT_PAGEFAULT":         EventPagefault,
		"_UFFDIO_COPY":                 3, // HasCopy's bit
		"_UFFDIO_ZEROPAGE":             4, // HasZeropage's bit
	}, cabi.Constants)
	assert.EqualValues(t, 1<<cabi.Constants["_UFFDIO_COPY"], HasCopy)
	assert.EqualValues(t, 1<<cabi.Constants["_UFFDIO_ZEROPAGE"], HasZeropage)
}
