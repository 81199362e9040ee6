package install

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubevmm/kubevmm/api/cdi/cloneauth"
	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	"github.com/kubevmm/kubevmm/operator/internal/kit"
	"github.com/kubevmm/kubevmm/storage/cdi/apiserver"
)

// The clone authorization's names (upstream's).
const (
	// DataVolumeWebhook is the ValidatingWebhookConfiguration sending
	// DataVolume creates to cdi-apiserver; DataVolumeMutatingWebhook the
	// MutatingWebhookConfiguration that has cdi-apiserver issue their
	// clone tokens.
	DataVolumeWebhook         = "cdi-api-datavolume-validate"
	DataVolumeMutatingWebhook = "cdi-api-datavolume-mutate"
	// The user roles, aggregated into admin, edit and view.
	AdminRole = "cdi.kubevirt.io:admin"
	EditRole  = "cdi.kubevirt.io:edit"
	ViewRole  = "cdi.kubevirt.io:view"
)

// cloneCondition: a sourceRef (its DataSource may name a claim anywhere)
// or a pvc source in another namespace.
const cloneCondition = `has(object.spec.sourceRef) || (has(object.spec.source) && has(object.spec.source.pvc) && ` +
	`has(object.spec.source.pvc.namespace) && object.spec.source.pvc.namespace != "" && object.spec.source.pvc.namespace != request.namespace)`

// sourceChanged: an update that changes spec.source or spec.sourceRef.
const sourceChanged = `has(object.spec.source) != has(oldObject.spec.source) || (has(object.spec.source) && object.spec.source != oldObject.spec.source) || ` +
	`has(object.spec.sourceRef) != has(oldObject.spec.sourceRef) || (has(object.spec.sourceRef) && object.spec.sourceRef != oldObject.spec.sourceRef)`

// CloneAuthObjects are the DataVolume webhooks (cdi-apiserver refuses a
// clone from another namespace unless its creator may create
// datavolumes/source there, and gives the clones it admits their clone
// token; failurePolicy Fail, so that no clone slips past an apiserver
// that is down) and CDI's user roles, aggregated as upstream's: admin and
// edit may create DataVolumes and DataSources and clone
// (datavolumes/source), view reads CDI's objects.
func CloneAuthObjects(c Config) []client.Object {
	rule := func(ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{Operations: ops,
			Rule: admissionregistrationv1.Rule{APIGroups: []string{cdiv1.GroupName}, APIVersions: []string{cdiv1.GroupVersion.Version},
				Resources: []string{"datavolumes"}, Scope: ptr.To(admissionregistrationv1.NamespacedScope)}}}
	}
	// Both webhooks are cdi-apiserver, trusted by the upload CA.
	clientConfig := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{CABundle: c.UploadCA,
			Service: &admissionregistrationv1.ServiceReference{Namespace: Namespace, Name: APIServerService, Path: ptr.To(path), Port: ptr.To[int32](443)}}
	}
	webhook := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta: kit.TypeMeta("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"), ObjectMeta: metav1.ObjectMeta{Name: DataVolumeWebhook},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "datavolume-validate.cdi.kubevirt.io",
			ClientConfig: clientConfig(apiserver.ValidateDataVolumePath),
			Rules:        rule(admissionregistrationv1.Create, admissionregistrationv1.Update), FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"},
			// Only a create that may clone from another namespace, or an
			// update of the source: other DataVolumes (imports, uploads,
			// blanks) and updates do not wait on cdi-apiserver.
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "clones-from-another-namespace-or-changes-its-source",
				Expression: `(request.operation == "CREATE" && (` + cloneCondition + `)) || (request.operation == "UPDATE" && (` + sourceChanged + `))`}},
		}},
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta: kit.TypeMeta("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"), ObjectMeta: metav1.ObjectMeta{Name: DataVolumeMutatingWebhook},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "datavolume-mutate.cdi.kubevirt.io",
			ClientConfig: clientConfig(apiserver.MutateDataVolumePath),
			Rules:        rule(admissionregistrationv1.Create), FailurePolicy: ptr.To(admissionregistrationv1.Fail), SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"}, ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			// A DataVolume with a token or an extended token it was not
			// given comes too: they are dropped.
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "clones-from-another-namespace-or-carries-a-token",
				Expression: cloneCondition + ` || (has(object.metadata.annotations) && ("` + cdiv1.AnnCloneToken + `" in object.metadata.annotations || "` +
					cdiv1.AnnExtendedCloneToken + `" in object.metadata.annotations))`}},
		}},
	}
	role := func(name, aggregate string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{TypeMeta: kit.TypeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-" + aggregate: "true"}}, Rules: rules}
	}
	read := []string{"get", "list", "watch"}
	write := []rbacv1.PolicyRule{
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"datavolumes", "datasources"}, Verbs: []string{"*"}},
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"datavolumes/" + cloneauth.SourceSubresource}, Verbs: []string{"create"}},
		{APIGroups: []string{cdiv1.GroupName}, Resources: []string{"cdiconfigs", "storageprofiles"}, Verbs: read},
	}
	return []client.Object{webhook, mutating,
		role(AdminRole, "admin", write...),
		role(EditRole, "edit", write...),
		role(ViewRole, "view", rbacv1.PolicyRule{APIGroups: []string{cdiv1.GroupName},
			Resources: []string{"datavolumes", "datasources", "cdiconfigs", "storageprofiles"}, Verbs: read}),
	}
}
