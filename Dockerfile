# The tableservice daemon (and, with the argument `executor`, a Spark executor for Spark on Kubernetes).
#
# Build (no network needed inside the build): first a wheelhouse with tableservice and everything it needs,
#   docker/wheelhouse.sh            # -> wheelhouse/ (pip wheel . [spark,service] + dependencies)
#   podman build --build-arg BASE_IMAGE=debian:bookworm-slim -t tableservice .
# Run hardened:
#   podman run --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges \
#     -v ./config.yaml:/etc/tableservice/config.yaml:ro tableservice
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}

ARG VERSION=dev
LABEL org.opencontainers.image.title="tableservice" \
      org.opencontainers.image.description="Table services daemon for Apache Hudi tables (compaction, clustering, clean, archival, indexing)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/tableservice/tableservice"

# Debian's packages of the base image's suite: versions follow the suite (pinning them would break on every
# point release of the suite).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv openjdk-17-jre-headless tini ca-certificates procps \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 tableservice \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin tableservice

# Everything from the wheelhouse: nothing is fetched at build or run time.
COPY wheelhouse /opt/wheelhouse
RUN python3 -m venv /opt/tableservice \
 && /opt/tableservice/bin/pip install --no-cache-dir --no-index --find-links /opt/wheelhouse "tableservice[spark,service]" \
 && rm -rf /opt/wheelhouse

COPY docker/entrypoint.sh /usr/local/bin/tableservice-entrypoint

# Read-only root filesystem: only /tmp (an emptyDir or tmpfs) is written, Spark's local dirs included.
ENV PATH=/opt/tableservice/bin:${PATH} \
    HOME=/tmp \
    PYSPARK_PYTHON=/opt/tableservice/bin/python \
    SPARK_LOCAL_DIRS=/tmp/spark \
    PYTHONDONTWRITEBYTECODE=1

USER 10001:10001
EXPOSE 9464
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/tableservice-entrypoint"]
CMD ["tableservice", "run", "--config", "/etc/tableservice/config.yaml"]
