# syntax=docker/dockerfile:1
#
# kubewire's container image: a static binary on a distroless base that has no
# shell and runs as non-root (65532), matching the chart's restricted
# securityContext. Build it with `make image`, or:
#
#   docker build --build-arg VERSION=v1.2.3 -t ghcr.io/kubewire/kubewire:v1.2.3 .
#
# The go build line below is the single source of the release build flags:
# internal/packaging's TestImageBinaryIsStatic parses it and builds exactly
# that, because no container engine runs on our CI machines. Keep it one
# RUN line.

# The build stage runs on the builder's own platform and cross-compiles, so a
# multi-platform build (--platform linux/amd64,linux/arm64) needs no emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Modules first: this layer stays cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
# CGO off: the base image has no C library, and a static binary has no loader
# to find. -trimpath drops this machine's paths from the binary; -s -w drop
# the symbol table and DWARF, which a production image does not need.
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w -X github.com/kubewire/kubewire/internal/version.Version=${VERSION}" -o /out/kubewire ./cmd/kubewire

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/kubewire /kubewire
USER 65532:65532
ENTRYPOINT ["/kubewire"]
