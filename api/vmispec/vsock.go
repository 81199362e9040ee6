package vmispec

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"strconv"
)

// VsockPort reads the query of the vsock subresource, ?port=N&tls=BOOL
// (virt-api checks it, virt-handler reads it): the guest's port (1 to
// 2^32-2: 2^32-1 is VMADDR_PORT_ANY), and tls, which must be false (unset
// is true, as in KubeVirt, where it wraps the stream in TLS with
// virt-handler's certificate).
func VsockPort(q url.Values) (uint32, error) {
	port, err := strconv.ParseUint(q.Get("port"), 10, 32)
	if err != nil || port == 0 || port == math.MaxUint32 {
		return 0, fmt.Errorf("port %q: want a vsock port number from 1 to %d", q.Get("port"), uint32(math.MaxUint32-1))
	}
	tls, err := strconv.ParseBool(cmp.Or(q.Get("tls"), "true"))
	if err != nil {
		return 0, fmt.Errorf("tls %q: want true or false", q.Get("tls"))
	}
	if tls {
		return 0, fmt.Errorf("tls=true (the default): kubevmm streams vsock connections without TLS; ask with tls=false")
	}
	return uint32(port), nil
}
