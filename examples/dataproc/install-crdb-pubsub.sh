#!/usr/bin/env bash
# Dataproc initialization action: installs crdb-pubsub, with its `apply` extra (deltalake) and its
# dependencies, into the cluster's Python on every node. The wheel's address comes from the
# cluster's metadata key crdb-pubsub-wheel (examples/dataproc/README.md, step 3a).
#
# The package must be installed on the nodes: on --py-files alone the streaming source's
# driver-side Python process can't import it (tests/test_dataproc.py's cluster_python says why).
set -euxo pipefail

WHEEL_URL="$(/usr/share/google/get_metadata_value attributes/crdb-pubsub-wheel)"
PYTHON="${CRDB_PUBSUB_PYTHON:-/opt/conda/default/bin/python}"
WORK="$(mktemp -d)"
gcloud storage cp "${WHEEL_URL}" "${WORK}/"
"${PYTHON}" -m pip install --no-cache-dir "$(ls "${WORK}"/crdb_pubsub-*.whl)[apply]"
rm -rf "${WORK}"
