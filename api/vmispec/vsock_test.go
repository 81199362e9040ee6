package vmispec

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVsockPort(t *testing.T) {
	for _, tc := range []struct {
		query string
		port  uint32
		err   string
	}{
		{"port=1234&tls=false", 1234, ""},
		{"port=4294967294&tls=0", 4294967294, ""},
		{"port=1234", 0, "tls=true (the default)"},
		{"port=1234&tls=true", 0, "ask with tls=false"},
		{"port=1234&tls=maybe", 0, `tls "maybe": want true or false`},
		{"tls=false", 0, `port "": want a vsock port number`},
		{"port=0&tls=false", 0, `port "0"`},
		{"port=4294967295&tls=false", 0, "from 1 to 4294967294"},
		{"port=4294967296&tls=false", 0, `port "4294967296"`},
		{"port=-1&tls=false", 0, `port "-1"`},
	} {
		t.Run(tc.query, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			require.NoError(t, err)
			port, err := VsockPort(q)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.port, port)
		})
	}
}
