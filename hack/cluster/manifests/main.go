// Command manifests prints everything that deploys kubevmm's components
// into a cluster, as one YAML stream for `kubectl apply --server-side`.
// With -operator (what `make cluster-sync` deploys): the namespace and
// virt-operator (the KubeVirt CRD, its RBAC and Deployment), which deploys
// the rest from a KubeVirt CR, its certificates included, the SSP
// operator (operator/ssp: the SSP and TektonTasks CRDs, its RBAC and
// Deployment, and virt-template-validator's certificate) and the HCO
// operator (the HyperConverged CRD, its RBAC, Deployment, webhook and
// cli-download), which makes the KubeVirt and SSP CRs from a HyperConverged
// CR. Without:
// namespace kubevirt, then the objects of operator/virt/install (service
// accounts and RBAC, TLS secrets, the cluster configuration, the
// virt-controller and virt-api Deployments, the virt-handler DaemonSet,
// the virt-api Service, the admission webhooks and the
// subresources.kubevirt.io APIService). The CRDs are applied from
// api/crds beside it. Both ways it ends with the hostpath provisioner
// (with -operator its operator, operator/hostpath, which deploys the
// driver from a HostPathProvisioner CR; without, the driver itself,
// operator/hostpath/install) and its StorageClasses, and the
// network add-ons: with -operator their operator (operator/network: the
// NetworkAddonsConfig CRD, its RBAC and Deployment), which deploys them
// from the NetworkAddonsConfig the HCO makes; without, the add-ons
// themselves (operator/network/install, kubemacpool included). With
// -operator it also deploys CDI's operator (operator/cdi/install), which
// deploys CDI from the CDI CR the HCO makes.
//
// Certificates: with -operator, none: each operator makes and rotates
// its components' own (api/certs: virt-operator KubeVirt's, the SSP
// operator virt-template-validator's, the network operator kubemacpool's,
// the HCO operator its webhook's). Without -operator, a CA and the
// components' (virt-api's serving certificate, virt-handler's and
// virt-api's for their mutual TLS, kubemacpool's), generated on first use
// and kept in -pki, so repeated syncs apply the same bytes, and not
// rotated.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kubevmm/kubevmm/controller"
	"github.com/kubevmm/kubevmm/handler"
	cdiinstall "github.com/kubevmm/kubevmm/operator/cdi/install"
	hcoinstall "github.com/kubevmm/kubevmm/operator/hco/install"
	hostpathop "github.com/kubevmm/kubevmm/operator/hostpath"
	hostpathinstall "github.com/kubevmm/kubevmm/operator/hostpath/install"
	"github.com/kubevmm/kubevmm/operator/network"
	networkinstall "github.com/kubevmm/kubevmm/operator/network/install"
	"github.com/kubevmm/kubevmm/operator/ssp"
	"github.com/kubevmm/kubevmm/operator/virt/install"
)

type opts struct {
	namespace, imagePrefix, tag, pki, pluginDir string
	kubeletRoot, featureGates, hostpathPool     string
	pull                                        corev1.PullPolicy
	operator                                    bool
	cniBinDir, cniConfDir, clusterNetwork       string
	kmpRangeStart, kmpRangeEnd                  string
}

func main() {
	var o opts
	var pull string
	flag.StringVar(&o.namespace, "namespace", "kubevirt", "namespace of the components")
	flag.StringVar(&o.imagePrefix, "image-prefix", "localhost/kubevmm", "image repository prefix")
	flag.StringVar(&o.tag, "tag", "devel", "image tag")
	flag.StringVar(&o.pki, "pki", "", "directory keeping the generated CA and certificates (required)")
	flag.StringVar(&o.pluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory on the nodes")
	flag.StringVar(&o.kubeletRoot, "kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir on the nodes (its pods and seccomp directories are below)")
	flag.StringVar(&o.hostpathPool, "hostpath-pool", "/var/hpvolumes", "the directory of the hostpath provisioner's storage pool \"local\" on the nodes (without -operator: with it, the HostPathProvisioner says)")
	flag.StringVar(&o.cniBinDir, "cni-bin-dir", "/opt/cni/bin", "the container runtime's CNI plugin directory on the nodes")
	flag.StringVar(&o.cniConfDir, "cni-conf-dir", "/etc/cni/net.d", "the container runtime's CNI configuration directory on the nodes")
	flag.StringVar(&o.clusterNetwork, "cluster-network", "10-bridge.conflist", "the pod network's conf file in -cni-conf-dir, which kubevmm-multus delegates to")
	flag.StringVar(&o.kmpRangeStart, "kubemacpool-range-start", "02:6b:6d:00:00:00", "first MAC of kubemacpool's range (without -operator: with it, the NetworkAddonsConfig says)")
	flag.StringVar(&o.kmpRangeEnd, "kubemacpool-range-end", "02:6b:6d:ff:ff:ff", "last MAC of kubemacpool's range (without -operator)")
	flag.StringVar(&pull, "pull-policy", string(corev1.PullNever), "image pull policy (Never: images are imported, no registry)")
	// The dev cluster has one node: without SameNodeLiveMigration a
	// migration's target pod could never be scheduled there.
	flag.StringVar(&o.featureGates, "feature-gates", controller.FeatureGateSameNodeLiveMigration, "comma-separated feature gates of the cluster configuration (virt-controller's --config)")
	flag.BoolVar(&o.operator, "operator", false, "print what deploys virt-operator instead (namespace, certificates, the KubeVirt CRD, its RBAC and Deployment): it deploys the rest from a KubeVirt CR")
	flag.Parse()
	o.pull = corev1.PullPolicy(pull)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func run(o opts) error {
	if o.pki == "" {
		return errors.New("-pki is required")
	}
	ca, err := loadOrCreateCA(o.pki)
	if err != nil {
		return err
	}
	var cc controller.ClusterConfig
	if o.featureGates != "" {
		cc.DeveloperConfiguration.FeatureGates = strings.Split(o.featureGates, ",")
	}
	c := install.Config{Namespace: o.namespace, ImageRegistry: o.imagePrefix, ImageTag: o.tag, PullPolicy: o.pull,
		PluginDir: o.pluginDir, KubeletRoot: o.kubeletRoot, Configuration: cc, CABundle: ca.certPEM, ManagedBy: "kubevmm"}
	var objs []client.Object
	if o.operator {
		objs, err = install.Operator(c)
		if err == nil {
			var sspObjs []client.Object
			sspObjs, err = ssp.Operator(ssp.OperatorConfig{Namespace: o.namespace, ImageRegistry: o.imagePrefix, ImageTag: o.tag, PullPolicy: o.pull, ManagedBy: "kubevmm"})
			objs = append(objs, sspObjs...)
		}
		if err == nil {
			var h []client.Object
			h, err = hcoObjects(o)
			objs = append(objs, h...)
		}
	} else if c.Certificates, err = leaves(ca, o); err == nil {
		objs, err = install.Objects(c)
	}
	if err != nil {
		return err
	}
	// The hostpath provisioner beside: with -operator its operator (the
	// HostPathProvisioner CRD, RBAC and Deployment; sync.sh makes the CR,
	// pool local at -hostpath-pool), else the driver itself; both ways the
	// StorageClasses of pool local, which are the users' to make.
	if o.operator {
		hpp, err := hostpathop.Operator(hostpathop.OperatorConfig{ImageRegistry: o.imagePrefix, ImageTag: o.tag, PullPolicy: o.pull, KubeletRoot: o.kubeletRoot})
		if err != nil {
			return err
		}
		objs = append(objs, hpp...)
	} else {
		objs = append(objs, hostpathinstall.NamespaceObject())
		objs = append(objs, hostpathinstall.Objects(hostpathinstall.Config{Image: o.imagePrefix + "/hostpath-provisioner:" + o.tag,
			PullPolicy: o.pull, KubeletRoot: o.kubeletRoot, Pools: []hostpathinstall.Pool{{Name: "local", Path: o.hostpathPool}}})...)
	}
	objs = append(objs, hostpathinstall.StorageClasses("local")...)
	// The network add-ons (NetworkAttachmentDefinitions, kubevmm-multus,
	// bridge-marker): with -operator their operator, which deploys them
	// from the NetworkAddonsConfig the HCO makes; else the add-ons.
	var netObjs []client.Object
	if o.operator {
		netObjs, err = network.Operator(network.OperatorConfig{ImageRegistry: o.imagePrefix, ImageTag: o.tag, PullPolicy: o.pull,
			CNIBinDir: o.cniBinDir, CNIConfDir: o.cniConfDir, ClusterNetwork: o.clusterNetwork})
	} else {
		netObjs, err = networkinstall.Objects(networkinstall.Config{MultusImage: o.imagePrefix + "/kubevmm-multus:" + o.tag,
			BridgeMarkerImage: o.imagePrefix + "/bridge-marker:" + o.tag, PullPolicy: o.pull,
			CNIBinDir: o.cniBinDir, CNIConfDir: o.cniConfDir, ClusterNetwork: o.clusterNetwork})
	}
	if err != nil {
		return err
	}
	objs = append(objs, netObjs...)
	if !o.operator {
		kmpObjs, err := kubeMacPoolObjects(ca, o)
		if err != nil {
			return err
		}
		objs = append(objs, kmpObjs...)
	}
	// CDI's operator (operator/cdi: CDI's CRDs, namespace cdi, its RBAC and
	// Deployment), which deploys CDI from the CDI CR the HCO makes.
	if o.operator {
		cdiObjs, err := cdiinstall.OperatorObjects(cdiinstall.OperatorConfig{ImageRegistry: o.imagePrefix, ImageTag: o.tag, PullPolicy: o.pull})
		if err != nil {
			return err
		}
		objs = append(objs, cdiObjs...)
	}
	for _, obj := range append([]any{install.Namespace(o.namespace)}, anys(objs)...) {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		fmt.Printf("---\n%s", b)
	}
	return nil
}

// hcoObjects are the HCO operator's (operator/hco/install), beside
// virt-operator: the HyperConverged CR makes the KubeVirt CR. It makes
// its webhook's certificate itself.
func hcoObjects(o opts) ([]client.Object, error) {
	return hcoinstall.Objects(hcoinstall.Config{Namespace: o.namespace, ImageRegistry: o.imagePrefix, ImageTag: o.tag, PullPolicy: o.pull,
		ManagedBy: "kubevmm"})
}

// kubeMacPoolObjects are, without the operator (which makes and rotates
// kubemacpool's certificate itself), kubemacpool's objects
// (operator/network/install) and its serving certificate (with its CA,
// ca.crt).
func kubeMacPoolObjects(ca *authority, o opts) ([]client.Object, error) {
	svc := networkinstall.KubeMacPoolService + "." + networkinstall.Namespace + ".svc"
	cert, err := ca.leaf(o.pki, "kubemacpool", svc, []string{svc, svc + ".cluster.local"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	secret := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: networkinstall.KubeMacPoolSecret, Namespace: networkinstall.Namespace}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: cert.Cert, corev1.TLSPrivateKeyKey: cert.Key, network.CAKey: ca.certPEM}}
	objs, err := networkinstall.KubeMacPoolObjects(networkinstall.KubeMacPoolConfig{Image: o.imagePrefix + "/kubemacpool:" + o.tag,
		PullPolicy: o.pull, RangeStart: o.kmpRangeStart, RangeEnd: o.kmpRangeEnd, CABundle: ca.certPEM})
	if err != nil {
		return nil, err
	}
	return append([]client.Object{secret}, objs...), nil
}

func anys[T any](s []T) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// leaves are the components' certificates, signed by ca.
func leaves(ca *authority, o opts) (*install.Certificates, error) {
	svc := "virt-api." + o.namespace + ".svc"
	apiCert, err := ca.leaf(o.pki, "virt-api", svc, []string{"virt-api", svc, svc + ".cluster.local"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	// Server for virt-api; both server and client between handlers, which
	// carry live migration streams to each other (handler.MigrationTLS).
	handlerCert, err := ca.leaf(o.pki, "virt-handler", handler.HandlerName, nil, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	apiClient, err := ca.leaf(o.pki, "virt-api-client", handler.VirtAPIClientName, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	return &install.Certificates{CA: ca.certPEM, API: apiCert, Handler: handlerCert, APIClient: apiClient}, nil
}

type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func pemBlock(t string, b []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: t, Bytes: b}) }

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func loadOrCreateCA(dir string) (*authority, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	certPath, keyPath := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if cb, err := os.ReadFile(certPath); err == nil {
		kb, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, err
		}
		c, k, err := parsePair(cb, kb)
		if err != nil {
			return nil, fmt.Errorf("CA in %s: %w", dir, err)
		}
		return &authority{cert: c, key: k, certPEM: cb}, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "kubevmm-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cb := pemBlock("CERTIFICATE", der)
	if err := os.WriteFile(keyPath, pemBlock("EC PRIVATE KEY", kder), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(certPath, cb, 0o644); err != nil {
		return nil, err
	}
	c, _ := x509.ParseCertificate(der)
	return &authority{cert: c, key: key, certPEM: cb}, nil
}

func parsePair(cb, kb []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(cb)
	if b == nil {
		return nil, nil, errors.New("no certificate PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, nil, err
	}
	kbk, _ := pem.Decode(kb)
	if kbk == nil {
		return nil, nil, errors.New("no key PEM")
	}
	k, err := x509.ParseECPrivateKey(kbk.Bytes)
	return c, k, err
}

// leaf loads or issues the certificate file name.crt/.key in dir.
func (a *authority) leaf(dir, name, cn string, dns []string, usage ...x509.ExtKeyUsage) (install.KeyPair, error) {
	certPath, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if cb, err := os.ReadFile(certPath); err == nil {
		if kb, err := os.ReadFile(keyPath); err == nil {
			if c, _, err := parsePair(cb, kb); err == nil && time.Until(c.NotAfter) > 30*24*time.Hour && c.CheckSignatureFrom(a.cert) == nil &&
				slices.Equal(c.ExtKeyUsage, usage) {
				return install.KeyPair{Cert: cb, Key: kb}, nil
			}
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return install.KeyPair{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: cn}, DNSNames: dns,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return install.KeyPair{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return install.KeyPair{}, err
	}
	l := install.KeyPair{Cert: pemBlock("CERTIFICATE", der), Key: pemBlock("EC PRIVATE KEY", kder)}
	if err := os.WriteFile(keyPath, l.Key, 0o600); err != nil {
		return install.KeyPair{}, err
	}
	return l, os.WriteFile(certPath, l.Cert, 0o644)
}
