# ropeserve CPU image. Build stage: Debian bookworm with the same package
# script and build script as the README; runtime stage: bookworm-slim with
# only the shared libraries the binary links (found with ldd at build time),
# OpenBLAS and curl (for HEALTHCHECK); non-root.
#
#   docker build -t ropeserve:cpu .                  (or: podman build)
#   docker run -p 8080:8080 -p 50051:50051 ropeserve:cpu             # demo models
#   docker run -p 8080:8080 -p 50051:50051 -v /srv/models:/models:ro \
#     -e ROPESERVE_MODEL=/models/Qwen2.5-0.5B-Instruct ropeserve:cpu
#
# Every `ropeserve serve` flag can be given as arguments after the image name
# or as a ROPESERVE_* environment variable (docs/api.md, docs/deploy.md).
# The CUDA image is deploy/Dockerfile.cuda.

FROM debian:bookworm AS build
WORKDIR /src
# Dependencies first: these layers are reused until scripts/deps changes
# (scripts/test-image builds the lines above `COPY . .` alone while the
# suite compiles: IMAGE_PREPARE_ONLY=1).
COPY scripts/deps scripts/deps
# scripts/build runs scripts/deps again: the test-only packages stay out.
ENV DEPS_TESTS=0
RUN scripts/deps && rm -rf /var/lib/apt/lists/*
COPY . .
# ccache survives between builds in a cache mount (BuildKit and podman);
# scripts/test-image lends the host's cache instead (CCACHE_DIR=/host-ccache,
# mounted with `podman build -v`). RelWithDebInfo (-O2 -g), stripped when
# installed: the build type scripts/build, the test suite and bench/ use,
# with the build directory inside the checkout as there, so a host's cache
# holds every object of this build.
ARG CCACHE_DIR=/root/.cache/ropeserve/ccache
RUN --mount=type=cache,target=/root/.cache/ropeserve/ccache \
    CCACHE_DIR="$CCACHE_DIR" CMAKE_ARGS="-DROPESERVE_TESTS=OFF" TARGETS=ropeserve scripts/build \
 && install -s -D build/ropeserve /out/usr/local/bin/ropeserve \
 && build/ropeserve make-model --preset tiny --out /out/opt/ropeserve/demo-tiny \
 && build/ropeserve make-model --qa --out /out/opt/ropeserve/demo-qa \
 && build/ropeserve make-model --embedding --out /out/opt/ropeserve/demo-embed \
 && ldd build/ropeserve | awk '$2 == "=>" && $3 ~ /^\// {print $3}' \
      | while read -r lib; do dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null || true; done \
      | cut -d: -f1 | sort -u > /out/runtime-packages.txt \
 && test -s /out/runtime-packages.txt

FROM debian:bookworm-slim AS runtime
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
# libblas.so.3 is an alternatives link ldd cannot attribute: OpenBLAS is
# named explicitly (Debian's reference BLAS is 13-30x slower).
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(cat /tmp/runtime-packages.txt) libopenblas0-openmp curl \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --home-dir /home/ropeserve --create-home ropeserve \
 && mkdir -p /models /data \
 && chown 10001 /data
COPY --from=build /out/usr/local/bin/ropeserve /usr/local/bin/ropeserve
COPY --from=build /out/opt/ropeserve /opt/ropeserve
USER 10001
# Without a model the pre-generated demo models (random weights) are served:
# it sits where `serve` looks for it. No start period is needed for the
# health check: /health answers while the model still loads (/ready does not).
ENV ROPESERVE_HOST=0.0.0.0 \
    ROPESERVE_HTTP_PORT=8080 \
    ROPESERVE_GRPC_PORT=50051 \
    ROPESERVE_ADMIN_PORT=8081 \
    ROPESERVE_CACHE=/home/ropeserve/.cache/ropeserve \
    ROPESERVE_DATA_DIR=/data
RUN mkdir -p /home/ropeserve/.cache/ropeserve/models \
 && ln -s /opt/ropeserve/demo-tiny /home/ropeserve/.cache/ropeserve/models/demo-tiny \
 && ln -s /opt/ropeserve/demo-qa /home/ropeserve/.cache/ropeserve/models/demo-qa \
 && ln -s /opt/ropeserve/demo-embed /home/ropeserve/.cache/ropeserve/models/demo-embed
# /data: uploaded files and batches (batch.db, files/), kept across restarts.
VOLUME ["/models", "/data"]
EXPOSE 8080 8081 50051
# The admin port (probes and metrics on connections of their own) answers
# whatever the API port's load.
HEALTHCHECK --interval=15s --timeout=3s --retries=3 \
  CMD curl -fsS http://localhost:8081/health || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["ropeserve", "serve"]
