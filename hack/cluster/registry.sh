#!/usr/bin/env bash
# The dev cluster's OCI registry: the distribution registry (CNCF
# Distribution, what `docker run registry:2` runs) built from its Go module
# and run on the node, TLS with a certificate the cluster CA signs.
#
#   hack/cluster/registry.sh build   build it once (cached); prints the binary's path
#   hack/cluster/registry.sh start   up.sh: certificate, config, containerd's hosts.toml, start, wait
#   hack/cluster/registry.sh addr    prints the address images are pushed to and pulled from
#
# It listens on the node IP, port 5000 ($REGISTRY_ADDR): the kubelet's
# containerd (on this host) and pods (through the pod bridge's route to the
# node) both reach it there, by the same name, so an image reference works
# in a containerDisk and in a DataVolume's docker:// URL alike. containerd
# trusts it through $CLUSTER_DIR/containerd/certs.d/$REGISTRY_ADDR/hosts.toml
# (the cluster CA); pods get the CA from wherever they get it (a
# DataVolume's certConfigMap). Storage is $CLUSTER_DIR/registry, wiped by
# down.sh with the rest of the cluster state; down.sh stops it by its
# recorded PID.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

bin=$REGISTRY_BIN_DIR/registry-$REGISTRY_VERSION

build() {
  [ -x "$bin" ] && return 0
  mkdir -p "$REGISTRY_BIN_DIR"
  exec 8>"$REGISTRY_BIN_DIR/.build.lock"
  flock 8
  [ -x "$bin" ] && return 0
  log "registry.sh: building github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION (cold: a few minutes)"
  local tmp
  tmp=$(mktemp -d)
  # go install pkg@version builds the module as its own go.mod pins it,
  # outside this repository's module.
  (cd "$tmp" && GOBIN=$tmp CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install -trimpath -ldflags "-s -w" \
    "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION")
  mv "$tmp/registry" "$bin"
  rm -rf "$tmp"
}

start() {
  [ "$(id -u)" -eq 0 ] || die "registry.sh start: must run as root"
  build
  local dir=$CLUSTER_DIR/registry
  mkdir -p "$dir/storage" "$CLUSTER_DIR/conf"
  # Signed by the cluster CA (pki.sh); made again whenever pki.sh made a
  # new CA.
  if ! openssl verify -CAfile "$PKI_DIR/ca.crt" "$PKI_DIR/registry.crt" >/dev/null 2>&1; then
    (
      cd "$PKI_DIR"
      umask 077
      openssl req -newkey rsa:2048 -nodes -keyout registry.key -out registry.csr -subj "/CN=kubevmm-registry" 2>/dev/null
      printf 'subjectAltName=IP:%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' "$NODE_IP" > registry.ext
      openssl x509 -req -in registry.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out registry.crt -days 365 \
        -extfile registry.ext 2>/dev/null
      rm -f registry.csr registry.ext
      chmod 0644 registry.crt
    )
  fi
  cat > "$CLUSTER_DIR/conf/registry.yml" <<EOC
version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
  tls:
    certificate: $PKI_DIR/registry.crt
    key: $PKI_DIR/registry.key
EOC
  # containerd 1.6 reads certs.d/<host:port>/hosts.toml per pull.
  local hd=$CLUSTER_DIR/containerd/certs.d/$REGISTRY_ADDR
  mkdir -p "$hd"
  cp "$PKI_DIR/ca.crt" "$hd/ca.crt"
  printf 'server = "https://%s"\n\n[host."https://%s"]\n  capabilities = ["pull", "resolve", "push"]\n  ca = "%s/ca.crt"\n' \
    "$REGISTRY_ADDR" "$REGISTRY_ADDR" "$hd" > "$hd/hosts.toml"
  local pidfile=$CLUSTER_DIR/registry.pid
  if ! alive registry "$bin serve"; then
    rm -f "$pidfile"
    setsid sh -c 'echo $$ > "$0"; exec "$@"' "$pidfile" "$bin" serve "$CLUSTER_DIR/conf/registry.yml" \
      > "$LOG_DIR/registry.log" 2>&1 < /dev/null &
    until [ -s "$pidfile" ]; do sleep 0.05; done
  fi
  local end=$(( $(date +%s) + 60 ))
  until curl -sf --cacert "$PKI_DIR/ca.crt" "https://$REGISTRY_ADDR/v2/" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || die "registry.sh: registry did not answer on $REGISTRY_ADDR within 60s; see $LOG_DIR/registry.log"
    alive registry "$bin serve" || die "registry.sh: registry exited; see $LOG_DIR/registry.log"
    sleep 0.2
  done
}

case "${1:-}" in
  build) build; echo "$bin" ;;
  start) start ;;
  addr) echo "$REGISTRY_ADDR" ;;
  *) die "usage: registry.sh build|start|addr" ;;
esac
