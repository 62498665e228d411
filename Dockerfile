# One image for every component: the chart runs `python -m webhook`, `python -m reconciler`
# and `python -m certs ensure` from it. Build (docs/operator/install.md "The image"):
#   docker build -t <registry>/gpu-reservation:0.1.0 .
# For a reproducible build pin the base by digest as well:
#   docker build --build-arg PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:<digest> .
# Linted by hadolint in `make lint`; tests/unit/test_image.py checks it against the chart
# (entry points, user, ports, read-only root file system).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

# --- build: a virtual environment with the product and its pinned runtime dependencies --
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/gpu-reservation
# The lock is a constraints file: only the runtime dependencies are installed, at the
# versions CI tested (the dev tools in it are not pulled in).
COPY pyproject.toml requirements.lock ./
COPY shared ./shared
COPY webhook ./webhook
COPY reconciler ./reconciler
COPY certs ./certs
RUN /opt/gpu-reservation/bin/pip install --no-cache-dir --constraint requirements.lock . \
    && /opt/gpu-reservation/bin/python -m compileall -q /opt/gpu-reservation

# --- runtime: the environment, no compilers, no source tree, a non-root user ------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpu-reservation" \
      org.opencontainers.image.description="Admission webhook, reconciler and certificate tool for calendar-based GPU reservations"
COPY --from=build /opt/gpu-reservation /opt/gpu-reservation
# Bytecode was compiled at build time; nothing writes next to the code, so the root file
# system can be read-only (the chart mounts an emptyDir at /tmp for the rest).
ENV PATH=/opt/gpu-reservation/bin:${PATH} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
WORKDIR /tmp
# The chart's securityContext.runAsUser/runAsGroup (values.yaml): the distroless
# "nonroot" id, no home, no shell login.
USER 65532:65532
# webhook TLS, webhook health/metrics, reconciler HTTP (values.yaml defaults).
EXPOSE 8443 8080 8000
CMD ["python", "-m", "reconciler"]
