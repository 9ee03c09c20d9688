#!/usr/bin/env bash
# Build the base images that docker/Dockerfile and docker/docker-compose.yml need, without an
# image registry: a Debian bookworm root filesystem from debootstrap (variant minbase, no
# recommends) and the Debian package mirror that apt on this host already uses, imported with
# `docker import` under the standard tags, so the standard files work unchanged:
#
#   debian:bookworm-slim   minbase + the "slim" trimming (no docs, man pages or locales)
#   redis:7                the same + redis-server 7 from Debian; WORKDIR /data, VOLUME /data,
#                          entrypoint compatible with the official image
#                          (`redis-server --appendonly yes` works; runs as user redis;
#                          protected mode off as in the official image)
#
# A tag that already exists is kept (built here or pulled from a registry) unless --force.
# Needs root (debootstrap, chroot) and a running Docker engine. Never pulls anything.
#
# Usage: docker/build-base-images.sh [--force] [--mirror URL] [--security-mirror URL]
#                                    [--only debian|redis] [--no-upgrade]
# Environment: TANDEM_DEBIAN_MIRROR, TANDEM_DEBIAN_SECURITY_MIRROR (same as the flags),
#   TANDEM_DEBOOTSTRAP_CACHE (downloaded .debs kept for rebuilds; default
#   /var/cache/tandem-base-images/debootstrap).
# Exit codes: 0 built or already present, 1 failure, 2 bad usage.
set -euo pipefail

SUITE=bookworm
DEBIAN_TAG=debian:bookworm-slim
REDIS_TAG=redis:7
FORCE=0
ONLY=""
UPGRADE=1
MIRROR="${TANDEM_DEBIAN_MIRROR:-}"
CACHE_DIR="${TANDEM_DEBOOTSTRAP_CACHE:-/var/cache/tandem-base-images/debootstrap}"
SECURITY_MIRROR="${TANDEM_DEBIAN_SECURITY_MIRROR:-}"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --force) FORCE=1 ;;
        --no-upgrade) UPGRADE=0 ;;
        --mirror) MIRROR="${2:?--mirror needs a URL}"; shift ;;
        --security-mirror) SECURITY_MIRROR="${2:?--security-mirror needs a URL}"; shift ;;
        --only) ONLY="${2:?--only needs debian or redis}"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "build-base-images: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
case "$ONLY" in ""|debian|redis) ;; *) echo "build-base-images: --only takes debian or redis" >&2; exit 2 ;; esac

log() { printf '[build-base-images %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- the mirror apt already uses -------------------------------------------------------------
# First URI of a deb822 .sources stanza (or a one-line sources.list entry) that serves $SUITE
# from a path ending in /debian (resp. /debian-security).
apt_mirror() { # $1: debian | debian-security
    local want="$1" f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        uri=$(awk -v want="$want" '
            /^URIs:/ { for (i = 2; i <= NF; i++) { u = $i; sub(/\/+$/, "", u); if (u ~ ("/" want "$")) found = u } }
            END { if (found) print found }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        uri=$(awk -v want="$want" '
            $1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { u = $i; sub(/\/+$/, "", u); if (u ~ ("/" want "$")) { print u; exit } } }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return 0; }
    done
    return 1
}
[ -n "$MIRROR" ] || MIRROR=$(apt_mirror debian || echo http://deb.debian.org/debian)
[ -n "$SECURITY_MIRROR" ] || SECURITY_MIRROR=$(apt_mirror debian-security || echo http://deb.debian.org/debian-security)

# --- what to build ---------------------------------------------------------------------------
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
want_debian=0; want_redis=0
if [ "$ONLY" != redis ]; then
    if [ "$FORCE" = 1 ] || ! have_image "$DEBIAN_TAG"; then want_debian=1; else log "$DEBIAN_TAG exists: kept (--force rebuilds)"; fi
fi
if [ "$ONLY" != debian ]; then
    if [ "$FORCE" = 1 ] || ! have_image "$REDIS_TAG"; then want_redis=1; else log "$REDIS_TAG exists: kept (--force rebuilds)"; fi
fi
if [ $want_debian = 0 ] && [ $want_redis = 0 ]; then log "nothing to build"; exit 0; fi

[ "$(id -u)" = 0 ] || die "must run as root (debootstrap and chroot)"
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap with apt"
    apt-get install -y --no-install-recommends debootstrap >/dev/null || die "apt-get install debootstrap failed"
fi

WORK=$(mktemp -d /var/tmp/tandem-base-images.XXXXXX)
ROOT="$WORK/rootfs"
MOUNTS=()
cleanup() {
    local m i
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do m="${MOUNTS[$i]}"; umount -l "$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
T0=$(date +%s)
stage_time() { log "$1 done in $(( $(date +%s) - $2 ))s"; }

in_root() { # $1: root dir, rest: command run inside it (chroot, no network namespace change)
    local r="$1"; shift
    DEBIAN_FRONTEND=noninteractive LC_ALL=C chroot "$r" "$@"
}
in_root_logged() { # like in_root, output to $WORK/chroot.log, shown only on failure
    in_root "$@" >>"$WORK/chroot.log" 2>&1 || { tail -n 30 "$WORK/chroot.log" >&2; die "in chroot: ${*:2} failed (log above)"; }
}
mount_api() { # /proc and /dev for maintainer scripts; unmounted before the tarball is made
    local r="$1"
    mount -t proc proc "$r/proc" && MOUNTS+=("$r/proc")
    mount --rbind /dev "$r/dev" && mount --make-rslave "$r/dev" && MOUNTS+=("$r/dev")
}
umount_api() {
    local r="$1" m keep=()
    for m in "${MOUNTS[@]}"; do
        case "$m" in "$r"/*) umount -l "$m" ;; *) keep+=("$m") ;; esac
    done
    MOUNTS=("${keep[@]+"${keep[@]}"}")
}
import_rootfs() { # $1: root dir, $2: tag, rest: --change arguments
    local r="$1" tag="$2"; shift 2
    local t old; t=$(date +%s)
    old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
    tar --numeric-owner --xattrs -C "$r" -c . | docker import "$@" - "$tag" >/dev/null
    # A --force rebuild leaves the previous image untagged: remove it unless something uses it.
    [ -z "$old" ] || [ "$old" = "$(docker image inspect -f '{{.Id}}' "$tag")" ] \
        || docker rmi "$old" >/dev/null 2>&1 || true
    stage_time "docker import $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))" "$t"
}
slim_cleanup() { # what the official slim image leaves out, and no apt caches
    local r="$1"
    rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/*.bin "$r"/var/cache/apt/archives/*.deb \
           "$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old "$r"/var/log/apt/* "$r"/var/log/dpkg.log \
           "$r"/var/log/bootstrap.log "$r"/var/log/alternatives.log "$r"/tmp/* "$r"/var/tmp/* \
           "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/groff/* "$r"/usr/share/lintian/* \
           "$r"/usr/share/linda/* "$r"/root/.bash_history
    find "$r"/usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
    find "$r"/usr/share/doc -mindepth 1 -type d -empty -delete 2>/dev/null || true
    find "$r"/usr/share/locale -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true
    : > "$r"/etc/machine-id
}

# --- 1. debootstrap minbase ------------------------------------------------------------------
t=$(date +%s)
log "debootstrap --variant=minbase $SUITE from $MIRROR"
mkdir -p "$CACHE_DIR"
debootstrap --variant=minbase --cache-dir="$CACHE_DIR" --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 30 "$WORK/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
stage_time "debootstrap" "$t"

# apt configuration of the image: the same mirrors, no recommends, no docs, as the slim image.
rm -f "$ROOT"/etc/apt/sources.list
cat >"$ROOT"/etc/apt/sources.list.d/debian.sources <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cat >"$ROOT"/etc/apt/apt.conf.d/docker-no-recommends <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
cat >"$ROOT"/etc/apt/apt.conf.d/docker-clean <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
EOF
cat >"$ROOT"/etc/dpkg/dpkg.cfg.d/docker <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
# Never start services from maintainer scripts inside the build.
printf '#!/bin/sh\nexit 101\n' >"$ROOT"/usr/sbin/policy-rc.d
chmod 0755 "$ROOT"/usr/sbin/policy-rc.d

mount_api "$ROOT"
t=$(date +%s)
if [ "$UPGRADE" = 1 ]; then
    in_root_logged "$ROOT" apt-get -q update
    in_root_logged "$ROOT" apt-get -q -y -o Dpkg::Options::=--force-confold dist-upgrade
    stage_time "apt-get update + dist-upgrade ($SUITE-updates, $SUITE-security)" "$t"
fi

# --- 2. redis:7 (copy of the base + redis-server) --------------------------------------------
if [ $want_redis = 1 ]; then
    t=$(date +%s)
    RROOT="$WORK/rootfs-redis"
    umount_api "$ROOT"
    cp -a "$ROOT" "$RROOT"
    mount_api "$ROOT"
    mount_api "$RROOT"
    [ "$UPGRADE" = 1 ] || in_root_logged "$RROOT" apt-get -q update
    in_root_logged "$RROOT" apt-get -q -y install redis-server
    ver=$(in_root "$RROOT" redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')
    case "$ver" in 7.*) ;; *) die "redis-server from $MIRROR is '$ver', not 7.x" ;; esac
    [ -x "$RROOT"/usr/bin/setpriv ] || die "setpriv (util-linux) missing in the image"
    install -d -o "$(in_root "$RROOT" id -u redis)" -g "$(in_root "$RROOT" id -g redis)" -m 0750 "$RROOT"/data
    cat >"$RROOT"/usr/local/bin/docker-entrypoint.sh <<'EOF'
#!/bin/sh
# Entrypoint compatible with the official redis image: `redis-server ARGS...`, or only options
# (`--appendonly yes`), or a .conf file. Protected mode is off unless the arguments set it (as
# in the official image: the container network is the boundary). Drops root to user redis.
set -e
if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
    set -- redis-server "$@"
fi
if [ "$1" = redis-server ]; then
    case " $* " in *" --protected-mode "*) ;; *) set -- "$@" --protected-mode no ;; esac
    if [ "$(id -u)" = 0 ]; then
        find . \! -user redis -exec chown redis:redis '{}' +
        exec setpriv --reuid=redis --regid=redis --init-groups "$@"
    fi
fi
exec "$@"
EOF
    chmod 0755 "$RROOT"/usr/local/bin/docker-entrypoint.sh
    umount_api "$RROOT"
    rm -f "$RROOT"/usr/sbin/policy-rc.d
    slim_cleanup "$RROOT"
    stage_time "redis-server $ver installed" "$t"
    import_rootfs "$RROOT" "$REDIS_TAG" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'WORKDIR /data' \
        --change 'VOLUME /data' \
        --change 'EXPOSE 6379' \
        --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
        --change 'CMD ["redis-server"]' \
        --change "LABEL org.opencontainers.image.description=\"redis-server $ver, debootstrap $SUITE minbase, tandem docker/build-base-images.sh\""
    rm -rf --one-file-system "$RROOT"
fi

# --- 3. debian:bookworm-slim -----------------------------------------------------------------
if [ $want_debian = 1 ]; then
    umount_api "$ROOT"
    rm -f "$ROOT"/usr/sbin/policy-rc.d
    slim_cleanup "$ROOT"
    import_rootfs "$ROOT" "$DEBIAN_TAG" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' \
        --change "LABEL org.opencontainers.image.description=\"debootstrap $SUITE minbase, tandem docker/build-base-images.sh\""
fi
log "all done in $(( $(date +%s) - T0 ))s"
