package assist

// cas128 atomically compares the 16 bytes at addr (16-byte aligned) with
// old0:old1 and, if equal, stores new0:new1. It returns whether it stored
// and the value found.
//
//go:noescape
func cas128(addr *byte, old0, old1, new0, new1 uint64) (ok bool, cur0, cur1 uint64)
