#!/bin/sh
# `executor`: a Spark executor started by Spark on Kubernetes (the arguments and environment Spark's executor pods
# get, as the official Spark images handle them); anything else runs as given (default: the daemon).
set -eu
if [ "${1:-}" = "executor" ]; then
  shift
  SPARK_HOME="$(/opt/tableservice/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
  JAVA="$(readlink -f "$(command -v java)")"
  # shellcheck disable=SC2086
  exec "$JAVA" ${SPARK_EXECUTOR_JAVA_OPTS:-} -Xms"${SPARK_EXECUTOR_MEMORY}" -Xmx"${SPARK_EXECUTOR_MEMORY}" \
    -cp "${SPARK_HOME}/jars/*" org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "${SPARK_DRIVER_URL}" --executor-id "${SPARK_EXECUTOR_ID}" --cores "${SPARK_EXECUTOR_CORES}" \
    --app-id "${SPARK_APPLICATION_ID}" --hostname "${SPARK_EXECUTOR_POD_IP}" \
    --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" --podName "${SPARK_EXECUTOR_POD_NAME}" "$@"
fi
exec "$@"
