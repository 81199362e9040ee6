package assist

import (
	"encoding/binary"
	"fmt"
)

// XSAVE area layout (Intel SDM vol. 1, 13.4): a 512-byte legacy region
// (x87 and SSE), a 64-byte header (XSTATE_BV, XCOMP_BV), then the extended
// components, at CPUID-given offsets (standard format) or packed in
// XCOMP_BV order (compacted format, written by XSAVEC).
const (
	xsLegacyX87Lo  = 0   // FCW, FSW, FTW, FOP, FIP, FDP: bytes 0-23
	xsLegacyX87Hi  = 24  //
	xsMXCSR        = 24  // MXCSR, MXCSR_MASK: bytes 24-31
	xsMXCSRMask    = 28  //
	xsSTRegs       = 32  // ST0-7 / MM0-7: bytes 32-159
	xsXMM          = 160 // XMM0-15: bytes 160-415
	xsXMMEnd       = 416
	xsHeader       = 512
	xsExtended     = 576
	xcompCompacted = 1 << 63
)

// xsave performs XSAVE/XSAVEOPT (standard), XSAVEC (compact) or XRSTOR
// (either form, as the header says) at guest linear address ea, through
// KVM's copy of the vCPU's extended state.
func (x *exec) xsave(ea uint64, restore, compact bool) (*exception, error) {
	if x.s.CR4&cr4OSXSAVE == 0 {
		return ud(), nil
	}
	if ea&63 != 0 {
		return gp0(), nil
	}
	xcr0, err := getXCR0(x.c)
	if err != nil {
		return nil, err
	}
	rfbm := (uint64(uint32(x.r.RAX)) | uint64(uint32(x.r.RDX))<<32) & xcr0
	m := x.mode()

	present := rfbm
	if restore {
		var hdr [64]byte
		if ex, err := x.load(ea+xsHeader, hdr[:]); ex != nil || err != nil {
			return ex, err
		}
		var ok bool
		if compact, ok = checkXRstorHeader(hdr, xcr0); !ok {
			return gp0(), nil
		}
		if compact {
			present = binary.LittleEndian.Uint64(hdr[8:]) &^ xcompCompacted
		}
	}
	off, end, err := x.xsaveLayout(present, compact)
	if err != nil {
		return nil, err
	}
	if ex, err := checkRange(x.a.mem, m, ea, end, !restore); ex != nil || err != nil {
		return ex, err
	}
	ks, err := x.c.GetXSave()
	if err != nil {
		return nil, err
	}
	k := ks.Bytes()
	if err := x.checkKVMArea(k, rfbm, end); err != nil {
		return nil, err
	}
	guest := make([]byte, end)
	if err := access(x.a.mem, m, ea, guest, false); err != nil {
		return nil, err
	}
	if !restore {
		x.saveComponents(guest, k, rfbm, &off, compact)
		return nil, access(x.a.mem, m, ea, guest, true)
	}
	if ex := x.restoreComponents(k, guest, rfbm, present, &off); ex != nil {
		return ex, nil
	}
	if err := x.c.SetXSave(ks); err != nil {
		// KVM validates the image as hardware would: refuse it with #GP
		return gp0(), nil
	}
	return nil, nil
}

// checkXRstorHeader checks the XSAVE header XRSTOR reads as hardware does
// and says whether the area is in the compacted form; !ok is a #GP.
func checkXRstorHeader(hdr [64]byte, xcr0 uint64) (compact, ok bool) {
	xstateBV := binary.LittleEndian.Uint64(hdr[0:])
	xcompBV := binary.LittleEndian.Uint64(hdr[8:])
	compact = xcompBV&xcompCompacted != 0
	if compact {
		return true, xcompBV&^xcompCompacted&^xcr0 == 0 && xstateBV&^xcompBV == 0 && allZero(hdr[16:])
	}
	return false, xstateBV&^xcr0 == 0 && allZero(hdr[8:24])
}

// xsaveLayout places the extended components in present in the guest's
// area (standard or compacted) and returns their offsets and the area's
// end.
func (x *exec) xsaveLayout(present uint64, compact bool) (off [64]uint64, end uint64, err error) {
	end = uint64(xsExtended)
	o := uint64(xsExtended)
	for i := 2; i < 63; i++ {
		if present>>i&1 == 0 {
			continue
		}
		size := uint64(x.a.xs.Size[i])
		if size == 0 {
			return off, 0, fmt.Errorf("XSAVE component %d enabled but not described by CPUID leaf 0xD", i)
		}
		if compact {
			if x.a.xs.Align64[i] {
				o = (o + 63) &^ 63
			}
			off[i] = o
			o += size
		} else {
			off[i] = uint64(x.a.xs.Offset[i])
		}
		end = max(end, off[i]+size)
	}
	return off, end, nil
}

// checkKVMArea checks that KVM's copy k, in the standard format, holds
// every component copied, whatever its place in the guest's (compacted)
// area.
func (x *exec) checkKVMArea(k []byte, rfbm, end uint64) error {
	if end > uint64(len(k)) {
		return fmt.Errorf("XSAVE area of %d bytes exceeds KVM's %d", end, len(k))
	}
	for i := 2; i < 63; i++ {
		if rfbm>>i&1 != 0 && uint64(x.a.xs.Offset[i])+uint64(x.a.xs.Size[i]) > uint64(len(k)) {
			return fmt.Errorf("XSAVE component %d at [%d+%d] lies outside KVM's %d-byte XSAVE area",
				i, x.a.xs.Offset[i], x.a.xs.Size[i], len(k))
		}
	}
	return nil
}

// saveComponents copies the components in rfbm from KVM's copy k into the
// guest's area and writes its header (XSAVE, XSAVEC).
func (x *exec) saveComponents(guest, k []byte, rfbm uint64, off *[64]uint64, compact bool) {
	kbv := binary.LittleEndian.Uint64(k[xsHeader:])
	if rfbm&1 != 0 {
		copy(guest[xsLegacyX87Lo:xsLegacyX87Hi], k[xsLegacyX87Lo:xsLegacyX87Hi])
		copy(guest[xsSTRegs:xsXMM], k[xsSTRegs:xsXMM])
	}
	if rfbm&6 != 0 {
		copy(guest[xsMXCSR:xsSTRegs], k[xsMXCSR:xsSTRegs])
	}
	if rfbm&2 != 0 {
		copy(guest[xsXMM:xsXMMEnd], k[xsXMM:xsXMMEnd])
	}
	for i := 2; i < 63; i++ {
		if rfbm>>i&1 != 0 {
			src := k[x.a.xs.Offset[i] : x.a.xs.Offset[i]+x.a.xs.Size[i]]
			copy(guest[off[i]:], src)
		}
	}
	bv := guest[xsHeader:]
	if compact {
		binary.LittleEndian.PutUint64(bv[0:], kbv&rfbm)
		binary.LittleEndian.PutUint64(bv[8:], rfbm|xcompCompacted)
	} else {
		old := binary.LittleEndian.Uint64(bv[0:])
		binary.LittleEndian.PutUint64(bv[0:], old&^rfbm|kbv&rfbm)
	}
}

// restoreComponents loads the components in rfbm from the guest's area
// into KVM's copy k (XRSTOR): those the header marks as in their initial
// state are reset. A reserved MXCSR bit is a #GP.
func (x *exec) restoreComponents(k, guest []byte, rfbm, present uint64, off *[64]uint64) *exception {
	kbv := binary.LittleEndian.Uint64(k[xsHeader:])
	bv := binary.LittleEndian.Uint64(guest[xsHeader:])
	if rfbm&6 != 0 {
		mxcsr := binary.LittleEndian.Uint32(guest[xsMXCSR:])
		if mxcsr&^mxcsrMask(k) != 0 {
			return gp0()
		}
		binary.LittleEndian.PutUint32(k[xsMXCSR:], mxcsr)
	}
	if rfbm&1 != 0 {
		if bv&1 != 0 {
			copy(k[xsLegacyX87Lo:xsLegacyX87Hi], guest[xsLegacyX87Lo:xsLegacyX87Hi])
			copy(k[xsSTRegs:xsXMM], guest[xsSTRegs:xsXMM])
		} else { // x87 init state: FCW 0x37f, everything else zero
			clear(k[xsLegacyX87Lo:xsLegacyX87Hi])
			clear(k[xsSTRegs:xsXMM])
			binary.LittleEndian.PutUint16(k[0:], 0x37f)
		}
	}
	if rfbm&2 != 0 {
		if bv&2 != 0 {
			copy(k[xsXMM:xsXMMEnd], guest[xsXMM:xsXMMEnd])
		} else {
			clear(k[xsXMM:xsXMMEnd])
		}
	}
	for i := 2; i < 63; i++ {
		if rfbm>>i&1 == 0 {
			continue
		}
		dst := k[x.a.xs.Offset[i] : x.a.xs.Offset[i]+x.a.xs.Size[i]]
		if bv>>i&1 != 0 && present>>i&1 != 0 {
			copy(dst, guest[off[i]:off[i]+uint64(len(dst))])
		} else {
			clear(dst)
		}
	}
	binary.LittleEndian.PutUint64(k[xsHeader:], kbv&^rfbm|bv&rfbm)
	return nil
}

// mxcsrMask is the MXCSR_MASK the CPU reports in KVM's copy k of the
// state: the MXCSR bits software may set. Zero means the SDM's default,
// 0xffbf (every bit but DAZ).
func mxcsrMask(k []byte) uint32 {
	if m := binary.LittleEndian.Uint32(k[xsMXCSRMask:]); m != 0 {
		return m
	}
	return 0xffbf
}

// mxcsr performs LDMXCSR m32 (load) or STMXCSR m32 at the decoded memory
// operand, through KVM's copy of the vCPU's extended state. Faults in the
// SDM's order: #UD (LOCK, CR0.EM set or CR4.OSFXSR clear), #NM (CR0.TS
// set), the memory access's own faults, then #GP(0) for a reserved MXCSR
// bit on a load.
func (x *exec) mxcsr(load bool) (Kind, *exception, bool, error) {
	k := KindSTMXCSR
	if load {
		k = KindLDMXCSR
	}
	switch {
	case x.in.lock || x.s.CR0&cr0EM != 0 || x.s.CR4&cr4OSFXSR == 0:
		return k, ud(), false, nil
	case x.s.CR0&cr0TS != 0:
		return k, &exception{vector: vecNM}, false, nil
	}
	ks, err := x.c.GetXSave()
	if err != nil {
		return 0, nil, false, err
	}
	area := ks.Bytes()
	var b [4]byte
	if !load {
		copy(b[:], area[xsMXCSR:xsMXCSR+4])
		return x.store(k, x.in.ea, b[:])
	}
	if ex, err := x.load(x.in.ea, b[:]); ex != nil || err != nil {
		return k, ex, false, err
	}
	v := binary.LittleEndian.Uint32(b[:])
	if v&^mxcsrMask(area) != 0 {
		return k, gp0(), false, nil
	}
	binary.LittleEndian.PutUint32(area[xsMXCSR:], v)
	// KVM loads MXCSR from the buffer only when the header marks x87, SSE
	// or AVX state as present; marking SSE keeps the XMM registers as
	// exported (their values, or zeros if they were in their init state).
	hdr := area[xsHeader:]
	binary.LittleEndian.PutUint64(hdr, binary.LittleEndian.Uint64(hdr)|2)
	if err := x.c.SetXSave(ks); err != nil {
		return 0, nil, false, fmt.Errorf("ldmxcsr: %w", err)
	}
	return k, nil, true, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
