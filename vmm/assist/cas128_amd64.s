#include "textflag.h"

// func cas128(addr *byte, old0, old1, new0, new1 uint64) (ok bool, cur0, cur1 uint64)
TEXT ·cas128(SB), NOSPLIT, $0-64
	MOVQ addr+0(FP), DI
	MOVQ old0+8(FP), AX
	MOVQ old1+16(FP), DX
	MOVQ new0+24(FP), BX
	MOVQ new1+32(FP), CX
	LOCK
	CMPXCHG16B (DI)
	SETEQ ok+40(FP)
	MOVQ AX, cur0+48(FP)
	MOVQ DX, cur1+56(FP)
	RET
