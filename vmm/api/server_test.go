package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// refuseVM fails the test if the server passes it a request.
type refuseVM struct {
	VM
	t *testing.T
}

func (v refuseVM) Migrate(MigrateRequest) error {
	v.t.Error("the request reached the VM")
	return nil
}

func TestMigrateTLSOnAUnixSocketIsABadRequest(t *testing.T) {
	s := &Server{vm: refuseVM{t: t}}
	w := httptest.NewRecorder()
	body := `{"to": "unix:/run/b.mig", "tls": {"cert": "/c.pem", "key": "/k.pem", "ca": "/ca.pem"}}`
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPut, "/v1/vm/migrate", strings.NewReader(body)))
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Contains(t, w.Body.String(), "TLS is for tcp: targets")
}
