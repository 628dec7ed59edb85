#!/usr/bin/env bash
# ./dev container-test: build the images (cached by content hash) and check them end to end with podman.
#   1. the service container: /healthz from the host within 20 s of `run`, the README's Client example from the
#      host, a read-only mounted "user build", a dataset job on the volume owned by the volume's user,
#      `unirender doctor` inside, no root process, a clean stop;
#   2. two containers as the two nodes of one Ray cluster (head .10, worker .11 on this test's own podman
#      network): a job with backend ray has a player in each, the worker is killed mid-job, the job finishes on
#      the head having redone at most one chunk;
#   3. builds reach the nodes (docs/cluster.md): a fake Unity build (tests/fixtures/unity_builds.py) only in the
#      head's store, sessions on it place a player in the worker container, which fetches the build from the
#      head's store first; the worker is restarted with its store's volume kept, and the next sessions fetch
#      nothing;
#   4. builds from a service (`build_source=`, docs/builds.md): a second service container (.21) holds another
#      fake build, uploaded to it from the host, in its own store's volume; the Ray backend given its URL places a
#      player in each node container, neither of whose stores holds the build: each node fetches it from the
#      service over this test's network (the driver's store serves nothing), the worker's store then holds it
#      intact, and a wrong or missing token fails the session with BuildFetchError naming the build and the service.
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
# The Ray nodes' build stores, named volumes (the PVC / ephemeral volume of deploy/kubernetes/raycluster.yaml): the
# worker's outlives its container, which part 3 restarts.
HEAD_STORE=$RUN_ID-head-builds
WORKER_STORE=$RUN_ID-worker-builds
# Part 4's service's build store: a volume of its own, not the nodes' (the build must reach them over the network).
SERVICE_STORE=$RUN_ID-service-builds
STORE_DIR=/var/lib/unirender/builds
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
    for v in "$VOLUME" "$HEAD_STORE" "$WORKER_STORE" "$SERVICE_STORE"; do
        podman volume exists "$v" 2>/dev/null && podman volume rm -f "$v" >/dev/null 2>&1
    done
    rm -rf "$TMP"
    ur_podman_env_cleanup
    return 0
}
on_exit() {
    local rc=$?
    set +e  # clean up whatever state the run stopped in
    if [ "$rc" -ne 0 ]; then
        for c in service head worker build-service; do
            podman container exists "$RUN_ID-$c" 2>/dev/null || continue
            echo "--- last lines of $RUN_ID-$c's log:" >&2
            podman logs --tail 30 "$RUN_ID-$c" >&2 2>&1 || true
        done
        for f in driver fetch-1 fetch-2 fetch-service; do
            [ -f "$TMP/$f.log" ] && { echo "--- Ray driver ($f):" >&2; tail -40 "$TMP/$f.log" >&2; }
        done
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
for v in "$VOLUME" "$HEAD_STORE" "$WORKER_STORE" "$SERVICE_STORE"; do podman volume create "${LABEL[@]}" "$v" >/dev/null; done

# --- 1. the service -------------------------------------------------------------------------------------------
step "service container"
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# A read-only root with the writable places of deploy/kubernetes/service.yaml (/tmp, XDG_RUNTIME_DIR, HOME, /data).
SERVICE_RUN=(--cap-drop all --security-opt no-new-privileges --read-only --read-only-tmpfs=false
             --tmpfs /tmp:rw,mode=1777 --tmpfs /run/unirender:rw,mode=0700,U --tmpfs /home/unirender:rw,U)
wait_for_healthz() {  # CONTAINER PORT: until the service answers /healthz from the host (20 s), or it exited
    local t
    t=$(date +%s.%N)
    until curl -sf -o /dev/null "http://127.0.0.1:$2/healthz"; do
        awk -v e="$(elapsed "$t")" 'BEGIN { exit !(e > 20) }' && fail "no /healthz from $1 within 20 s"
        podman container exists "$1" && [ "$(podman inspect -f '{{.State.Running}}' "$1")" = true ] \
            || fail "the service container $1 exited"
        sleep 0.1
    done
}
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
    -p "127.0.0.1:$PORT:8200" "${SERVICE_RUN[@]}" -e "UNIRENDER_TOKENS=ctest=$TOKEN" -v "$VOLUME:/data" -v "$TMP/builds:/builds:ro" \
    -v "$TMP/service.yaml:/etc/unirender/service.yaml:ro" "$UR_IMAGE" >/dev/null 2>"$TMP/run.err" \
    || { cat "$TMP/run.err" >&2; fail "podman run"; }
wait_for_healthz "$RUN_ID-service" "$PORT"
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
# Each node's build store on its own volume, bounded below it as deploy/kubernetes/raycluster.yaml does (1 GiB:
# the fake build is 16 MiB). The head's store is the driver's (the driver runs there): part 3's build is added to
# it alone, from a folder mounted read-only.
RAY_NODE=(--network "$NET" --shm-size 256m --cap-drop all --security-opt no-new-privileges
          -e RAY_AUTH_MODE=disabled -e RAY_USAGE_STATS_ENABLED=0 -e UNIRENDER_BUILDS_MAX_BYTES=1G)
NODE_ARGS=(--num-cpus=1 '--resources={"player_slot": 1}' --object-store-memory=100000000)
mkdir -m 0755 "$TMP/build-src"
podman run -d --name "$RUN_ID-head" "${LABEL[@]}" "${RAY_NODE[@]}" --ip "$PREFIX.10" \
    -v "$HEAD_STORE:$STORE_DIR" -v "$TMP/build-src:/opt/container-test/build-src:ro" \
    -v "$UR_ROOT/scripts/container-ray-driver.py:/opt/container-test/driver.py:ro" "$UR_RAY_IMAGE" \
    --head --port=6379 --node-ip-address="$PREFIX.10" --include-dashboard=false "${NODE_ARGS[@]}" \
    >/dev/null 2>"$TMP/run-head.err" || { cat "$TMP/run-head.err" >&2; fail "podman run (head)"; }
start_worker() {
    podman run -d --name "$RUN_ID-worker" "${LABEL[@]}" "${RAY_NODE[@]}" --ip "$PREFIX.11" \
        -v "$WORKER_STORE:$STORE_DIR" "$UR_RAY_IMAGE" \
        --address="$PREFIX.10:6379" --node-ip-address="$PREFIX.11" "${NODE_ARGS[@]}" \
        >/dev/null 2>"$TMP/run-worker.err" || { cat "$TMP/run-worker.err" >&2; fail "podman run (worker)"; }
}
# Until 2 nodes are alive and the node id given (a worker that was stopped), if any, is not among them.
wait_for_cluster() {
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
gone = sys.argv[2] if len(sys.argv) > 2 else None
while True:
    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    if len(alive) >= 2 and gone not in alive:
        break
    if time.monotonic() > deadline:
        raise SystemExit(f"no 2 Ray nodes alive (without {gone}) after 100 s: {ray.nodes()}")
    time.sleep(0.5)
' "$PREFIX.10:6379" "$@" 2>"$TMP/cluster.err" || { cat "$TMP/cluster.err" >&2; fail "the two Ray nodes did not form a cluster"; }
}
start_worker
t=$(date +%s.%N)
wait_for_cluster
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
# The GCS marks a killed node dead after its missed health checks (seconds, more on a loaded machine): wait for
# that state, bounded, rather than reading it once.
alive=$(timeout 180 podman exec "$RUN_ID-head" python3 -c '
import time, ray
ray.init(address="auto", log_to_driver=False)
deadline = time.monotonic() + 150
while (alive := sum(n["Alive"] for n in ray.nodes())) != 1 and time.monotonic() < deadline:
    time.sleep(1)
print(alive)' 2>/dev/null)
[ "$alive" = 1 ] || fail "$alive Ray nodes alive 150 s after the kill (expected the head alone)"
echo "  ok: the job finished on the head alone"

# --- 3. a build that only the head's store holds -----------------------------------------------------------------
step "builds: the worker fetches from the head's store, and keeps it across a restart"
# Part 2 killed the worker; a new container on its (still empty) store volume takes its place.
podman rm -f -v -t 0 "$RUN_ID-worker" >/dev/null 2>&1
start_worker
wait_for_cluster
# A fake Unity build as Unity lays it out (tests/fixtures/unity_builds.py), 4 assets of 4 MiB; its executable
# execs the image's reference player (the fixture's names a host Python, which the containers do not have).
exe=$("$PYTHON" - "$TMP/build-src" "$UR_ROOT/tests" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from fixtures.unity_builds import executable_of, make_build
root = make_build(Path(sys.argv[1]), family="ai2thor", player="reference", platform="CloudRendering",
                  assets=4, asset_size=4 << 20)
exe = executable_of(root)
exe.write_text('#!/bin/sh\nexec /opt/unirender/bin/unirender-player "$@"\n')
print(root.name)
EOF
) || fail "making the fake Unity build"
timeout 120 podman exec "$RUN_ID-head" unirender builds add "/opt/container-test/build-src/$exe" --name ctest:v1 \
    > "$TMP/add.log" 2>&1 || { cat "$TMP/add.log" >&2; fail "unirender builds add in the head container"; }
store_digests() {  # the digests a container's store holds, each re-hashed (verify), as JSON
    timeout 60 podman exec "$1" python3 -c '
import json; from unirender.builds import BuildStore
s = BuildStore(); print(json.dumps({"root": str(s.root), "digests": s.digests(), "bad": {d: s.verify(d) for d in s.digests()}}))'
}
store_digests "$RUN_ID-head" > "$TMP/head-store.json" || fail "reading the head's store"
store_digests "$RUN_ID-worker" > "$TMP/worker-store-0.json" || fail "reading the worker's store"
"$PYTHON" - "$TMP/head-store.json" "$TMP/worker-store-0.json" "$STORE_DIR" <<'EOF'
import json, sys
head, worker = (json.load(open(f)) for f in sys.argv[1:3])
if not (head["root"] == worker["root"] == sys.argv[3] and len(head["digests"]) == 1 and worker["digests"] == []):
    raise SystemExit(f"FAILED: expected the build in the head's store alone, at {sys.argv[3]}: {head} {worker}")
print(f"  ok: {head['digests'][0][:19]}... (ctest:v1) is in the head's store {head['root']} only")
EOF
# Each run: one session per node (one player_slot each), so one player in the worker container.
check_fetch() {  # RUN_LOG WORKER_STORE_JSON EXPECT(fetch|none)
    "$PYTHON" - "$1" "$2" "$3" "$PREFIX" <<'EOF'
import json, sys
r, store = json.loads(open(sys.argv[1]).read().splitlines()[-1]), json.load(open(sys.argv[2]))
expect, prefix = sys.argv[3], sys.argv[4]
def check(ok, msg):
    if not ok:
        raise SystemExit(f"FAILED: {msg}: {r}")
    print(f"  ok: {msg}")
by_ip = {s["node_ip"]: s for s in r["sessions"]}
check(sorted(by_ip) == [f"{prefix}.10", f"{prefix}.11"], f"a player on each node {sorted(by_ip)}")
check(all(s["pinned"] == r["digest"] and s["frame"] == [48, 64, 3] and s["frame_nonzero"] for s in r["sessions"]),
      "each session pinned to the digest and rendered a 64x48 frame")
head, worker = (by_ip[f"{prefix}.{n}"]["build_fetched"] or {} for n in (10, 11))  # None: no fetch was asked
check(not head.get("fetched") and head.get("bytes_moved", 0) == 0, "the head's player used its own store (nothing moved)")
served = r["served"]
if expect == "fetch":
    check(worker.get("fetched") and worker["bytes_moved"] == r["blob_bytes"],
          f"the worker fetched the build first: {worker['bytes_moved']:,} bytes, {worker['blobs_moved']} blobs")
    check(served == {f"{prefix}.11": {"manifests": 1, "bytes": r["blob_bytes"]}},
          f"the head's store served the worker alone, once: {served}")
else:
    check(worker and not worker["fetched"] and worker["bytes_moved"] == 0 and worker["blobs_moved"] == 0,
          f"the restarted worker fetched nothing: {worker}")
    check(sum(c["bytes"] for c in served.values()) == 0, f"0 bytes served by the head's store: {served}")
check(store["digests"] == [r["digest"]] and store["bad"] == {r["digest"]: []},
      f"the worker's store {store['root']} holds the digest, every file as the manifest says")
EOF
}
t=$(date +%s.%N)
timeout 400 podman exec "$RUN_ID-head" python3 /opt/container-test/driver.py "$PREFIX.10:6379" /tmp/unused \
    --build ctest:v1 > "$TMP/fetch-1.log" 2>&1 || fail "sessions on the build (first run)"
store_digests "$RUN_ID-worker" > "$TMP/worker-store-1.json" || fail "reading the worker's store"
check_fetch "$TMP/fetch-1.log" "$TMP/worker-store-1.json" fetch || fail "the first run's fetch"
echo "  (first run: $(elapsed "$t") s)"
# The restart as a pod's: the container goes (SIGTERM: its raylet leaves the cluster), a new one comes with the
# same volume.
old_node=$("$PYTHON" -c 'import json, sys; r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(next(s["node"] for s in r["sessions"] if s["node_ip"] == sys.argv[2]))' "$TMP/fetch-1.log" "$PREFIX.11")
podman stop -t 30 "$RUN_ID-worker" >/dev/null 2>&1
podman rm -f -v -t 0 "$RUN_ID-worker" >/dev/null 2>&1  # -v: anonymous volumes only; the store's is named
start_worker
t=$(date +%s.%N)
wait_for_cluster "$old_node"
echo "  ok: the worker restarted ($(elapsed "$t") s to rejoin as a new node) with its store's volume kept"
t=$(date +%s.%N)
timeout 400 podman exec "$RUN_ID-head" python3 /opt/container-test/driver.py "$PREFIX.10:6379" /tmp/unused \
    --build ctest:v1 > "$TMP/fetch-2.log" 2>&1 || fail "sessions on the build (after the restart)"
store_digests "$RUN_ID-worker" > "$TMP/worker-store-2.json" || fail "reading the worker's store"
check_fetch "$TMP/fetch-2.log" "$TMP/worker-store-2.json" none || fail "the second run moved bytes"
echo "  (second run: $(elapsed "$t") s)"

# --- 4. a build that only a service holds ----------------------------------------------------------------------
step "builds from a service: the nodes fetch from the service container (build_source=), not through the driver"
# Another fake build (other assets: its big blobs are in no node's store; its small files are part 3's, which both
# nodes now hold, so only the rest should move), made and exported on the host and uploaded to the service over
# its published port with a builds:write token; the nodes fetch with a bare one (scope sessions).
SERVICE_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
UPLOAD_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
SERVICE_PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SERVICE_URL=http://$PREFIX.21:8200  # as the nodes reach it, on this test's network
mkdir -m 0755 "$TMP/build-v2-src"
"$PYTHON" - "$TMP/build-v2-src" "$UR_ROOT/tests" "$TMP/build-src/$exe" "$TMP/host-store" "$TMP/build-v2.tar" \
    > "$TMP/build-v2.json" <<'EOF' || fail "making and exporting the second fake build"
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from fixtures.unity_builds import executable_of, make_build
from unirender.builds import BuildStore, manifest
root = make_build(Path(sys.argv[1]), family="ai2thor", player="reference", platform="CloudRendering",
                  assets=2, asset_size=4 << 20, variant=1, changed=2)
executable_of(root).write_text('#!/bin/sh\nexec /opt/unirender/bin/unirender-player "$@"\n')
store = BuildStore(sys.argv[4])  # a host store of this test's own, to export from (and to read part 3's blobs)
v1, v2 = store.add(sys.argv[3]), store.add(root)
store.export(v2.digest, sys.argv[5])
def blobs(build):
    return {(e.sha256, e.size) for e in manifest.parse((build.path / "manifest.json").read_bytes()) if e.type == "file"}
held = {sha for sha, _size in blobs(v1)}
print(json.dumps({"digest": v2.digest, "blob_bytes": sum(n for _s, n in blobs(v2)),
                  "missing_bytes": sum(n for s, n in blobs(v2) if s not in held)}))
EOF
DIGEST=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["digest"])' "$TMP/build-v2.json")
cat > "$TMP/build-service.yaml" <<EOF
host: 0.0.0.0
port: 8200
data_root: /data
build_store: $STORE_DIR
tokens:
  nodes: $SERVICE_TOKEN
  uploader: {token: $UPLOAD_TOKEN, scopes: ["builds:write"]}
EOF
chmod 0644 "$TMP/build-service.yaml"
podman run -d --name "$RUN_ID-build-service" "${LABEL[@]}" --network "$NET" --ip "$PREFIX.21" \
    -p "127.0.0.1:$SERVICE_PORT:8200" "${SERVICE_RUN[@]}" -v "$SERVICE_STORE:$STORE_DIR" \
    -v "$TMP/build-service.yaml:/etc/unirender/service.yaml:ro" "$UR_IMAGE" >/dev/null 2>"$TMP/run.err" \
    || { cat "$TMP/run.err" >&2; fail "podman run (the builds' service)"; }
wait_for_healthz "$RUN_ID-build-service" "$SERVICE_PORT"
code=$(curl -sS -o "$TMP/put.json" -w '%{http_code}' -T "$TMP/build-v2.tar" -H "Content-Type: application/x-tar" \
    -H "Authorization: Bearer $UPLOAD_TOKEN" "http://127.0.0.1:$SERVICE_PORT/v1/builds/$DIGEST") \
    || fail "uploading the build to the service"
[ "$code" = 201 ] || { cat "$TMP/put.json" >&2; fail "PUT /v1/builds/$DIGEST answered $code (expected 201)"; }
store_digests "$RUN_ID-build-service" > "$TMP/service-store.json" || fail "reading the service's store"
store_digests "$RUN_ID-head" > "$TMP/head-store-4.json" || fail "reading the head's store"
store_digests "$RUN_ID-worker" > "$TMP/worker-store-4.json" || fail "reading the worker's store"
"$PYTHON" - "$DIGEST" "$TMP/service-store.json" "$TMP/head-store-4.json" "$TMP/worker-store-4.json" <<'EOF'
import json, sys
digest = sys.argv[1]
service, head, worker = (json.load(open(f)) for f in sys.argv[2:5])
if service["digests"] != [digest] or service["bad"] != {digest: []}:
    raise SystemExit(f"FAILED: the service's store should hold the uploaded build alone, intact: {service}")
if digest in head["digests"] or digest in worker["digests"]:
    raise SystemExit(f"FAILED: a node's store already holds {digest}: head {head}, worker {worker}")
print(f"  ok: {digest[:19]}... uploaded to the service (201), in its store {service['root']} alone, in no node's")
EOF
t=$(date +%s.%N)
# The token goes in the driver's environment, not on a command line (ps shows those).
timeout 400 podman exec -e "UNIRENDER_BUILD_TOKEN=$SERVICE_TOKEN" "$RUN_ID-head" python3 /opt/container-test/driver.py \
    "$PREFIX.10:6379" /tmp/unused --build "$DIGEST" --build-source "$SERVICE_URL" > "$TMP/fetch-service.log" 2>&1 \
    || fail "sessions on the service's build"
store_digests "$RUN_ID-worker" > "$TMP/worker-store-5.json" || fail "reading the worker's store"
curl -sf "http://127.0.0.1:$SERVICE_PORT/metrics" > "$TMP/service-metrics.txt" || fail "the service's /metrics"
"$PYTHON" - "$TMP/fetch-service.log" "$TMP/build-v2.json" "$TMP/worker-store-5.json" "$TMP/service-metrics.txt" \
    "$PREFIX" "$SERVICE_URL" <<'EOF' || fail "the fetch from the service"
import json, re, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
build, store = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
prefix, url, digest = sys.argv[5], sys.argv[6], build["digest"]
requests = {}  # (route, status) -> count: the service's own unirender_http_requests counter
for route, status, n in re.findall(r'^unirender_http_requests_total\{route="([^"]+)",status="(\d+)"\} (\S+)$',
                                   open(sys.argv[4]).read(), re.M):
    requests[route, status] = int(float(n))
def check(ok, msg):
    if not ok:
        raise SystemExit(f"FAILED: {msg}: {r} (service requests: {requests})")
    print(f"  ok: {msg}")
# The fetch's error, as the driver's create_session raised it, with the service's own code for each.
for label, code in (("wrong", "401 invalid_token"), ("missing", "401 missing_token")):
    message = r["refused"][label]
    check(all(s in message for s in (digest, f"from the service {url}: {code}")),
          f"a {label} token: BuildFetchError naming the build, the node and the service's {code}: "
          f"...{message[message.find(' on node '):]}")
check(requests.get(("get_build_manifest", "401")) == 2, "the service itself refused those two manifest requests")
by_ip = {s["node_ip"]: s for s in r["sessions"]}
check(sorted(by_ip) == [f"{prefix}.10", f"{prefix}.11"], f"with the token: a player on each node {sorted(by_ip)}")
check(all(s["pinned"] == digest and s["frame"] == [48, 64, 3] and s["frame_nonzero"] for s in r["sessions"]),
      "each session pinned to the digest and rendered a 64x48 frame")
for n, name in ((11, "worker"), (10, "head (the driver's node)")):
    got = by_ip[f"{prefix}.{n}"]["build_fetched"] or {}
    check(got.get("fetched") and got["bytes_moved"] == build["missing_bytes"],
          f"the {name} fetched the build: {got.get('bytes_moved', 0):,} bytes (of {build['blob_bytes']:,}: the "
          f"rest its store held), {got.get('blobs_moved')} blobs")
check(r["served"] == {}, "not through the driver: its store served nothing (no StoreServer was started)")
blob_requests = sum(n for (route, status), n in requests.items()
                    if route in ("get_build_blob", "post_build_blobs") and status in ("200", "206"))
check(requests.get(("get_build_manifest", "200")) == 2 and blob_requests >= 2,
      f"the service served them: 2 manifests, {blob_requests} blob requests")
check(digest in store["digests"] and store["bad"][digest] == [],
      f"the worker's store {store['root']} holds the digest, every file as the manifest says")
EOF
echo "  (part 4's Ray run: $(elapsed "$t") s)"

# --- nothing left behind ---------------------------------------------------------------------------------------
step "teardown"
podman stop -t 20 "$RUN_ID-head" "$RUN_ID-build-service" >/dev/null 2>&1
podman rm -f -v -t 0 "$RUN_ID-head" "$RUN_ID-worker" "$RUN_ID-build-service" >/dev/null 2>&1
podman network rm "$NET" >/dev/null
podman volume rm "$VOLUME" "$HEAD_STORE" "$WORKER_STORE" "$SERVICE_STORE" >/dev/null
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
