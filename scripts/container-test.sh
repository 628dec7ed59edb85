#!/usr/bin/env bash
# ./dev container-test: build the images (cached by content hash) and check them end to end with podman.
#   1. the service container: /healthz from the host within 20 s of `run`, the README's Client example from the
#      host, a read-only mounted "user build", a dataset job on the volume owned by the volume's user,
#      `unirender doctor` inside, no root process, a clean stop;
#   2. two containers as the two nodes of one Ray cluster (head .10, worker .11 on this test's own podman
#      network): a job with backend ray has a player in each, the worker is killed mid-job, the job finishes on
#      the head having redone at most one chunk.
# Traffic stays between this test's containers and 127.0.0.1. Everything it creates carries the label
# unirender.container-test=<run id> and is removed at the end, also on failure or Ctrl-C.
# Environment: PYTHON (a Python with unirender's client, default .venv/bin/python), UR_SUBNET_PREFIX (10.89.7).
set -euo pipefail
UR_ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/container-build.sh
source "$UR_ROOT/scripts/container-build.sh"

PYTHON=${PYTHON:-$UR_ROOT/.venv/bin/python}
PREFIX=${UR_SUBNET_PREFIX:-10.89.7}
RUN_ID=unirender-ct-$$
LABEL=(--label "unirender.container-test=$RUN_ID")
NET=$RUN_ID-net
VOLUME=$RUN_ID-data
TMP=$(mktemp -d /tmp/unirender-ct.XXXXXX)
export PYTHONPATH=$UR_ROOT/src${PYTHONPATH:+:$PYTHONPATH}
export RAY_USAGE_STATS_ENABLED=0
T0=$(date +%s.%N)

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
step() { printf '\n[container-test] %s (t=%ss)\n' "$*" "$(elapsed "$T0")"; }
fail() { printf '[container-test] FAILED: %s\n' "$*" >&2; exit 1; }

remove_everything() {
    local ids
    ids=$(podman ps -aq --filter "label=unirender.container-test=$RUN_ID" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -n "$ids" ] && podman rm -f -v -t 0 $ids >/dev/null 2>&1  # -v: the image's anonymous /data volume too
    podman network exists "$NET" 2>/dev/null && podman network rm -f "$NET" >/dev/null 2>&1
    podman volume exists "$VOLUME" 2>/dev/null && podman volume rm -f "$VOLUME" >/dev/null 2>&1
    rm -rf "$TMP"
    ur_podman_env_cleanup
    return 0
}
on_exit() {
    local rc=$?
    set +e  # clean up whatever state the run stopped in
    if [ "$rc" -ne 0 ]; then
        for c in service head worker; do
            podman container exists "$RUN_ID-$c" 2>/dev/null || continue
            echo "--- last lines of $RUN_ID-$c's log:" >&2
            podman logs --tail 30 "$RUN_ID-$c" >&2 2>&1 || true
        done
        [ -f "$TMP/driver.log" ] && { echo "--- Ray driver:" >&2; tail -40 "$TMP/driver.log" >&2; }
        [ -f "$TMP/build.log" ] && { echo "--- podman build:" >&2; tail -30 "$TMP/build.log" >&2; }
    fi
    [ -n "${DRIVER_PID:-}" ] && kill "$DRIVER_PID" 2>/dev/null
    remove_everything
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

[ -x "$PYTHON" ] || fail "no Python at $PYTHON (run ./dev setup, or set PYTHON)"
ur_ensure_tools || fail "podman, runc, debootstrap and curl are needed, as root"

step "images"
t=$(date +%s.%N)
UR_BUILD_LOG=$TMP/build.log ur_build_images
echo "service image $UR_IMAGE, Ray node image $UR_RAY_IMAGE ($(elapsed "$t") s)"
VOLUMES_BEFORE=$(podman volume ls -q | sort)
podman network create --subnet "$PREFIX.0/24" "${LABEL[@]}" "$NET" >/dev/null \
    || fail "cannot create network $NET on $PREFIX.0/24 (another run's network? podman network ls)"
podman volume create "${LABEL[@]}" "$VOLUME" >/dev/null

# --- 1. the service -------------------------------------------------------------------------------------------
step "service container"
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# A read-only root with the writable places of deploy/kubernetes/service.yaml (/tmp, XDG_RUNTIME_DIR, HOME, /data).
# A "user's Unity build": a folder named like a CloudRendering build whose executable is the reference player
# (docs/player.md), mounted read-only and listed in the service's allowed_executables.
BUILD_NAME=thor-CloudRendering-ctest
mkdir -p "$TMP/builds/$BUILD_NAME"
printf '#!/bin/sh\nexec /opt/unirender/bin/unirender-player "$@"\n' > "$TMP/builds/$BUILD_NAME/$BUILD_NAME"
chmod 0755 "$TMP/builds/$BUILD_NAME/$BUILD_NAME"
BUILD=/builds/$BUILD_NAME/$BUILD_NAME
cat > "$TMP/service.yaml" <<EOF
host: 0.0.0.0
port: 8200
data_root: /data
allowed_executables: [builtin, $BUILD]
EOF
chmod 0644 "$TMP/service.yaml"
t=$(date +%s.%N)
podman run -d --name "$RUN_ID-service" "${LABEL[@]}" --network "$NET" --ip "$PREFIX.20" \
    -p "127.0.0.1:$PORT:8200" --cap-drop all --security-opt no-new-privileges \
    --read-only --read-only-tmpfs=false --tmpfs /tmp:rw,mode=1777 --tmpfs /run/unirender:rw,mode=0700,U \
    --tmpfs /home/unirender:rw,U \
    -e "UNIRENDER_TOKENS=ctest=$TOKEN" -v "$VOLUME:/data" -v "$TMP/builds:/builds:ro" \
    -v "$TMP/service.yaml:/etc/unirender/service.yaml:ro" "$UR_IMAGE" >/dev/null 2>"$TMP/run.err" \
    || { cat "$TMP/run.err" >&2; fail "podman run"; }
until curl -sf -o /dev/null "http://127.0.0.1:$PORT/healthz"; do
    awk -v e="$(elapsed "$t")" 'BEGIN { exit !(e > 20) }' && fail "no /healthz from the host within 20 s"
    podman container exists "$RUN_ID-service" && [ "$(podman inspect -f '{{.State.Running}}' "$RUN_ID-service")" = true ] \
        || fail "the service container exited"
    sleep 0.1
done
echo "  ok: /healthz from the host $(elapsed "$t") s after podman run (limit 20 s)"
timeout 60 podman healthcheck run "$RUN_ID-service" >/dev/null 2>&1 || fail "the image's HEALTHCHECK fails"
echo "  ok: the image's HEALTHCHECK passes"
timeout 120 podman exec "$RUN_ID-service" unirender doctor > "$TMP/doctor.txt" 2>&1 \
    || { cat "$TMP/doctor.txt"; fail "unirender doctor inside the container"; }
echo "  ok: unirender doctor inside the container exits 0; it sees:"
grep -E '^(│|\|) (vulkan|egl|x11) ' "$TMP/doctor.txt" | sed 's/^/      /' || true
grep -E '^auto choice' "$TMP/doctor.txt" | sed 's/^/      /' || true

VOLUME_DIR=$(podman volume inspect -f '{{.Mountpoint}}' "$VOLUME")
UNIRENDER_TOKEN=$TOKEN timeout 600 "$PYTHON" "$UR_ROOT/scripts/container-checks.py" service "http://127.0.0.1:$PORT" \
    "$RUN_ID-service" "$VOLUME_DIR" ctest "$BUILD"

podman stop -t 30 "$RUN_ID-service" >/dev/null 2>>"$TMP/run.err"
code=$(podman inspect -f '{{.State.ExitCode}}' "$RUN_ID-service")
[ "$code" = 0 ] || fail "the service exited $code on SIGTERM"
podman logs "$RUN_ID-service" 2>&1 | grep -q "unirender service stopped" || fail "no clean stop in the log"
podman rm -v "$RUN_ID-service" >/dev/null 2>>"$TMP/run.err"
echo "  ok: SIGTERM: the service stopped cleanly (exit 0), container removed"

# --- 2. two Ray nodes ------------------------------------------------------------------------------------------
step "Ray cluster: head $PREFIX.10, worker $PREFIX.11"
RAY_NODE=(--network "$NET" --shm-size 256m --cap-drop all --security-opt no-new-privileges
          -e RAY_AUTH_MODE=disabled -e RAY_USAGE_STATS_ENABLED=0)
NODE_ARGS=(--num-cpus=1 '--resources={"player_slot": 1}' --object-store-memory=100000000)
podman run -d --name "$RUN_ID-head" "${LABEL[@]}" "${RAY_NODE[@]}" --ip "$PREFIX.10" \
    -v "$UR_ROOT/scripts/container-ray-driver.py:/opt/container-test/driver.py:ro" "$UR_RAY_IMAGE" \
    --head --port=6379 --node-ip-address="$PREFIX.10" --include-dashboard=false "${NODE_ARGS[@]}" \
    >/dev/null 2>"$TMP/run-head.err" || { cat "$TMP/run-head.err" >&2; fail "podman run (head)"; }
podman run -d --name "$RUN_ID-worker" "${LABEL[@]}" "${RAY_NODE[@]}" --ip "$PREFIX.11" "$UR_RAY_IMAGE" \
    --address="$PREFIX.10:6379" --node-ip-address="$PREFIX.11" "${NODE_ARGS[@]}" \
    >/dev/null 2>"$TMP/run-worker.err" || { cat "$TMP/run-worker.err" >&2; fail "podman run (worker)"; }
t=$(date +%s.%N)
podman exec "$RUN_ID-head" timeout 120 python3 -c '
import sys, time, ray
deadline = time.monotonic() + 100
while True:  # the head may still be starting
    try:
        ray.init(address=sys.argv[1], log_to_driver=False)
        break
    except ConnectionError:
        if time.monotonic() > deadline:
            raise
        time.sleep(1)
while sum(n["Alive"] for n in ray.nodes()) < 2:
    if time.monotonic() > deadline:
        raise SystemExit("fewer than 2 Ray nodes alive after 100 s")
    time.sleep(0.5)
' "$PREFIX.10:6379" 2>"$TMP/cluster.err" || { cat "$TMP/cluster.err" >&2; fail "the two Ray nodes did not form a cluster"; }
echo "  ok: a 2-node Ray cluster $(elapsed "$t") s after the worker's podman run"

COUNT=${UR_RAY_JOB_FRAMES:-1000}
SHARD=10
timeout 600 podman exec "$RUN_ID-head" python3 /opt/container-test/driver.py "$PREFIX.10:6379" /tmp/ray-job \
    --count "$COUNT" --frames-per-shard "$SHARD" > "$TMP/driver.log" 2>&1 &
DRIVER_PID=$!
t=$(date +%s.%N)
# The players' process trees: one in each container, before the worker is killed.
while :; do
    kill -0 "$DRIVER_PID" 2>/dev/null \
        || fail "the Ray job ended before a player ran in both containers (a faster machine? UR_RAY_JOB_FRAMES=$((COUNT * 4)))"
    awk -v e="$(elapsed "$t")" 'BEGIN { exit !(e > 150) }' && fail "no player in both containers within 150 s"
    if "$PYTHON" "$UR_ROOT/scripts/container-checks.py" processes "$RUN_ID-head" --expect-player \
            > "$TMP/head.ps" 2>&1 \
       && "$PYTHON" "$UR_ROOT/scripts/container-checks.py" processes "$RUN_ID-worker" --expect-player \
            > "$TMP/worker.ps" 2>&1; then
        commits=$(timeout 60 podman exec "$RUN_ID-head" sh -c 'cat /tmp/ray-job/.unirender-job/commits.log 2>/dev/null | wc -l')
        [ "${commits:-0}" -ge 1 ] && break
    fi
    sleep 0.5
done
grep -h 'ok:' "$TMP/head.ps" "$TMP/worker.ps"
step "killing the worker container mid-job ($commits chunks committed)"
podman kill "$RUN_ID-worker" >/dev/null
wait "$DRIVER_PID" || { DRIVER_PID=; fail "the Ray job failed after the worker was killed"; }
DRIVER_PID=
tail -1 "$TMP/driver.log" > "$TMP/result.json"
"$PYTHON" - "$TMP/result.json" "$PREFIX" "$COUNT" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
prefix, count = sys.argv[2], int(sys.argv[3])
def check(ok, msg):
    if not ok:
        raise SystemExit(f"FAILED: {msg}: {r}")
    print(f"  ok: {msg}")
check(r["frames"] == r["frames_in_dataset"] == count, f"the job finished with all {count} frames in the dataset")
ips = sorted({p["node_ip"] for p in r["players"]})
check(ips == [f"{prefix}.10", f"{prefix}.11"], f"its players were placed on both nodes {ips}")
redone = r["frames_rendered"] - r["frames"]
check(0 <= redone <= r["frames_per_shard"], f"{redone} frames redone after the kill (at most one chunk: {r['frames_per_shard']})")
check(r["sessions_left"] == 0, "no session left on the backend")
EOF
alive=$(timeout 120 podman exec "$RUN_ID-head" python3 -c '
import ray; ray.init(address="auto", log_to_driver=False); print(sum(n["Alive"] for n in ray.nodes()))' 2>/dev/null)
[ "$alive" = 1 ] || fail "$alive Ray nodes alive after the kill (expected the head alone)"
echo "  ok: the job finished on the head alone"

# --- nothing left behind ---------------------------------------------------------------------------------------
step "teardown"
podman stop -t 20 "$RUN_ID-head" >/dev/null 2>&1
podman rm -f -v -t 0 "$RUN_ID-head" "$RUN_ID-worker" >/dev/null 2>&1
podman network rm "$NET" >/dev/null
podman volume rm "$VOLUME" >/dev/null
rm -rf "$TMP"
left="$(podman ps -aq --filter "label=unirender.container-test=$RUN_ID")$(podman volume ls -q --filter "label=unirender.container-test=$RUN_ID")"
volumes_after=$(podman volume ls -q | sort)
extra=$(comm -13 <(echo "$VOLUMES_BEFORE") <(echo "$volumes_after"))
[ -z "$extra" ] || left="$left volumes: $extra"
podman network exists "$NET" && left="$left network $NET"
[ -e "$TMP" ] && left="$left $TMP"
[ -z "$left" ] || fail "left behind: $left"
echo "  ok: no container, network, volume or temp dir left"
step "passed"
