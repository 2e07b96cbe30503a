# Weft build entry points. Every target installs what it needs itself: Go modules
# come from `go mod download`; staticcheck is a `go tool` pinned in go.mod.
GO      ?= go
BIN     ?= bin
FUZZTIME ?= 10s

.PHONY: all build test vet staticcheck unit demo demo-pods bench fuzz clean deps generate

all: build

deps:
	$(GO) mod download

# The sidecar (issue #4: idle RSS <= 20 MiB; tools/bench/proxy/idlerss.sh measures
# it) is built static, so no libc pages are mapped, and with grpcnotrace: grpc's
# golang.org/x/net/trace brings html/template, whose reflective method calls make
# the linker keep every exported method of every linked type (all the Envoy protos'
# getters and validators), about 5 MiB of resident code.
SIDECAR_BUILD ?= CGO_ENABLED=0 $(GO) build -tags grpcnotrace

# Every binary's --version (internal/version) says this; empty falls back to the
# module build info (VCS revision and whether the tree was modified).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
LDFLAGS ?= -X github.com/weft-mesh/weft/internal/version.Version=$(VERSION)

build: deps
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/pilot ./pilot/cmd/pilot
	$(SIDECAR_BUILD) -ldflags "$(LDFLAGS)" -o $(BIN)/sidecar ./sidecar/cmd/sidecar
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/meshctl ./tools/meshctl/cmd/meshctl

# Regenerates the committed eBPF objects (ebpf/bpf) from their C source; needs
# clang, llvm and libbpf-dev (installed here when missing, as .ci/run does).
# ebpf/bpf's test checks that the committed output matches the source.
BPF_APT ?= clang llvm libbpf-dev
generate: deps
	@missing=""; for p in $(BPF_APT); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then sudo=""; [ "$$(id -u)" -ne 0 ] && sudo=sudo; \
	  $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends $$missing; fi
	$(GO) generate ./ebpf/bpf

vet: deps
	$(GO) vet ./...

staticcheck: deps
	$(GO) tool staticcheck ./...

unit: deps
	$(GO) test -race ./...

test: vet staticcheck unit

# Starts pilot on a temporary data directory, applies examples/, shows objects,
# revisions and history, shows a stale --if-match refused, stops and cleans up.
demo: build
	$(GO) run ./tools/demo --bin $(BIN) --examples examples

# The demo's pod mode (needs root): pilot in a node network namespace, pods
# frontend and reviews with the real interception (sidecar intercept, sidecars as
# uid 1337), curl http://reviews.shop:9080/ by name, pilot killed, interception
# removed; everything it makes is removed at the end (tools/demo/pods.go).
# INTERCEPT=ebpf: the sidecars' cgroup eBPF programs instead of iptables outbound.
INTERCEPT ?= iptables
demo-pods: build
	$(GO) run ./tools/demo --bin $(BIN) --pods --intercept $(INTERCEPT)

# Benchmarks of every package that has them (tools/bench/run.sh; extend it there).
bench: deps
	bash tools/bench/run.sh

# Every Fuzz target in the repository for FUZZTIME each (tools/fuzz/run.sh).
fuzz: deps
	FUZZTIME=$(FUZZTIME) bash tools/fuzz/run.sh

clean:
	rm -rf $(BIN)
	$(GO) clean -testcache
