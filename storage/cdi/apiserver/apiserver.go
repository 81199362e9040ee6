// Package apiserver is cdi-apiserver: the aggregated API
// upload.cdi.kubevirt.io/v1beta1 behind an APIService. It serves
// discovery and `create uploadtokenrequests` (namespaced): a user the API
// server vouches for (front-proxy client certificate, see
// api/frontproxy) and that a SubjectAccessReview allows to create
// uploadtokenrequests in the namespace gets a token (storage/cdi/token)
// for an upload to the PVC the request names, which cdi-uploadproxy
// accepts for token.Lifetime.
package apiserver

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/admission"
	uploadv1 "github.com/kubevmm/kubevmm/api/cdi/upload/v1beta1"
	"github.com/kubevmm/kubevmm/api/frontproxy"
	"github.com/kubevmm/kubevmm/storage/cdi/token"
)

// Server is cdi-apiserver.
type Server struct {
	Auth frontproxy.Users
	// Callers tells the API server's admission reviews from anyone
	// else's: the webhooks answer only it (a review's answer carries a
	// signed clone token).
	Callers frontproxy.Callers
	Client  client.Client
	Signer  *token.Signer
	Log     *slog.Logger
}

// maxBody bounds a token request: it names one PVC.
const maxBody = 64 << 10

// Handler is every route.
func (s *Server) Handler() http.Handler {
	gv := "/apis/" + uploadv1.GroupVersion.String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("GET /apis", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{group()}})
	})
	mux.HandleFunc("GET /apis/"+uploadv1.GroupName, func(w http.ResponseWriter, _ *http.Request) {
		g := group()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, http.StatusOK, g)
	})
	mux.HandleFunc("GET "+gv, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: uploadv1.GroupVersion.String(),
			APIResources: []metav1.APIResource{{Name: uploadv1.Resource, SingularName: "uploadtokenrequest", Namespaced: true,
				Kind: "UploadTokenRequest", Verbs: []string{"create"}}}})
	})
	mux.HandleFunc("POST "+gv+"/namespaces/{namespace}/"+uploadv1.Resource, s.createToken)
	mux.Handle("POST "+ValidateDataVolumePath, frontproxy.OnlyAPIServer(s.Callers, admission.Handler(s.validateDataVolume)))
	mux.Handle("POST "+MutateDataVolumePath, frontproxy.OnlyAPIServer(s.Callers, admission.Handler(s.mutateDataVolume)))
	return mux
}

func group() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: uploadv1.GroupVersion.String(), Version: uploadv1.GroupVersion.Version}
	return metav1.APIGroup{Name: uploadv1.GroupName, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	u, err := s.Auth.User(r)
	if err != nil {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, err.Error())
		return
	}
	allowed, err := frontproxy.Authorize(r.Context(), s.Client, u, authzv1.ResourceAttributes{Namespace: ns, Verb: "create",
		Group: uploadv1.GroupName, Version: uploadv1.GroupVersion.Version, Resource: uploadv1.Resource})
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	if !allowed {
		writeStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, fmt.Sprintf(
			"User %q cannot create resource %q in API group %q in the namespace %q", u.Name, uploadv1.Resource, uploadv1.GroupName, ns))
		return
	}
	req := &uploadv1.UploadTokenRequest{}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "decoding the UploadTokenRequest: "+err.Error())
		return
	}
	if req.Kind != "" && req.Kind != "UploadTokenRequest" || req.APIVersion != "" && req.APIVersion != uploadv1.GroupVersion.String() {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("%s %s is not an UploadTokenRequest of %s", req.APIVersion, req.Kind, uploadv1.GroupVersion))
		return
	}
	if req.Namespace != "" && req.Namespace != ns {
		writeStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("metadata.namespace %q does not match the request's namespace %q", req.Namespace, ns))
		return
	}
	if errs := validation.IsDNS1123Subdomain(req.Spec.PvcName); len(errs) > 0 {
		writeStatus(w, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, fmt.Sprintf("spec.pvcName %q: %v", req.Spec.PvcName, errs))
		return
	}
	tok, err := s.Signer.Sign(token.Upload(ns, req.Spec.PvcName), time.Now())
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error())
		return
	}
	s.Log.Info("upload token issued", "user", u.Name, "pvc", ns+"/"+req.Spec.PvcName)
	req.TypeMeta = metav1.TypeMeta{Kind: "UploadTokenRequest", APIVersion: uploadv1.GroupVersion.String()}
	req.Namespace = ns
	req.Status.Token = tok
	writeJSON(w, http.StatusOK, req)
}

// writeStatus answers with a metav1.Status, which clients print.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: reason, Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// A client gone mid-body cannot be told more.
	_ = json.NewEncoder(w).Encode(v)
}
