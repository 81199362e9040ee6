package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Template is a set of objects with parameters: processing it substitutes
// the parameters' values (given, defaulted or generated) and yields the
// objects to create.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=templates,singular=template,scope=Namespaced
// +kubebuilder:storageversion
type Template struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Message is shown when the template is processed; parameters are
	// substituted in it too (a generated password, say).
	// +optional
	Message string `json:"message,omitempty"`

	// Objects are the resources the template makes, any kind. A namespace
	// set in one is dropped by processing unless it holds a ${PARAMETER}.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	Objects []runtime.RawExtension `json:"objects,omitempty"`

	// Parameters are substituted for ${NAME} (within a string) and ${{NAME}}
	// (a whole string replaced by the value as JSON) in the objects.
	// +optional
	Parameters []Parameter `json:"parameters,omitempty"`

	// ObjectLabels are set on every object processing yields.
	// +optional
	ObjectLabels map[string]string `json:"labels,omitempty"`
}

// TemplateList is a list of Templates.
//
// +kubebuilder:object:root=true
type TemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Template `json:"items"`
}

// Parameter is a named value substituted into a template's objects.
type Parameter struct {
	// Name is what ${NAME} refers to: letters, digits and underscores.
	Name string `json:"name"`

	// DisplayName is a UI's name for the parameter.
	// +optional
	DisplayName string `json:"displayName,omitempty"`

	// Description tells the user what the parameter is for.
	// +optional
	Description string `json:"description,omitempty"`

	// Value is the default; a value given when processing replaces it, and
	// when set the generator is not used.
	// +optional
	Value string `json:"value,omitempty"`

	// Generate names the generator for a parameter with no value. The only
	// one is "expression": From is a string in which each [RANGES]{N}
	// becomes N random characters from RANGES (a-z, A-Z, 0-9 style ranges,
	// single characters, and the classes \w, \d, \a and \A).
	// +optional
	Generate string `json:"generate,omitempty"`

	// From is the generator's input.
	// +optional
	From string `json:"from,omitempty"`

	// Required parameters must end up with a non-empty value.
	// +optional
	Required bool `json:"required,omitempty"`
}
