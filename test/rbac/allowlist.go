package rbac

// Why a broad rule is held: one reason per kind of rule, the same for
// every component that holds it.
const (
	ownAPI           = "its own API: the resources it reconciles, their status and finalizers (upstream's operator or controller holds the same)"
	grantsComponents = "creates its components' roles and bindings; * includes escalate and bind, which it needs: it grants them rules it does not hold itself (upstream's operators hold the same)"
	installsCRDs     = "installs, upgrades and removes its components' CRDs"
	webhooks         = "its components' webhook configurations, their caBundle kept current and drift reverted"
	aggregatedAPI    = "the APIService of its aggregated API (virt-api's subresources, cdi-apiserver's upload API), its caBundle kept current"
	deploys          = "deploys its components and reverts drift"
	csiDriver        = "the driver's CSIDriver object"
	cdiPods          = "importer, upload server and clone source pods and their claims, in the users' namespaces (upstream's cdi-deployment)"
	cdiSecrets       = "upload servers' Services and certificates and clone sources' client certificates, in the users' namespaces, and the upload CA in its own (upstream's cdi-deployment makes them too)"
	sspContent       = "the common templates, instance types and preferences, and the golden images' DataImportCrons it deploys"
)

// allowList is every broad rule a component holds (see TestLeastPrivilege
// for what is broad), reviewed, with why. Key: "WHO: GROUPS RESOURCES
// VERBS" as key() writes it.
var allowList = map[string]string{
	"ClusterRole cdi-operator: admissionregistration.k8s.io validatingwebhookconfigurations,mutatingwebhookconfigurations *":                           webhooks,
	"ClusterRole cdi-operator: apiextensions.k8s.io customresourcedefinitions *":                                                                       installsCRDs,
	"ClusterRole cdi-operator: apiregistration.k8s.io apiservices *":                                                                                   aggregatedAPI,
	"ClusterRole cdi-operator: apps deployments *":                                                                                                     deploys,
	"ClusterRole cdi-operator: cdi.kubevirt.io cdis,cdis/status,cdis/finalizers,cdiconfigs,cdiconfigs/status,storageprofiles,storageprofiles/status *": ownAPI,
	"ClusterRole cdi-operator: rbac.authorization.k8s.io clusterroles,clusterrolebindings,roles,rolebindings *":                                        grantsComponents,
	"ClusterRole cdi:  persistentvolumeclaims,pods *":                                                                                                  cdiPods,
	"ClusterRole cdi:  services,secrets *":                                                                                                             cdiSecrets,
	"ClusterRole cdi: cdi.kubevirt.io dataimportcrons,dataimportcrons/status,dataimportcrons/finalizers *":                                             ownAPI,
	"ClusterRole cdi: cdi.kubevirt.io datasources,datasources/status *":                                                                                ownAPI,
	"ClusterRole cdi: cdi.kubevirt.io datavolumes,datavolumes/status,datavolumes/finalizers *":                                                         ownAPI,
	"ClusterRole cluster-network-addons-operator: admissionregistration.k8s.io mutatingwebhookconfigurations *":                                        webhooks,
	"ClusterRole cluster-network-addons-operator: apiextensions.k8s.io customresourcedefinitions *":                                                    installsCRDs,
	"ClusterRole cluster-network-addons-operator: apps daemonsets,deployments *":                                                                       deploys,
	"ClusterRole cluster-network-addons-operator: networkaddonsoperator.network.kubevirt.io networkaddonsconfigs,networkaddonsconfigs/status *":        ownAPI,
	"ClusterRole cluster-network-addons-operator: rbac.authorization.k8s.io clusterroles,clusterrolebindings,roles,rolebindings *":                     grantsComponents,
	"ClusterRole hostpath-provisioner-operator: apps daemonsets *":                                                                                     deploys,
	"ClusterRole hostpath-provisioner-operator: hostpathprovisioner.kubevirt.io hostpathprovisioners,hostpathprovisioners/status *":                    ownAPI,
	"ClusterRole hostpath-provisioner-operator: rbac.authorization.k8s.io clusterroles,clusterrolebindings,roles,rolebindings *":                       grantsComponents,
	"ClusterRole hostpath-provisioner-operator: storage.k8s.io csidrivers *":                                                                           csiDriver,
	"ClusterRole hyperconverged-cluster-operator: hco.kubevirt.io hyperconvergeds,hyperconvergeds/status,hyperconvergeds/finalizers *":                 ownAPI,
	"ClusterRole kubevirt-operator: admissionregistration.k8s.io mutatingwebhookconfigurations,validatingwebhookconfigurations *":                      webhooks,
	"ClusterRole kubevirt-operator: apiextensions.k8s.io customresourcedefinitions *":                                                                  installsCRDs,
	"ClusterRole kubevirt-operator: apiregistration.k8s.io apiservices *":                                                                              aggregatedAPI,
	"ClusterRole kubevirt-operator: apps deployments,daemonsets *":                                                                                     deploys,
	"ClusterRole kubevirt-operator: kubevirt.io kubevirts,kubevirts/status,kubevirts/finalizers *":                                                     ownAPI,
	"ClusterRole kubevirt-operator: rbac.authorization.k8s.io clusterroles,clusterrolebindings,roles,rolebindings *":                                   grantsComponents,
	"ClusterRole ssp-operator: admissionregistration.k8s.io validatingwebhookconfigurations *":                                                         webhooks,
	"ClusterRole ssp-operator: apiextensions.k8s.io customresourcedefinitions *":                                                                       installsCRDs,
	"ClusterRole ssp-operator: apps deployments *":                                                                                                     deploys,
	"ClusterRole ssp-operator: cdi.kubevirt.io dataimportcrons *":                                                                                      sspContent,
	"ClusterRole ssp-operator: instancetype.kubevirt.io virtualmachineclusterinstancetypes,virtualmachineclusterpreferences *":                         sspContent,
	"ClusterRole ssp-operator: rbac.authorization.k8s.io clusterroles,clusterrolebindings *":                                                           grantsComponents,
	"ClusterRole ssp-operator: ssp.kubevirt.io ssps,ssps/status,ssps/finalizers *":                                                                     ownAPI,
	"ClusterRole ssp-operator: tektontasks.kubevirt.io tektontasks,tektontasks/status *":                                                               ownAPI,
	"ClusterRole ssp-operator: template.openshift.io templates *":                                                                                      sspContent,
}
