# kubewire's Makefile. CI runs exactly these targets (see .ci/run).
GO        ?= go
TESTFLAGS ?= -race -shuffle=on -count=1
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# COMMIT is the full revision, marked -dirty like VERSION; DATE is the commit
# time, not the time of the build, so two builds of one commit are identical.
COMMIT    := $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$c || echo $$c-dirty; })
DATE      := $(shell git log -1 --format=%cI 2>/dev/null)
IMAGE     ?= ghcr.io/kubewire/kubewire:$(VERSION)
VERSION_PKG := github.com/kubewire/kubewire/internal/version
LDFLAGS   := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).Date=$(DATE)

.PHONY: all build test e2e bench bench-quick bench-apiserver lint demo testbin manifests image clean

all: build

## build: compile bin/kubewire
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/kubewire ./cmd/kubewire

## testbin: build kube-apiserver and etcd once into the cache outside the repo
testbin:
	$(GO) run ./internal/testcluster/cmd/testbin

## test: unit and integration tests, with a real kube-apiserver, etcd and NATS
test: testbin lint
	$(GO) test $(TESTFLAGS) -timeout 30m ./...

## e2e: tests against real external brokers (Apache Kafka); tagged e2e
e2e: testbin
	$(GO) test $(TESTFLAGS) -tags e2e -run 'E2E' -timeout 40m ./...

## bench: benchmarks (never part of make test)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 6 -timeout 40m ./... | tee bench.out

## bench-quick: every benchmark once at a small fixed N, so the harness cannot rot (CI runs it)
bench-quick:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1x -count 1 -timeout 15m ./...

## bench-apiserver: snapshot time, heap per object, peak RSS and latency against a real kube-apiserver
bench-apiserver: testbin
	$(GO) test -tags bench -run 'APIServer' -v -timeout 60m ./internal/perf | tee bench-apiserver.out

## lint: formatting and vet
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...

## demo: start a local cluster and stream its changes to this terminal
demo: testbin
	@$(GO) run ./internal/demo

## manifests: regenerate deploy/kubewire.yaml from charts/kubewire (a test checks they agree)
manifests:
	$(GO) run ./internal/packaging/cmd/manifests

## image: build the container image (needs a container engine; TestTheImageBinaryIsStatic covers the build here)
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg DATE=$(DATE) -t $(IMAGE) .

clean:
	rm -rf bin bench.out bench-apiserver.out
