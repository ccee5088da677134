# syntax=docker/dockerfile:1
#
# kubewire's container image: a static binary on a distroless base that has no
# shell and runs as non-root (65532), matching the chart's restricted
# securityContext. Build it with `make image`, or:
#
#   docker build --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg DATE=$(git log -1 --format=%cI) -t ghcr.io/kubewire/kubewire:v1.2.3 .
#
# Both base images are pinned by digest, so a rebuild of one commit uses the
# same bytes whatever the tags point to since; the tag stays for people to
# read and for Renovate or Dependabot, which should bump the digests (they
# match the "image:tag@sha256:..." form). TestTheImageDefinitionMeetsTheRelease
# refuses a FROM without a digest.
#
# The go build line below is the single source of the release build flags:
# internal/tools/packaging's TestTheImageBinaryIsStatic parses it and builds exactly
# that, because no container engine runs on our CI machines. Keep it one
# RUN line.

# The build stage runs on the builder's own platform and cross-compiles, so a
# multi-platform build (--platform linux/amd64,linux/arm64) needs no emulation.
# golang:1.26 is Go 1.26.8 at this digest (the go line of go.mod).
FROM --platform=$BUILDPLATFORM golang:1.26@sha256:3c3e25a4da13fd0478eed2df1eb35a0e667094a7124d3993a6a1d30f71c17e79 AS build
WORKDIR /src
# Modules first: this layer stays cached until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=
ARG DATE=
# CGO off: the base image has no C library, and a static binary has no loader
# to find. -trimpath drops this machine's paths from the binary; -s -w drop
# the symbol table and DWARF, which a production image does not need.
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags "-s -w -X github.com/kubewire/kubewire/internal/base/version.Version=${VERSION} -X github.com/kubewire/kubewire/internal/base/version.Commit=${COMMIT} -X github.com/kubewire/kubewire/internal/base/version.Date=${DATE}" -o /out/kubewire ./cmd/kubewire

# The Debian-suffixed tag, as distroless recommends: the unsuffixed
# static:nonroot moves to a new Debian release without notice.
FROM gcr.io/distroless/static-debian12:nonroot@sha256:f5b485ea962d9bd1186b2f6b3a061191539b905b82ec395de78cbfae51f20e35
# OCI annotations (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
# created is the commit time, not the build time, so rebuilding one commit
# gives the same image config.
ARG VERSION=dev
ARG COMMIT=
ARG DATE=
LABEL org.opencontainers.image.title="kubewire" \
      org.opencontainers.image.description="Streams Kubernetes object changes into Kafka and NATS as CloudEvents" \
      org.opencontainers.image.source="https://github.com/kubewire/kubewire" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${DATE}"
COPY --from=build /out/kubewire /kubewire
USER 65532:65532
ENTRYPOINT ["/kubewire"]
