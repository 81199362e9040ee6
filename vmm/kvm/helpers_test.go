package kvm

import (
	"runtime"
	"unsafe"
)

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

func lockThread() { runtime.LockOSThread() }
