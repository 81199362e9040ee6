#!/usr/bin/env bash
# Builds upstream KubeVirt's virtctl, the release kubevmm's virtctl follows,
# from the Go module proxy, for cmd/virtctl's test that compares the two
# binaries' commands and flags. Idempotent: a binary built with the same
# inputs (version, this script, Go) is kept. Prints the binary's path.
#
#   hack/upstream-virtctl.sh             # $UPSTREAM_VIRTCTL_VERSION, default v1.9.0
#
# Everything lives under $KUBEVMM_CACHE/upstream-virtctl: bin/ (the binary),
# go/ (a private module and build cache, as hack/cluster/build.sh keeps),
# src/ (the scratch module it is built from). A cold build takes about 4
# minutes on 2 idle cores (about 6 CPU-minutes: downloading and compiling
# client-go and kubevirt); later runs print the path at once.
#
# kubevirt.io/kubevirt replaces its staging modules (kubevirt.io/api,
# kubevirt.io/client-go) with ./staging/...; a module that requires it names
# their published versions instead, and repeats its other replaces. Three
# modules virtctl imports are not served by the module proxy here
# (kubevirt.io/virt-template-api, -client-go and -engine: "This module
# version is not available"): they are replaced by the type declarations
# upstream's code compiles against, with no behaviour. They serve only the
# `template` commands and VirtualMachineTemplate informers, which cobra never
# runs for --help: every command, alias and flag of the binary is upstream's.
set -euo pipefail

VERSION=${UPSTREAM_VIRTCTL_VERSION:-v1.9.0}
cache=${KUBEVMM_CACHE:-$HOME/.cache/kubevmm}/upstream-virtctl
bin=$cache/bin/virtctl-$VERSION
log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

build_id=$( { echo "$VERSION"; cat "$0"; go env GOVERSION; } | sha256sum | cut -c1-16)
if [ -x "$bin" ] && [ "$(cat "$bin.build-id" 2>/dev/null)" = "$build_id" ]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache/bin"
exec 9>"$cache/.build.lock"
flock 9   # two tests building at once would fight over the same caches
if [ -x "$bin" ] && [ "$(cat "$bin.build-id" 2>/dev/null)" = "$build_id" ]; then
  echo "$bin"   # built by the one we waited for
  exit 0
fi

export GOMODCACHE=$cache/go/mod GOCACHE=$cache/go/cache GOPATH=$cache/go/path
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off
src=$cache/src
rm -rf "$src"
mkdir -p "$src"
cd "$src"
t0=$(date +%s)

log "upstream-virtctl.sh: resolving kubevirt.io/kubevirt@$VERSION"
gomod=$(go mod download -json "kubevirt.io/kubevirt@$VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
[ -f "$gomod" ] || die "upstream-virtctl.sh: cannot download kubevirt.io/kubevirt@$VERSION"
for m in kubevirt.io/api kubevirt.io/client-go; do
  go list -m -json "$m@$VERSION" >/dev/null || die "upstream-virtctl.sh: the proxy does not serve $m@$VERSION"
done

# The stand-ins for the three modules the proxy does not serve.
mkdir -p stub/api/core/v1beta1 stub/api/core/subresourcesv1beta1 stub/client-go/virttemplate stub/engine/template
cat > stub/api/go.mod <<EOF
module kubevirt.io/virt-template-api

go 1.24.0

require (
	k8s.io/apimachinery v0.34.2
	kubevirt.io/api $VERSION
)
EOF
cat > stub/api/core/core.go <<'EOF'
// Package core: a stand-in with the names upstream virtctl compiles against.
package core

const (
	GroupName                   = "template.kubevirt.io"
	SingularResourceName        = "virtualmachinetemplate"
	PluralResourceName          = "virtualmachinetemplates"
	SingularRequestResourceName = "virtualmachinetemplaterequest"
)
EOF
cat > stub/api/core/v1beta1/types.go <<'EOF'
// Package v1beta1: a stand-in with the types upstream virtctl compiles against.
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var GroupVersion = schema.GroupVersion{Group: "template.kubevirt.io", Version: "v1beta1"}

type Parameter struct {
	Name, DisplayName, Description, Value, Generate, From string
	Required                                              bool
}

type VirtualMachineTemplateSpec struct {
	Message        string
	Parameters     []Parameter
	VirtualMachine *runtime.RawExtension
}

type VirtualMachineTemplate struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec VirtualMachineTemplateSpec
}

func (t *VirtualMachineTemplate) DeepCopyObject() runtime.Object { c := *t; return &c }

type VirtualMachineReference struct{ Namespace, Name string }

type VirtualMachineTemplateRequestSpec struct {
	VirtualMachineRef VirtualMachineReference
	TemplateName      string
}

type VirtualMachineTemplateRequest struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	Spec VirtualMachineTemplateRequestSpec
}
EOF
cat > stub/api/core/subresourcesv1beta1/types.go <<'EOF'
// Package subresourcesv1beta1: a stand-in with the types upstream virtctl compiles against.
package subresourcesv1beta1

import virtv1 "kubevirt.io/api/core/v1"

type ProcessOptions struct{ Parameters map[string]string }

type ProcessedVirtualMachineTemplate struct {
	VirtualMachine *virtv1.VirtualMachine
	Message        string
}
EOF
cat > stub/client-go/go.mod <<'EOF'
module kubevirt.io/virt-template-client-go

go 1.24.0

require (
	k8s.io/apimachinery v0.34.2
	k8s.io/client-go v0.34.2
	kubevirt.io/virt-template-api v0.2.0
)
EOF
cat > stub/client-go/virttemplate/client.go <<'EOF'
// Package virttemplate: a stand-in with the client upstream virtctl compiles
// against; it has no client to give.
package virttemplate

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"kubevirt.io/virt-template-api/core/subresourcesv1beta1"
	"kubevirt.io/virt-template-api/core/v1beta1"
)

type Interface interface{ TemplateV1beta1() TemplateV1beta1Interface }

type TemplateV1beta1Interface interface {
	RESTClient() rest.Interface
	VirtualMachineTemplates(namespace string) VirtualMachineTemplateInterface
	VirtualMachineTemplateRequests(namespace string) VirtualMachineTemplateRequestInterface
}

type VirtualMachineTemplateInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1beta1.VirtualMachineTemplate, error)
	Process(ctx context.Context, name string, opts subresourcesv1beta1.ProcessOptions) (*subresourcesv1beta1.ProcessedVirtualMachineTemplate, error)
	CreateVirtualMachine(ctx context.Context, name string, opts subresourcesv1beta1.ProcessOptions) (*subresourcesv1beta1.ProcessedVirtualMachineTemplate, error)
}

type VirtualMachineTemplateRequestInterface interface {
	Create(ctx context.Context, r *v1beta1.VirtualMachineTemplateRequest, opts metav1.CreateOptions) (*v1beta1.VirtualMachineTemplateRequest, error)
}

func NewForConfig(*rest.Config) (Interface, error) {
	return nil, errors.New("virt-template client: a stand-in (hack/upstream-virtctl.sh)")
}
EOF
cat > stub/engine/go.mod <<EOF
module kubevirt.io/virt-template-engine

go 1.24.0

require (
	k8s.io/apimachinery v0.34.2
	kubevirt.io/api $VERSION
	kubevirt.io/virt-template-api v0.2.0
)
EOF
cat > stub/engine/template/template.go <<'EOF'
// Package template: a stand-in with the engine upstream virtctl compiles
// against; it processes nothing.
package template

import (
	"errors"

	"k8s.io/apimachinery/pkg/util/validation/field"
	virtv1 "kubevirt.io/api/core/v1"

	"kubevirt.io/virt-template-api/core/v1beta1"
)

var errStandIn = errors.New("virt-template engine: a stand-in (hack/upstream-virtctl.sh)")

func MergeParameters(p []v1beta1.Parameter, _ map[string]string) ([]v1beta1.Parameter, error) {
	return p, errStandIn
}

func ValidateParameterReferences(*v1beta1.VirtualMachineTemplate) ([]string, field.ErrorList) {
	return nil, field.ErrorList{field.InternalError(nil, errStandIn)}
}

type Processor struct{}

func (Processor) Process(*v1beta1.VirtualMachineTemplate) (*virtv1.VirtualMachine, string, error) {
	return nil, "", errStandIn
}

func GetDefaultProcessor() Processor { return Processor{} }
EOF

{
  printf 'module kubevmm.local/upstream-virtctl\n\ngo %s\n\n' "$(sed -n 's/^go //p' "$gomod")"
  printf 'require (\n\tkubevirt.io/kubevirt %s\n\tkubevirt.io/api %s\n\tkubevirt.io/client-go %s\n)\n\n' "$VERSION" "$VERSION" "$VERSION"
  # Upstream's replaces, less its staging directories.
  sed -n '/^replace (/,/^)/p' "$gomod" | grep -v '=> \./'
  printf '\nreplace (\n'
  for m in api client-go engine; do printf '\tkubevirt.io/virt-template-%s => ./stub/%s\n' "$m" "$m"; done
  printf ')\n'
} > go.mod

# Exact versions: without one, go get moves to the newest release.
go get "kubevirt.io/kubevirt/cmd/virtctl@$VERSION" "kubevirt.io/api@$VERSION" "kubevirt.io/client-go@$VERSION" >&2 ||
  die "upstream-virtctl.sh: resolving kubevirt.io/kubevirt/cmd/virtctl@$VERSION failed"
commit=$(go mod download -json "kubevirt.io/kubevirt@$VERSION" | sed -n 's/.*"Hash": "\(.*\)".*/\1/p')
p=kubevirt.io/client-go/version
ldf="-s -w -X $p.gitVersion=$VERSION -X $p.gitCommit=$commit -X $p.gitTreeState=clean"
log "upstream-virtctl.sh: building virtctl $VERSION (about 4 minutes on 2 idle cores)"
go build -trimpath -ldflags "$ldf" -o "$bin.tmp" kubevirt.io/kubevirt/cmd/virtctl
mv "$bin.tmp" "$bin"
echo "$build_id" > "$bin.build-id"
go clean -cache   # 1 GiB that only a rebuild with other inputs could use
log "upstream-virtctl.sh: built $bin in $(( $(date +%s) - t0 )) s"
echo "$bin"
