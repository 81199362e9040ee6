# kubevmm — see README.md. Everything a target needs (Debian packages, the
# guest kernel and initramfs) is installed or built by the target itself and
# cached under $(KUBEVMM_CACHE).
export KUBEVMM_CACHE ?= $(HOME)/.cache/kubevmm
GO ?= go
BIN := bin

.PHONY: all build demo test unit vet fuzz bench guest clean

all: build

build:
	$(GO) build -o $(BIN)/ ./cmd/...

guest:
	@hack/guest-image.sh

# Boot the test guest with 2 vCPUs: it prints what it sees and powers off.
demo: build
	@guest=$$(hack/guest-image.sh) && \
	$(BIN)/vmm run --kernel $$guest/vmlinux --initrd $$guest/initramfs.cpio --cpus 2 --memory 256M -v

vet:
	$(GO) vet ./...

# Unit tests, then the guest boots (tests that boot Linux read KUBEVMM_GUEST_DIR).
test: vet
	@hack/deps.sh qemu
	@guest=$$(hack/guest-image.sh) && \
	KUBEVMM_GUEST_DIR=$$guest $(GO) test -timeout 60m -count=1 ./...
	@$(MAKE) --no-print-directory fuzz

# Every fuzz target for a bounded time (FUZZTIME each).
FUZZTIME ?= 20s
fuzz:
	@hack/fuzz.sh $(FUZZTIME)

bench: build
	@hack/deps.sh qemu
	@guest=$$(hack/guest-image.sh) && \
	$(GO) run ./test/bench -guest $$guest -vmm $(BIN)/vmm -out test/bench/RESULTS.md

clean:
	rm -rf $(BIN)
