# kubevmm — see README.md. Everything a target needs (Debian packages, the
# guest kernel and initramfs) is installed or built by the target itself and
# cached under $(KUBEVMM_CACHE).
export KUBEVMM_CACHE ?= $(HOME)/.cache/kubevmm
GO ?= go
BIN := bin

.PHONY: all build demo test unit vet lint fuzz fuzz-long bench guest clean

all: build

# Without cgo: the commands need no C library (only net's resolver would
# use it), and a VMM that maps no libc holds ~1.4 MiB less (see README).
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...

guest:
	@hack/guest-image.sh

# Boot the test guest with 2 vCPUs: it prints what it sees and powers off.
demo: build
	@guest=$$(hack/guest-image.sh) && \
	$(BIN)/vmm run --kernel $$guest/vmlinux --initrd $$guest/initramfs.cpio --cpus 2 --memory 256M -v

vet:
	$(GO) vet ./...

# golangci-lint with .golangci.yml; any finding fails the target. The tool is
# pinned in its own module, hack/tools/go.mod: in the main go.mod its
# dependencies made `go mod tidy` fail on an ambiguous genproto import and
# moved the project's own dependencies. The first run builds it (~2 min).
lint:
	$(GO) tool -modfile=hack/tools/go.mod golangci-lint run ./...

# Lint, then the unit tests and the guest boots (tests that boot Linux read
# KUBEVMM_GUEST_DIR). Every fuzz target's kept corpus runs here as seeds;
# fuzzing itself is make fuzz (CI's time goes to the guest boots: 5 s a
# target cost about 5 minutes there, most of it building the targets).
test: vet lint
	@hack/deps.sh qemu
	@guest=$$(hack/guest-image.sh) && \
	KUBEVMM_GUEST_DIR=$$guest $(GO) test -timeout 60m -count=1 ./...

# Every fuzz target for a bounded time (FUZZTIME each, its build included):
# a smoke run (25 targets: under 5 minutes); fuzz-long is the deep one,
# and every plain go test runs the kept corpus as seeds.
FUZZTIME ?= 5s
fuzz:
	@hack/fuzz.sh $(FUZZTIME)

# The long, nightly-style run: FUZZEXECS executions per target (FUZZ_TARGETS,
# a regexp, picks some), keeping what the fuzzer found in testdata/fuzz.
FUZZEXECS ?= 10000000
fuzz-long:
	@FUZZ_KEEP_CORPUS=1 hack/fuzz.sh $(FUZZEXECS)x

# The bench installs the host programs it runs itself (test/hosttools).
bench: build
	@guest=$$(hack/guest-image.sh) && \
	$(GO) run ./test/bench -guest $$guest -vmm $(BIN)/vmm -out test/bench/RESULTS.md

clean:
	rm -rf $(BIN)

# --- Kubernetes: dev cluster, envtest, API code generation (issue 5) -------
# A real single-node Kubernetes v1.35.4 on this machine, built from the Go
# module proxy and cached under $(KUBEVMM_CACHE)/k8s; see hack/cluster/*.sh.
#   make cluster-up      build (once) + start everything, wait for node Ready
#   make cluster-sync    build/import kubevmm images, deploy virt-operator + a KubeVirt CR
#   make cluster-down    stop everything by recorded PID, wipe cluster state
#   hack/kubectl.sh ...  kubectl against that cluster
.PHONY: cluster-up cluster-down cluster-sync cluster-check envtest-assets test-envtest generate

cluster-up:
	@hack/cluster/up.sh

cluster-down:
	@hack/cluster/down.sh

cluster-sync:
	@hack/cluster/sync.sh

# cluster-up, node Ready via hack/kubectl.sh, a pod, the CRDs and
# virt-controller on the real cluster, cluster-down stops everything.
cluster-check:
	@hack/cluster/check.sh

# etcd + kube-apiserver (+ kubectl) for the envtest-based controller tests.
export KUBEBUILDER_ASSETS ?= $(KUBEVMM_CACHE)/k8s/bin
envtest-assets:
	@hack/cluster/build.sh envtest >/dev/null

# `make test` runs ./controller/... too: give it its API server.
test: envtest-assets

test-envtest: envtest-assets
	$(GO) test -count=1 ./api/... ./controller/...

# deepcopy + CRDs from api/core/v1, virt-controller's ClusterRole from its
# RBAC markers (controller-gen, pinned in go.mod's tool block).
generate:
	$(GO) generate ./api/... ./controller/... ./handler/...

# --- Kubernetes phase 2 (issue 5): the components on the dev cluster ------
#   make e2e             cluster-up, cluster-sync, the test guest's kernelBoot
#                        image, then test/e2e (VM lifecycle through kubectl and
#                        virtctl); cluster-down after, unless E2E_KEEP=1 or the
#                        cluster was already up
#   hack/virtctl.sh ...  virtctl against the dev cluster
.PHONY: e2e
e2e:
	@hack/cluster/e2e.sh
