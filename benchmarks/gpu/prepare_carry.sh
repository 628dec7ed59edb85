#!/usr/bin/env bash
# Make what the GPU machine cannot download (it reaches no package index), here, before its one run:
#   .gl/   Debian's GL/Vulkan loader packages (libglvnd's EGL/GL, the Vulkan loader), unpacked there into /
#   .whl/  the wheels for its Python 3.12 that its image lacks (unirender's core, player, gym and ML-Agents needs)
# Both folders are git-ignored (.git/info/exclude) and carried by the device call:
#   run(command="bash benchmarks/gpu/run_device.sh", carry=[".gl", ".whl"], timeout_s=560)
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gl/' .git/info/exclude 2>/dev/null || echo /.gl/ >> .git/info/exclude
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
mkdir -p .gl .whl /tmp/amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
# shellcheck disable=SC2086
apt-get $o update -qq
# shellcheck disable=SC2086
(cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
# Versions as this project's venv has them (pyproject.toml's ranges); those the device image already has are left out.
WHEELS="msgspec==0.23.0 zstandard==0.25.0 pycocotools==2.0.11 waitress==3.0.2 pydantic==2.14.4 annotated-types==0.8.0
typing-inspection==0.4.5 python-xlib==0.33 moderngl==5.13.0 glcontext==3.1.0 wgpu==0.32.0 cffi==2.1.1 pycparser==3.12
rendercanvas==2.7.2 trimesh==5.2.0 gymnasium==1.4.0 farama-notifications==0.0.6 pyspng==0.1.4"
core=$(.venv/bin/pip show pydantic-core 2>/dev/null | sed -n 's/^Version: //p')
for w in $WHEELS "pydantic-core==${core:-2.41.5}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        --platform any -d .whl "$w"
done
du -sh .gl .whl
