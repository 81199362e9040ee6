package dhcp

import (
	"bufio"
	"bytes"
	"net"
	"strings"
)

// ParseResolvConf reads the IPv4 nameservers and the search domains of a
// resolv.conf (a pod's, as the kubelet wrote it), for a lease's DNS
// options; what it does not understand it skips.
func ParseResolvConf(b []byte) (dns []net.IP, search []string) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if ip := net.ParseIP(f[1]).To4(); ip != nil {
				dns = append(dns, ip)
			}
		case "search", "domain":
			search = f[1:]
		}
	}
	return dns, search
}
