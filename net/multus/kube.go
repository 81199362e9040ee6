package multus

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	nadv1 "github.com/kubevmm/kubevmm/api/nad/v1"
)

// Kube is what the meta-plugin reads and writes in the cluster.
type Kube interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error)
	// SetNetworkStatus writes the pod's network-status annotation.
	SetNetworkStatus(ctx context.Context, namespace, name string, status []nadv1.NetworkStatus) error
}

// kube is Kube over client-go: no discovery, no informers, since a CNI
// call is one short-lived process.
type kube struct{ cs kubernetes.Interface }

// NewKube reads a kubeconfig file.
func NewKube(kubeconfig string) (Kube, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = PluginType
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	return kube{cs}, nil
}

func (k kube) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return k.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (k kube) GetNAD(ctx context.Context, namespace, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	// Raw, not Into: the client's scheme does not know the kind.
	b, err := k.cs.CoreV1().RESTClient().Get().
		AbsPath("/apis", nadv1.GroupName, nadv1.GroupVersion.Version, "namespaces", namespace, nadv1.Resource, name).
		DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	nad := &nadv1.NetworkAttachmentDefinition{}
	if err := json.Unmarshal(b, nad); err != nil {
		return nil, fmt.Errorf("decoding NetworkAttachmentDefinition %s/%s: %w", namespace, name, err)
	}
	return nad, nil
}

func (k kube) SetNetworkStatus(ctx context.Context, namespace, name string, status []nadv1.NetworkStatus) error {
	s, err := json.Marshal(status)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nadv1.NetworkStatusAnnotation: string(s)}}})
	if err != nil {
		return err
	}
	_, err = k.cs.CoreV1().Pods(namespace).Patch(ctx, name, k8stypes.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
