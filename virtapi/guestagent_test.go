package virtapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// freeze's body is KubeVirt's FreezeUnfreezeTimeout; one that is not is
// refused before anything else happens.
func TestFreezeRefusesBadBodies(t *testing.T) {
	s := &Server{Log: logr.Discard()}
	for _, tc := range []struct{ name, body, msg string }{
		{"no body", "", "not a FreezeUnfreezeTimeout: EOF"},
		{"not JSON", "5m", "not a FreezeUnfreezeTimeout"},
		{"not a duration", `{"unfreezeTimeout": "soon"}`, "not a FreezeUnfreezeTimeout"},
		{"no timeout", `{}`, "unfreezeTimeout is required"},
		{"negative", `{"unfreezeTimeout": "-1m"}`, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPut, "/freeze", strings.NewReader(tc.body))
			s.guestAgentOp(http.MethodPut, "freeze")(w, r, userInfo{Name: "u"})
			assert.Equal(t, http.StatusBadRequest, w.Code)
			var st metav1.Status
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &st))
			assert.Contains(t, st.Message, tc.msg)
		})
	}
}
