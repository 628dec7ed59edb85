#!/usr/bin/env bash
# Measure README "Quick start"'s set-up figures as a user meets them: a fresh Debian 12 root (debootstrap minbase
# plus ca-certificates and git), a clean clone of this repository, no pip cache, no wheel mirror, no pip.conf.
#   sudo scripts/measure-setup.sh demo         ./dev demo
#   sudo scripts/measure-setup.sh setup        ./dev setup (PyPI's torch pin: a CUDA build on Linux x86_64)
#   sudo scripts/measure-setup.sh setup-cpu    ./dev setup with TORCH_REQUIREMENT=<PyTorch's CPU index>
# Prints the whole time, apt's share (time, "Need to get", "After this operation"), pip's share (time, the sum of
# pip's "Downloading ... (N MB)" lines, the venv's size) and the rest (the demo). The log is kept in $MEASURE_OUT
# (default /tmp/measure-setup). Each run is bounded by MEASURE_LIMIT (default 1200 s).
# MEASURE_TORCH_WHEEL=/path/torch-...+cpu-....whl: setup-cpu installs that wheel (mounted read-only) instead of
# reaching download.pytorch.org; the rest still comes from PyPI.
# MEASURE_BASE: a debootstrapped root to copy (made once, kept, when missing); every run gets a fresh copy, removed
# at the end. A CA bundle the host needs to reach PyPI (a proxy's: $PIP_CERT) is mounted read-only for pip only.
set -euo pipefail

what=${1:?usage: $0 demo|setup|setup-cpu}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=${MEASURE_BASE:-/var/tmp/unirender-measure-base}
out=${MEASURE_OUT:-/tmp/measure-setup}
limit=${MEASURE_LIMIT:-1200}
mirror=${MEASURE_MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" -eq 0 ] || { echo "needs root (debootstrap, chroot)" >&2; exit 1; }
mkdir -p "$out"

if [ ! -x "$base/bin/bash" ]; then
    command -v debootstrap >/dev/null || apt-get install -y -q --no-install-recommends debootstrap
    debootstrap --variant=minbase --include=ca-certificates,git bookworm "$base" "$mirror" >"$out/debootstrap.log" 2>&1
    printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s-security bookworm-security main\n' \
        "$mirror" "$mirror" "${mirror%/debian}/debian" > "$base/etc/apt/sources.list"
    rm -rf "$base/var/cache/apt/archives/"*.deb "$base/var/lib/apt/lists/"*
fi

root=$(mktemp -d /var/tmp/unirender-measure.XXXXXX)
cleanup() {
    for m in dev/pts dev/shm dev proc sys run/ca.crt run/wheel; do umount -l "$root/$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$root"
}
trap cleanup EXIT
cp -a "$base/." "$root/"
cp /etc/resolv.conf "$root/etc/resolv.conf"
for m in proc sys dev dev/pts dev/shm; do mkdir -p "$root/$m"; mount --bind "/$m" "$root/$m"; done
certenv=()
if [ -f "${PIP_CERT:-}" ]; then
    touch "$root/run/ca.crt" && mount --bind -o ro "$PIP_CERT" "$root/run/ca.crt"
    certenv=(PIP_CERT=/run/ca.crt)
fi
git clone -q "$repo" "$root/root/unirender"

cmd=(./dev demo)
torch=()
case "$what" in
    demo) ;;
    setup) cmd=(./dev setup) ;;
    setup-cpu)
        cmd=(./dev setup); torch=("TORCH_REQUIREMENT=torch --index-url https://download.pytorch.org/whl/cpu")
        if [ -n "${MEASURE_TORCH_WHEEL:-}" ]; then
            w=$(basename "$MEASURE_TORCH_WHEEL")
            mkdir -p "$root/run/wheel" && mount --bind -o ro "$(dirname "$MEASURE_TORCH_WHEEL")" "$root/run/wheel"
            torch=("TORCH_REQUIREMENT=/run/wheel/$w")
        fi ;;
    *) echo "unknown: $what" >&2; exit 2 ;;
esac

log="$out/$what.log"
# A clean environment: no PIP_FIND_LINKS, no pip.conf (PIP_CONFIG_FILE=/dev/null), an empty pip cache of its own.
start=${EPOCHREALTIME/./}
set +e
timeout "$limit" chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 TERM=dumb PIP_CONFIG_FILE=/dev/null PIP_CACHE_DIR=/root/.cache/pip "${certenv[@]}" \
    "${torch[@]}" bash -c 'cd /root/unirender && "$@"' _ "${cmd[@]}" 2>&1 \
    | while IFS= read -r line; do
        t=$(( (${EPOCHREALTIME/./} - start) / 100000 )); printf '%d.%d %s\n' $((t / 10)) $((t % 10)) "$line"
      done > "$log"
rc=${PIPESTATUS[0]}
set -e
end=$(awk '{t=$1} END {print t}' "$log")

# Phases from ./dev's own lines: apt from "step 1/2", pip from "creating venv", the rest after ".venv: N on disk".
at() { awk -v p="$1" 'index($0, p) {print $1; exit}' "$log"; }
t_apt=$(at '[dev] step 1/2'); t_pip=$(at '[dev] creating venv'); t_done=$(at 'on disk')
sum_mb() { grep -oE 'Downloading [^ ]+ \([0-9.]+ [kMG]B\)' "$log" | grep -v '\.metadata ' | sed -E 's/.*\(([0-9.]+) ([kMG])B\)/\1 \2/' \
    | awk '{m = $2 == "k" ? $1 / 1000 : $2 == "G" ? $1 * 1000 : $1; s += m} END {printf "%.0f MB in %d files", s, NR}'; }
{
    echo "== $what: ${cmd[*]} ${torch[*]}  ($(date -u +%F), $(nproc) cores, exit $rc$([ "$rc" = 124 ] && echo ": stopped at ${limit} s"))"
    echo "whole: ${end} s"
    echo "apt: $(awk -v a="${t_apt:-0}" -v b="${t_pip:-0}" 'BEGIN {printf "%.0f", b - a}') s;" \
        "$(grep -m1 -oE 'Need to get [^ ]+ [kMG]?B' "$log" || echo 'Need to get: ?');" \
        "$(grep -m1 -oE 'After this operation, [^ ]+ [kMG]?B' "$log" || echo '?')"
    echo "pip: $(awk -v a="${t_pip:-0}" -v b="${t_done:-$end}" 'BEGIN {printf "%.0f", b - a}') s;" \
        "downloads $(sum_mb);" \
        ".venv $(du -sh "$root/root/unirender/.venv" 2>/dev/null | cut -f1)"
    [ -n "$t_done" ] && [ "$what" = demo ] && echo "after set-up (the demo): $(awk -v a="$t_done" -v b="$end" 'BEGIN {printf "%.0f", b - a}') s"
    du -sm "$root/root/unirender/.venv/lib/python3"*/site-packages/{torch,nvidia,triton} 2>/dev/null || true
} | tee "$out/$what.summary"
exit "$rc"
