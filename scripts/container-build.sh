#!/usr/bin/env bash
# Build the unirender container images with podman, each cached by the hash of what goes into it.
#   scripts/container-build.sh        prints two lines: the service image's tag, then the Ray node image's tag
# Sourced by scripts/container-test.sh and benchmarks/container.py (they call ur_build_images). UR_BUILD_LOG: a
# file for podman build's output (default: stderr).
#
# The base: no image registry is reachable on this project's machines, so the base image is debian:bookworm-slim
# rebuilt from Debian's own packages (debootstrap --variant=minbase, then the slim image's dpkg excludes) and
# tagged locally; elsewhere `--build-arg BASE=debian:bookworm-slim` (the Containerfile's default) pulls the real
# one. The CA bundle that reaches the package registries ($PIP_CERT) is mounted read-only at /run/ca.crt for the
# build only, never copied into the image.
set -euo pipefail

UR_ROOT=${UR_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
UR_MIRROR=${UR_MIRROR:-http://deb.debian.org/debian}
UR_SUITE=bookworm
UR_BASE_REPO=localhost/unirender-base
UR_IMAGE_REPO=localhost/unirender

ur_log() { printf '[container] %s\n' "$*" >&2; }

# podman as measured on these machines (issue 28): runc (crun's cgroup setup is refused here), cgroupfs, and no
# default ulimits (crun's and runc's defaults are refused). A containers.conf of our own, so the host's stays as it is.
ur_podman_env() {
    if [ -z "${CONTAINERS_CONF:-}" ]; then
        UR_CONTAINERS_CONF=$(mktemp /tmp/unirender-containers.XXXXXX.conf)
        cat > "$UR_CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
        export CONTAINERS_CONF=$UR_CONTAINERS_CONF
    fi
}

ur_podman_env_cleanup() {
    [ -n "${UR_CONTAINERS_CONF:-}" ] && rm -f "$UR_CONTAINERS_CONF"
    return 0
}

ur_base_recipe() {
    # Everything that decides the base's content; its hash is the base's tag.
    printf 'suite=%s mirror=%s variant=minbase\n' "$UR_SUITE" "$UR_MIRROR"
    declare -f ur_build_base
}

ur_build_base() {
    local tag=$1 rootfs
    rootfs=$(mktemp -d /tmp/unirender-rootfs.XXXXXX)
    # shellcheck disable=SC2064
    trap "rm -rf '$rootfs'" RETURN
    ur_log "debootstrap $UR_SUITE (minbase) from $UR_MIRROR"
    debootstrap --variant=minbase "$UR_SUITE" "$rootfs/root" "$UR_MIRROR" >"$rootfs/debootstrap.log" 2>&1 \
        || { tail -20 "$rootfs/debootstrap.log" >&2; return 1; }
    # What makes the official image "slim": no docs, man pages or locales now or in any later apt-get install.
    cat > "$rootfs/root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
EOF
    cat > "$rootfs/root/etc/apt/sources.list" <<EOF
deb $UR_MIRROR $UR_SUITE main
deb $UR_MIRROR $UR_SUITE-updates main
deb ${UR_MIRROR%/debian}/debian-security $UR_SUITE-security main
EOF
    find "$rootfs/root/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
    rm -rf "$rootfs/root/usr/share/man/"* "$rootfs/root/usr/share/info/"* "$rootfs/root/var/cache/apt/"*.bin \
        "$rootfs/root/var/lib/apt/lists/"* "$rootfs/root/var/log/"*.log
    tar -C "$rootfs/root" --numeric-owner -c . | podman import --change 'CMD ["bash"]' - "$tag" >/dev/null
}

ur_base_tag() {
    echo "$UR_BASE_REPO:$UR_SUITE-slim-$(ur_base_recipe | sha256sum | cut -c1-12)"
}

ur_image_hash() {
    # The build context as the Containerfile sees it (.containerignore keeps it to these) plus the base.
    local base=$1
    {
        echo "$base"
        cd "$UR_ROOT"
        for f in Containerfile .containerignore pyproject.toml README.md LICENSE; do sha256sum "$f"; done
        { git ls-files -co --exclude-standard -- src deploy/container 2>/dev/null \
            || find src deploy/container -type f ! -path '*/__pycache__/*' ! -path '*.egg-info/*'; } \
            | LC_ALL=C sort | while read -r f; do if [ -f "$f" ]; then sha256sum "$f"; fi; done
    } | sha256sum | cut -c1-12
}

# Root: debootstrap needs it, and the checks use rootful podman (as measured in issue 28). The tools come from
# Debian's packages when missing.
ur_ensure_tools() {
    [ "$(id -u)" -eq 0 ] || { ur_log "needs root (debootstrap, rootful podman): sudo $0"; return 1; }
    local missing=() p
    # iptables: netavark (podman's network backend) sets up a network's NAT with it and fails without it
    # ("netavark: No such file or directory"); podman only recommends it.
    for p in podman runc debootstrap curl iptables; do command -v "$p" >/dev/null || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null || { ur_log "missing ${missing[*]} and no apt-get: install them"; return 1; }
    ur_log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc debootstrap curl \
        iptables netavark aardvark-dns >/dev/null
}

# Builds what is missing; sets UR_BASE, UR_IMAGE (the service) and UR_RAY_IMAGE (the Ray node).
ur_build_images() {
    ur_ensure_tools
    ur_podman_env
    UR_BASE=$(ur_base_tag)
    if podman image exists "$UR_BASE"; then
        ur_log "base $UR_BASE (cached)"
    else
        ur_build_base "$UR_BASE"
        ur_log "base $UR_BASE built"
    fi
    local hash
    hash=$(ur_image_hash "$UR_BASE")
    UR_IMAGE="$UR_IMAGE_REPO:$hash"
    UR_RAY_IMAGE="$UR_IMAGE_REPO:ray-$hash"
    if podman image exists "$UR_IMAGE" && podman image exists "$UR_RAY_IMAGE"; then
        ur_log "images $UR_IMAGE, $UR_RAY_IMAGE (cached)"
        return 0
    fi
    local cert=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt} mounts=() args=()
    if [ -f "$cert" ]; then
        mounts=(-v "$cert:/run/ca.crt:ro")
        args=(--build-arg PIP_CERT=/run/ca.crt)
    fi
    # --format docker: OCI images have no HEALTHCHECK. --network host: the build reaches Debian's mirror and PyPI
    # as this host does. --layers: the apt and pip layers are reused while only src/ changes.
    local target
    for target in service ray-node; do
        local tag=$UR_IMAGE
        [ "$target" = ray-node ] && tag=$UR_RAY_IMAGE
        # The service is built as a bare `podman build .` builds it (the last stage): what users get by default.
        local target_args=(--target "$target")
        [ "$target" = service ] && target_args=()
        ur_log "building $tag (target $target)"
        podman build --format docker --layers --network host "${mounts[@]}" "${args[@]}" \
            --build-arg "BASE=$UR_BASE" "${target_args[@]}" -t "$tag" -f "$UR_ROOT/Containerfile" "$UR_ROOT" \
            >>"${UR_BUILD_LOG:-/dev/stderr}" 2>&1 || { ur_log "podman build failed${UR_BUILD_LOG:+ (log: $UR_BUILD_LOG)}"; return 1; }
    done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    ur_build_images
    ur_podman_env_cleanup
    echo "$UR_IMAGE"
    echo "$UR_RAY_IMAGE"
fi
