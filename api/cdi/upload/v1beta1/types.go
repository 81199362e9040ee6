// Package v1beta1 is CDI's upload.cdi.kubevirt.io/v1beta1, served by
// cdi-apiserver behind an APIService: UploadTokenRequest, created to get
// a token for an upload to a PVC through cdi-uploadproxy.
//
// +kubebuilder:object:generate=true
package v1beta1

//go:generate go tool controller-gen object paths=.

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the upload API's group.
const GroupName = "upload.cdi.kubevirt.io"

// GroupVersion is upload.cdi.kubevirt.io/v1beta1.
var GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

// Resource is the plural the API serves.
const Resource = "uploadtokenrequests"

// UploadTokenRequest asks for a token to upload to PVC spec.pvcName in
// its namespace; the answer carries it in status.token.
//
// +kubebuilder:object:root=true
type UploadTokenRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              UploadTokenRequestSpec   `json:"spec"`
	Status            UploadTokenRequestStatus `json:"status,omitempty"`
}

// UploadTokenRequestSpec names the PVC.
type UploadTokenRequestSpec struct {
	PvcName string `json:"pvcName"`
}

// UploadTokenRequestStatus holds the token.
type UploadTokenRequestStatus struct {
	Token string `json:"token,omitempty"`
}
