# The image the Helm chart runs: the `kohort` command (webhook, controller, certs, dashboard)
# and nothing else. Non-root, and fine with a read-only root filesystem: bytecode is compiled at
# build time and nothing is written at run time except to /tmp (an emptyDir in the chart).
#
#   docker build -t kohort:0.1.0 .
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/kohort
COPY pyproject.toml constraints.txt README.md ./
COPY kohort/ kohort/
COPY controller/ controller/
COPY webhook/ webhook/
COPY certs/ certs/
COPY dashboard/ dashboard/
# A wheel, not an editable install: the runtime stage gets no source tree, no tests and no dev
# tooling (hack/: `kohort dev` answers that it runs from a source checkout).
RUN /opt/kohort/bin/pip install --constraint constraints.txt . \
 && /opt/kohort/bin/python -m compileall -q /opt/kohort \
 && /opt/kohort/bin/kohort --help >/dev/null

FROM python:${PYTHON_VERSION}-slim-bookworm
COPY --from=build /opt/kohort /opt/kohort
ENV PATH=/opt/kohort/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532 is the conventional "nonroot" user id; the chart's securityContext uses the same.
USER 65532:65532
WORKDIR /tmp
EXPOSE 9443 8443 8080 8081
ENTRYPOINT ["kohort"]
CMD ["--help"]
