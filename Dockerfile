# One Dockerfile, two images: build with --target holdfast-webhook or
# --target holdfast-controller. The binaries are linked statically (musl) and run
# from an empty base image as an unprivileged numeric user (runAsNonRoot can
# check a numeric user; there is no shell, package manager or passwd file).
#
#   $BUILDER build --target holdfast-webhook    -t holdfast-webhook:0.1.0 .
#   $BUILDER build --target holdfast-controller -t holdfast-controller:0.1.0 .
#
# The tag is the workspace version (Cargo.toml [workspace.package] version), the
# one manifests/base pins; test/e2e/tests/packaging.rs checks they agree.

ARG RUST_IMAGE=rust:1.95-alpine

FROM ${RUST_IMAGE} AS build
# make: jemalloc (tikv-jemalloc-sys) is built from its C sources.
RUN apk add --no-cache musl-dev make
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p holdfast-webhook -p holdfast-controller --bins \
 && mkdir -p /out \
 && cp target/release/holdfast-webhook target/release/holdfast-controller /out/

FROM scratch AS holdfast-webhook
COPY --from=build /out/holdfast-webhook /holdfast-webhook
USER 65532:65532
# 8443: admission reviews (HTTPS), 8080: /healthz, /readyz, /metrics.
EXPOSE 8443 8080
ENTRYPOINT ["/holdfast-webhook"]

FROM scratch AS holdfast-controller
COPY --from=build /out/holdfast-controller /holdfast-controller
USER 65532:65532
# 8081: /healthz, /readyz.
EXPOSE 8081
ENTRYPOINT ["/holdfast-controller"]
