package virtapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricsRoute: Prometheus scrapes virt-api on its API port and gets
// the process's metrics in the exposition format, through the guard that
// checks its token (api/securemetrics, tested against a real API server
// there); without a guard there is no /metrics.
func TestMetricsRoute(t *testing.T) {
	get := func(s *Server) (int, string, string) {
		srv := httptest.NewServer(s.Handler())
		defer srv.Close()
		resp, err := http.Get(srv.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
	}

	code, typ, body := get(&Server{MetricsGuard: func(h http.Handler) http.Handler { return h }})
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, typ, "text/plain")
	assert.Contains(t, body, "\n# TYPE process_start_time_seconds gauge\n")
	assert.Contains(t, body, "\n# TYPE go_goroutines gauge\n")

	refuse := func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no token", http.StatusUnauthorized) })
	}
	code, _, body = get(&Server{MetricsGuard: refuse})
	assert.Equal(t, http.StatusUnauthorized, code, "the guard answers")
	assert.NotContains(t, body, "go_goroutines")

	code, _, _ = get(&Server{})
	assert.Equal(t, http.StatusNotFound, code, "no guard, no metrics")
}
