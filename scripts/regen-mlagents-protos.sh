#!/usr/bin/env bash
# Regenerate src/unirender/protocol/mlagents/communicator_objects_pb2.py(i) from communicator_objects.proto.
#
# grpcio-tools 1.71 bundles protoc 29 (gencode 5.29): the generated module then runs on every protobuf runtime
# from 5.29 up (a runtime may be newer than the gencode, never older), which is the range pyproject.toml allows.
# The tools go into a throw-away directory, so the project's environment keeps its own protobuf.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
TOOLS="$(mktemp -d)"
trap 'rm -rf "$TOOLS"' EXIT
"$PYTHON" -m pip install -q --target "$TOOLS" 'grpcio-tools==1.71.*'
PYTHONPATH="$TOOLS" "$PYTHON" -m grpc_tools.protoc -I src --python_out=src --pyi_out=src \
    src/unirender/protocol/mlagents/communicator_objects.proto
echo "regenerated src/unirender/protocol/mlagents/communicator_objects_pb2.py"
