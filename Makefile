# kubewire's Makefile. CI runs exactly these targets (see .ci/run).
GO        ?= go
TESTFLAGS ?= -race -shuffle=on -count=1
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# COMMIT is the full revision, marked -dirty like VERSION; DATE is the commit
# time, not the time of the build, so two builds of one commit are identical.
COMMIT    := $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$c || echo $$c-dirty; })
DATE      := $(shell git log -1 --format=%cI 2>/dev/null)
IMAGE     ?= ghcr.io/kubewire/kubewire:$(VERSION)
VERSION_PKG := github.com/kubewire/kubewire/internal/base/version
LDFLAGS   := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).Date=$(DATE)

# Release: what `make release` builds, and where.
DIST      ?= dist
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
# Tools the build installs once, outside the repo, like the testbin cache.
TOOLS     ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kubewire/tools
# The SBOM generator, pinned; `go install pkg@version` needs no go.mod entry.
CYCLONEDX_GOMOD_VERSION := v1.10.0
CYCLONEDX_GOMOD := $(TOOLS)/cyclonedx-gomod-$(CYCLONEDX_GOMOD_VERSION)/cyclonedx-gomod

.PHONY: all build test e2e e2e-cluster testbin-node bench bench-history bench-drain bench-quick bench-apiserver bench-binary bench-binary-smoke bench-discovery lint demo testbin manifests image release clean

all: build

## build: compile bin/kubewire
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/kubewire ./cmd/kubewire

## testbin: build kube-apiserver and etcd once into the cache outside the repo
testbin:
	$(GO) run ./internal/testing/testcluster/cmd/testbin

## test: unit and integration tests, with a real kube-apiserver, etcd and NATS
test: testbin lint
	$(GO) test $(TESTFLAGS) -timeout 30m ./...

## testbin-node: testbin, and the kubelet, kube-controller-manager, kube-scheduler and kube-proxy that make e2e-cluster runs
testbin-node:
	$(GO) run ./internal/testing/testcluster/cmd/testbin -node

## e2e: tests against real external brokers (Apache Kafka); tagged e2e
e2e: testbin
	$(GO) test $(TESTFLAGS) -tags e2e -run 'E2E' -timeout 40m ./...

## e2e-cluster: kubewire as Pods on a real single-node cluster, installed from the packaged chart; tagged cluster. Needs root, containerd, runc and the CNI plugins (docs/quickstart.md)
# Without -race: the code under test runs in the pods, built as the image
# is (no race detector), and a race build of Helm's dependencies for the
# harness costs minutes.
e2e-cluster: testbin-node
	$(GO) test $(filter-out -race,$(TESTFLAGS)) -tags cluster -run 'Cluster' -timeout 30m ./test/cluster/...

## bench: benchmarks (never part of make test), then bench-history, bench-drain and bench-discovery
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 6 -timeout 40m ./... | tee bench.out
	$(MAKE) bench-history
	$(MAKE) bench-drain
	$(MAKE) bench-discovery

## bench-history: time to answer history --at -1h in a topic of a day's history, one million records (kfake); tagged bench
bench-history:
	$(GO) test -tags bench -run '^$$' -bench BenchmarkHistoryAtOneHourBackInAMillionRecords -benchtime 5x -count 3 -benchmem -timeout 30m ./consumer | tee bench-history.out

## bench-drain: the shipped binary, restarted into a 500 MB spool, drains it into real Kafka and nats-server; fails if its peak RSS passes 300 MB (make e2e runs it at 40 MB)
bench-drain: testbin
	KUBEWIRE_DRAIN_SPOOL_MB=500 $(GO) test -tags e2e -run 'TestE2EShippedBinaryDrainsALargeSpool' -v -count=1 -timeout 40m ./test/faults | tee bench-drain.out

## bench-quick: every benchmark once at a small fixed N, so the harness cannot rot (CI runs it)
bench-quick:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1x -count 1 -timeout 15m ./...

## bench-apiserver: snapshot time, heap per object, peak RSS and latency against a real kube-apiserver
bench-apiserver: testbin
	$(GO) test -tags bench -run 'APIServer' -v -timeout 60m ./test/perf | tee bench-apiserver.out

## bench-binary: the shipped binary's CPU and context switches per event, per sink, at 200 and 20 writes/s (needs java and nats-server)
bench-binary: testbin
	$(GO) test -tags bench -run '^$$' -bench ShippedBinary -benchtime 1x -count 3 -timeout 60m ./test/perf | tee bench-binary.out

## bench-discovery: the shipped binary with a discover entry against 5 named resources, on a real kube-apiserver with 40 CRDs: time to the first complete snapshot, requests at start, idle CPU, wakes, Lease writes and apiserver requests, RSS and heap per object
bench-discovery: testbin
	KUBEWIRE_DISCOVERY_COST=1 $(GO) test -tags bench -run '^$$' -bench DiscoveryCost -benchtime 1x -count 1 -v -timeout 30m ./test/perf | tee bench-discovery.out

## bench-binary-smoke: bench-binary's harness for 3 s, stdout only, so it cannot rot
bench-binary-smoke: testbin
	KUBEWIRE_BINARY_BENCH_SMOKE=1 $(GO) test -tags bench -run '^$$' -bench ShippedBinary -benchtime 1x -count 1 -timeout 10m ./test/perf

## lint: formatting, and vet of every build (plain, e2e, bench and cluster tags)
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags e2e ./...
	$(GO) vet -tags bench ./...
	$(GO) vet -tags cluster ./...

## demo: start a local cluster and print its changes to this terminal as kubewire tail does (RAW=1: the CloudEvents)
demo: testbin
	@echo "demo: compiling the demo (a minute or two the first time, seconds after)"
	@$(GO) run ./internal/tools/demo $(if $(RAW),-raw)

## manifests: regenerate deploy/kubewire.yaml from charts/kubewire (a test checks they agree)
manifests:
	$(GO) run ./internal/tools/packaging/cmd/manifests

## image: build the container image (needs a container engine; TestTheImageBinaryIsStatic covers the build here)
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg DATE=$(DATE) -t $(IMAGE) .

## release: static binaries for $(PLATFORMS), an SBOM for each, the packaged chart and SHA256SUMS, into $(DIST)/
# Each binary is built as the image's is (CGO off, -trimpath, -s -w) with the
# version, commit and commit time stamped in, so one commit always gives the
# same bytes. The SBOM (CycloneDX JSON) lists the modules compiled into that
# binary, read from the binary itself. The image is `make image` (needs docker).
release: $(CYCLONEDX_GOMOD)
	@mkdir -p '$(DIST)' && rm -f '$(DIST)'/kubewire-* '$(DIST)'/SHA256SUMS
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; bin='$(DIST)'/kubewire-$$os-$$arch; \
	  echo "build   $$bin"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o "$$bin" ./cmd/kubewire; \
	  echo "sbom    $$bin.cdx.json"; \
	  '$(CYCLONEDX_GOMOD)' bin -json -std -noserial -notimestamp -version '$(VERSION)' -output "$$bin.cdx.json" "$$bin"; \
	done
	@# Built with the binaries' flags, so the packages they share come from the build cache.
	@chart=$$(CGO_ENABLED=0 $(GO) run -trimpath ./internal/tools/packaging/cmd/chartpkg -o '$(DIST)' -mtime '$(DATE)') && echo "chart   $$chart"
	@cd '$(DIST)' && sha256sum kubewire-* > SHA256SUMS
	@echo "sums    $(DIST)/SHA256SUMS"
	@echo; echo "kubewire $(VERSION) (commit $(COMMIT), $(DATE)) in $(DIST)/:"; cat '$(DIST)'/SHA256SUMS

# The tool's directory names its version, so a bump installs the new one.
$(CYCLONEDX_GOMOD):
	GOBIN='$(dir $@)' $(GO) install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_GOMOD_VERSION)

clean:
	rm -rf bin dist bench.out bench-history.out bench-apiserver.out bench-discovery.out
