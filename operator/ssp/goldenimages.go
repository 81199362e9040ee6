package ssp

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdiv1 "github.com/kubevmm/kubevmm/api/cdi/v1beta1"
	sspv1beta3 "github.com/kubevmm/kubevmm/api/ssp/v1beta3"
)

// dataImportCronGVK is the kind of the golden images' crons. Its CRD is
// the CDI operator's: the crons are listed and watched only once served.
var dataImportCronGVK = cdiv1.GroupVersion.WithKind("DataImportCron")

// goldenImages is one DataImportCron per dataImportCronTemplate (in
// GoldenImagesNamespace when the template names none), preceded by that
// namespace when a template was defaulted to it. A template naming its
// namespace needs it to exist: HCO names and creates its
// commonBootImageNamespace (one creator, one set of labels).
func goldenImages(s *sspv1beta3.SSP) []client.Object {
	var out []client.Object
	defaulted := false
	for _, t := range s.Spec.CommonTemplates.DataImportCronTemplates {
		c := &cdiv1.DataImportCron{
			TypeMeta:   metav1.TypeMeta{APIVersion: cdiv1.GroupVersion.String(), Kind: dataImportCronGVK.Kind},
			ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: t.Namespace, Labels: t.Labels, Annotations: t.Annotations},
			Spec:       *t.Spec.DeepCopy(),
		}
		if c.Namespace == "" {
			c.Namespace, defaulted = sspv1beta3.GoldenImagesNamespace, true
		}
		out = append(out, c)
	}
	if defaulted {
		ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: sspv1beta3.GoldenImagesNamespace}}
		return append([]client.Object{ns}, out...)
	}
	return out
}

// pruned are the crons deployed for the SSP that its templates no longer
// name.
func pruned(s *sspv1beta3.SSP, deployed []client.ObjectKey) []client.ObjectKey {
	want := map[client.ObjectKey]bool{}
	for _, o := range goldenImages(s) {
		want[client.ObjectKeyFromObject(o)] = true
	}
	var out []client.ObjectKey
	for _, k := range deployed {
		if !want[k] {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}
