# syntax=docker/dockerfile:1
# ropeserve CPU image: a Debian bookworm build stage using the same scripts as
# the README, and a slim runtime stage with only the shared libraries needed.
#   docker build -t ropeserve .
#   docker run -p 8080:8080 ropeserve                        # demo model
#   docker run -p 8080:8080 -v /path/to/Qwen2.5-0.5B-Instruct:/models/main:ro \
#              -e ROPESERVE_MODEL=/models/main ropeserve
# NOTE: not yet built by the test suite (no Docker engine on the CI machines);
# the deploy issue adds that.

FROM debian:bookworm AS build
WORKDIR /src
# Dependencies first: this layer is reused until scripts/deps changes.
COPY scripts/deps scripts/deps
RUN scripts/deps && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/root/.cache/ropeserve/ccache \
    JOBS="$(nproc)" CMAKE_ARGS="-DROPESERVE_TESTS=OFF -DCMAKE_BUILD_TYPE=Release" scripts/build \
 && install -D build/ropeserve /out/usr/local/bin/ropeserve \
 && build/ropeserve make-model --preset tiny --out /out/opt/ropeserve/demo-tiny

FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libtorch1.13 libopenblas0-openmp libcpp-httplib0.11 libspdlog1.10 libfmt9 libxxhash0 curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /home/ropeserve --create-home ropeserve
COPY --from=build /out/ /
USER ropeserve
ENV ROPESERVE_HOST=0.0.0.0 ROPESERVE_HTTP_PORT=8080 ROPESERVE_CACHE=/home/ropeserve/.cache/ropeserve
# Without a mounted model the pre-generated demo model is served.
RUN mkdir -p /home/ropeserve/.cache/ropeserve/models \
 && ln -s /opt/ropeserve/demo-tiny /home/ropeserve/.cache/ropeserve/models/demo-tiny
EXPOSE 8080 50051
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s CMD curl -fsS http://localhost:8080/health || exit 1
ENTRYPOINT ["ropeserve", "serve"]
