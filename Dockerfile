# The image the Helm chart runs: the `kohort` command (webhook, controller, certs, dashboard)
# and nothing else. Non-root, and fine with a read-only root filesystem: bytecode is compiled at
# build time and nothing is written at run time except to /tmp (an emptyDir in the chart).
#
#   docker build -t kohort:0.1.0 .
#
# The same image as `make image` (hack/build-image.sh, which needs no Docker): Debian bookworm
# with Debian's python3.11, kohort's wheel and constraints.txt's pins installed into /opt/kohort
# by the same script (hack/image-rootfs.sh), the same user, entrypoint and environment. That
# build starts from Debian's packages (mmdebstrap) where this one starts from debian:bookworm-slim.

FROM python:3.11-slim-bookworm AS wheels
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml constraints.txt README.md ./
COPY kohort/ kohort/
COPY controller/ controller/
COPY webhook/ webhook/
COPY certs/ certs/
COPY dashboard/ dashboard/
# A wheel, not an editable install: the image gets no source tree, no tests and no dev tooling
# (hack/: `kohort dev` answers that it runs from a source checkout). The pip wheel only runs the
# install; the image carries no pip.
RUN pip wheel --quiet --constraint constraints.txt --wheel-dir /wheels . \
 && pip download --quiet --no-deps --only-binary=:all: --dest /pip "pip==$(pip --version | cut -d' ' -f2)"

FROM debian:bookworm-slim
RUN --mount=type=bind,from=wheels,source=/wheels,target=/tmp/wheels \
    --mount=type=bind,from=wheels,source=/pip,target=/tmp/pip \
    --mount=type=bind,source=hack/image-rootfs.sh,target=/tmp/image-rootfs.sh \
    apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3.11 \
 && rm -rf /var/lib/apt/lists/* \
 && sh /tmp/image-rootfs.sh /tmp/wheels /tmp/pip/pip-*.whl
ENV PATH=/opt/kohort/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /tmp
EXPOSE 9443 8443 8080 8081
ENTRYPOINT ["kohort"]
CMD ["--help"]
