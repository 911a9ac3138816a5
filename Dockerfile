# The Cloud Tasks emulator as a container image: `ctdispatch emulator` and
# nothing else. Build it with `make image`, which first builds the static
# binary (make build) and copies the build host's CA certificates next to
# it, since a build can only copy files from its context:
#
#   make image                      # podman build --format docker -t ctdispatch-emulator:dev .
#   docker run --rm -p 127.0.0.1:8123:8123 -p 127.0.0.1:8124:8124 ctdispatch-emulator:dev --queue work
#
# Why scratch, a numeric user and a health check that is the binary:
# ADR/0010-container.md. Use: docs/emulator.md.

# No base image: the binary is static (CGO_ENABLED=0), so it needs no libc,
# and building needs no registry.
FROM scratch

LABEL org.opencontainers.image.title="ctdispatch emulator" \
      org.opencontainers.image.description="Cloud Tasks v2 emulator: gRPC API, HTTP delivery with OIDC tokens" \
      org.opencontainers.image.source="https://github.com/ctdispatch/ctdispatch"

# CA certificates let the emulator deliver to https:// workers.
COPY bin/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY bin/ctdispatch /ctdispatch

# A numeric user needs no /etc/passwd entry, and a runtime can tell it is
# not root without looking one up (Kubernetes' runAsNonRoot).
USER 65532:65532

# 8123: the Cloud Tasks gRPC API. 8124: the HTTP server with the OIDC
# discovery document and keys workers verify tokens with.
EXPOSE 8123 8124

# The tokens' issuer and key URL: where workers reach port 8124. This
# default fits workers on the host with -p 8124:8124; set it to what your
# workers use, e.g. http://emulator:8124 in a compose network.
ENV CTDISPATCH_EMULATOR_PUBLIC_URL=http://localhost:8124

# There is no shell to run curl in: the binary checks itself, over the
# standard gRPC health protocol and a fetch of the discovery document.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["/ctdispatch", "emulator", "health", "--addr", "127.0.0.1:8123", "--http-addr", "127.0.0.1:8124", "--timeout", "4s"]

# Arguments after the image name are appended: --queue NAME, --config FILE
# (mount it), --fault ..., --public-url URL. Queues and a config file can
# also come from CTDISPATCH_EMULATOR_QUEUES and CTDISPATCH_EMULATOR_CONFIG.
ENTRYPOINT ["/ctdispatch", "emulator", "--addr", "0.0.0.0:8123", "--http-addr", "0.0.0.0:8124"]
