#!/usr/bin/env bash
# The one prepared run on a GPU machine (issue 38; docs/platforms.md "On an NVIDIA GPU").
#
# On the device machine, from the repository root, with the carried loaders and wheels (see prepare_carry.sh):
#   bash benchmarks/gpu/run_device.sh            # writes $OUT/gpu.json, nvidia-smi.txt, log.txt and PNG frames
# Dry run on a CPU machine (llvmpipe, short measurements):
#   PYTHON=.venv/bin/python OUT=/tmp/gpu-dry bash benchmarks/gpu/run_device.sh --allow-software --quick
#
# The device machine reaches no package index: .gl/ holds Debian's GL/Vulkan loader packages (unpacked into /),
# .whl/ the wheels its Python 3.12 lacks (installed into /tmp/site). Both are made here by prepare_carry.sh.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$(mktemp -d /tmp/unirender-gpu-XXXXXX)}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "[device] $(date -u) on $(hostname), $(nproc) cores; output in $OUT"

if compgen -G ".gl/*.deb" >/dev/null; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "[device] wheel install failed"; exit 1; }
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# The NVIDIA driver's ICD and EGL vendor files live under the driver's mount on these machines; elsewhere the
# loaders find them in /usr/share. Only set when the files are there.
nv=/usr/local/nvidia/share
[ -f "$nv/vulkan/icd.d/nvidia_icd.json" ] && [ -z "${VK_DRIVER_FILES:-}" ] && export VK_DRIVER_FILES="$nv/vulkan/icd.d/nvidia_icd.json"
[ -f "$nv/glvnd/egl_vendor.d/10_nvidia.json" ] && [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] \
    && export __EGL_VENDOR_LIBRARY_FILENAMES="$nv/glvnd/egl_vendor.d/10_nvidia.json"
export RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d /tmp/unirender-xdg-XXXXXX)}
chmod 700 "$XDG_RUNTIME_DIR"
export UNIRENDER_LOG_DIR=${UNIRENDER_LOG_DIR:-$(mktemp -d /tmp/unirender-logs-XXXXXX)}

PY=${PYTHON:-python3}
"$PY" -c 'import unirender, sys; print("[device] unirender from", unirender.__file__, "python", sys.version.split()[0])'
timeout 540 "$PY" benchmarks/gpu/device_checks.py --out "$OUT" "$@"
rc=$?
echo "[device] checks exited $rc"
exit $rc
