# One image for web, worker and inference. CPU torch by default; the GPU image for the inference service is
# the same file built with TORCH_INDEX_URL pointing at a CUDA wheel index (see docker-compose.yml). For the
# vLLM backend build with EXTRAS="[vllm]" TORCH_VERSION=2.14.0 (vLLM pins its torch; see docs/stack.md).
FROM python:3.11-slim-bookworm

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG EXTRAS=""

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    TRIAGE_VAR_DIR=/app/var \
    TRIAGE_MODELS_DIR=/app/models \
    PYTHONPATH=/app

RUN apt-get update \
 && apt-get install -y --no-install-recommends libpq5 curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 triage

WORKDIR /app
# torch first, from the index that matches the device: a looser spec pulls gigabytes of CUDA packages.
RUN pip install "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX_URL}"
COPY pyproject.toml README.md ./
COPY triage/__init__.py triage/__init__.py
COPY scheduler/__init__.py scheduler/__init__.py
COPY inference/__init__.py inference/__init__.py
# Dependencies in their own layer. The code itself runs from /app (PYTHONPATH), so that BASE_DIR-relative
# files (fixtures/, templates/, static/) are found whichever entry point (daphne, celery) starts.
RUN pip install ".${EXTRAS}"
COPY . .
# Static files collected (and compressed) into the image for WhiteNoise. Settings need a key to load; this
# throwaway one signs nothing and is not kept in the image.
RUN DJANGO_SECRET_KEY=collectstatic-at-build-time-only python manage.py collectstatic --noinput \
 && mkdir -p /app/var /app/models \
 && chown -R triage:triage /app/var /app/models

USER triage
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "config.asgi:application"]
