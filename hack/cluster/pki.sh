#!/usr/bin/env bash
# Creates the dev cluster's certificates, keys and kubeconfigs under
# $KUBEVMM_CACHE/k8s/cluster/pki. Idempotent: an existing, still valid PKI
# for the same node is kept, so a running cluster is never re-keyed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

mkdir -p "$PKI_DIR"
cd "$PKI_DIR"
want="node=$NODE_NAME ip=$NODE_IP api=$SERVICE_API_IP v=3"
if [ "$(cat .stamp 2>/dev/null)" = "$want" ] && openssl x509 -checkend 86400 -noout -in ca.crt >/dev/null 2>&1 \
   && openssl x509 -checkend 86400 -noout -in apiserver.crt >/dev/null 2>&1; then
  exit 0
fi
log "pki.sh: creating certificates in $PKI_DIR"
rm -f ./*.crt ./*.key ./*.pub ./*.kubeconfig ./*.srl .stamp
umask 077
days=365

ca() { # name CN
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -days $days -subj "/CN=$2" 2>/dev/null
}
sign() { # ca name CN O SAN(optional)
  local ca=$1 n=$2 cn=$3 o=$4 san=${5:-}
  openssl req -newkey rsa:2048 -nodes -keyout "$n.key" -out "$n.csr" -subj "/CN=$cn${o:+/O=$o}" 2>/dev/null
  if [ -n "$san" ]; then
    printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" > "$n.ext"
  else
    printf 'extendedKeyUsage=clientAuth\n' > "$n.ext"
  fi
  openssl x509 -req -in "$n.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -out "$n.crt" -days $days -extfile "$n.ext" 2>/dev/null
  rm -f "$n.csr" "$n.ext"
}
kubeconfig() { # name user
  cat > "$1.kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: kubevmm
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: $PKI_DIR/ca.crt}
users:
- name: $2
  user: {client-certificate: $PKI_DIR/$1.crt, client-key: $PKI_DIR/$1.key}
contexts:
- name: kubevmm
  context: {cluster: kubevmm, user: $2}
current-context: kubevmm
EOK
}

ca ca kubevmm-ca
# Service-account token signing.
openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
sign ca apiserver kube-apiserver "" \
  "IP:127.0.0.1,IP:$SERVICE_API_IP,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
sign ca apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
sign ca admin kubernetes-admin system:masters
sign ca scheduler system:kube-scheduler ""
sign ca controller-manager system:kube-controller-manager ""
sign ca kubelet "system:node:$NODE_NAME" system:nodes
sign ca kube-proxy system:kube-proxy ""
sign ca kube-router system:kube-router ""
# The aggregation layer: kube-apiserver proxies requests for aggregated APIs
# (virt-api's subresources.kubevirt.io) with this client certificate, from
# its own CA, and the aggregated server trusts the X-Remote-* headers only
# from a client that CA signed with this name.
ca front-proxy-ca kubevmm-front-proxy-ca
sign front-proxy-ca front-proxy-client front-proxy-client ""

kubeconfig admin kubernetes-admin
kubeconfig scheduler system:kube-scheduler
kubeconfig controller-manager system:kube-controller-manager
kubeconfig kubelet "system:node:$NODE_NAME"
kubeconfig kube-proxy system:kube-proxy
kubeconfig kube-router system:kube-router
chmod 0644 ./*.crt ./*.kubeconfig sa.pub
echo "$want" > .stamp
