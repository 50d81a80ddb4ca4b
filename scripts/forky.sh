#!/usr/bin/env bash
# A Debian forky chroot for stompfast's tests: RabbitMQ 4.x and CPython 3.14/3.15 beside the host's
# bookworm packages (used by scripts/brokers.sh for `rabbitmq4`, and by hand).
#
# Usage:
#   scripts/forky.sh ensure                  make the chroot if it is missing (idempotent); prints timings
#   scripts/forky.sh run [--repo] CMD ARGS... run CMD inside the chroot; exit status is CMD's
#   scripts/forky.sh python VERSION          print the path of pythonVERSION inside the chroot (e.g. 3.15
#                                            -> /usr/bin/python3.15); exit 1 if the chroot lacks it (there
#                                            is no plain python3 inside: name the version)
#   scripts/forky.sh dir                     print the chroot's directory (as seen from the host)
#
#   scripts/forky.sh ensure
#   scripts/forky.sh run --repo sh -c 'cd /work/main && python3.15 -m venv /tmp/v315 && ...'
#
# ensure: `debootstrap --variant=minbase --include=ca-certificates forky <tmp> <mirror>` with the sid
#   script (bookworm's debootstrap has no forky script), into a temporary directory next to the
#   chroot, renamed to the chroot only when every package is installed (an interrupted run leaves
#   no half chroot; its leftovers are deleted by the next `ensure`). Then, inside: an apt.conf.d file
#   with Acquire::Check-Valid-Until=false (the mirror's forky Release is past its Valid-Until), a
#   /usr/sbin/policy-rc.d that exits 101 (no service starts on install), and
#   `apt-get install --no-install-recommends` of $PACKAGES below: rabbitmq-server (4.3.x, Erlang 29),
#   python3.14/python3.15 with -dev and -venv, gcc, libc6-dev, openssl, procps. A chroot made with an
#   older package list gets the missing packages installed in place. The mirror is the one the host's
#   apt uses for its own release (from /etc/apt/sources.list and sources.list.d/; override with
#   STOMPFAST_FORKY_MIRROR). The host's own trust anchors (/usr/local/share/ca-certificates: here the
#   CA of the TLS-intercepting egress proxy, without which pip inside cannot reach PyPI) are copied in
#   and update-ca-certificates run inside; `run` copies them again whenever the host's differ.
#   Measured on this 2-core machine from nothing (3 runs): debootstrap 22-26 s, apt-get update +
#   install 17-19 s, 41-45 s in all; the chroot is 747 MB (du -sh). With the chroot in place: 0.02 s.
# run: in a private mount namespace (`unshare --mount --propagation private`), mounts /proc, /dev
#   (rbind: with /dev/pts and /dev/shm), /sys (rbind) and the host's /tmp (bind) into the chroot and,
#   with --repo, this repository at the same absolute path, then `chroot`s and execs CMD. The mounts
#   exist only in that namespace: they vanish when its last process exits, and the host never sees
#   them, so an `rm -rf` of the chroot (or of the repo, or of a CI clone) cannot reach /dev, /proc or
#   the repo through it. A daemon started inside (the RabbitMQ 4.x node) keeps its namespace alive.
#   The environment passes through, except HOME=/root; the usual Debian PATH directories are
#   appended to PATH when it lacks them. A venv made inside at a path under the repo or /tmp works
#   again in a later `run --repo`, since every path is the same (not from the host: its python
#   symlink names the chroot's /usr/bin/python3.X).
#
# Environment overrides (defaults in brackets):
#   STOMPFAST_BROKERS_DIR  [<repo>/.brokers]        as for scripts/brokers.sh
#   STOMPFAST_FORKY_DIR    [$STOMPFAST_BROKERS_DIR/forky]  the chroot
#   STOMPFAST_FORKY_MIRROR [the host's Debian mirror, read from its apt sources]
# Needs root (debootstrap, unshare, mount, chroot) and, for `ensure`, debootstrap and network access
# to the mirror.
set -euo pipefail

SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SCRIPT")/.." && pwd)
BROKERS_DIR=${STOMPFAST_BROKERS_DIR:-$REPO/.brokers}
FORKY_DIR=${STOMPFAST_FORKY_DIR:-$BROKERS_DIR/forky}
case $FORKY_DIR in /*) ;; *) FORKY_DIR=$PWD/$FORKY_DIR ;; esac
FORKY_DIR=${FORKY_DIR%/}
SUITE=forky
PACKAGES=(rabbitmq-server python3.14 python3.14-dev python3.14-venv python3.15 python3.15-dev
          python3.15-venv gcc libc6-dev openssl procps)
# Written inside the chroot when every package is installed; names the package list.
MARKER=etc/stompfast-forky
DEB_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say()  { printf 'forky: %s\n' "$*" >&2; }
die()  { printf 'forky: ERROR: %s\n' "$*" >&2; exit 1; }
now()  { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
usage() { sed -n '2,/^set -euo/p' "$SCRIPT" | sed '$d; s/^# \{0,1\}//'; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (debootstrap, unshare, mount and chroot need it)"; }

# host_mirror: the URI of the host's own Debian release in its apt sources (one-line or deb822).
host_mirror() {
    local codename f uris
    [ -n "${STOMPFAST_FORKY_MIRROR:-}" ] && { echo "$STOMPFAST_FORKY_MIRROR"; return; }
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || die "no VERSION_CODENAME in /etc/os-release; set STOMPFAST_FORKY_MIRROR"
    uris=$(for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        case $f in
            *.sources)
                # deb822 stanzas: the first URI of a stanza with Types: deb and Suites: <codename>
                awk -v c="$codename" '
                    function flush() { if (deb && suite && uri != "") { print uri; found = 1; exit } deb = suite = 0; uri = "" }
                    /^[ \t]*$/ { flush(); next }
                    /^[ \t]*#/ { next }
                    tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
                    tolower($1) == "uris:" { uri = $2 }
                    tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == c) suite = 1 }
                    tolower($1) == "enabled:" && tolower($2) == "no" { deb = 0 }
                    END { if (!found) flush() }' "$f" ;;
            *)
                awk -v c="$codename" '
                    $1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                                  if ($(i + 1) == c) { print $i; exit } }' "$f" ;;
        esac
    done)
    [ -n "$uris" ] || die "no 'deb ... $codename' source in /etc/apt/sources.list(.d); set STOMPFAST_FORKY_MIRROR"
    echo "${uris%%$'\n'*}"
}

# mounted_under DIR: succeed if this mount namespace has anything mounted at or below DIR.
mounted_under() {
    awk -v d="$1" '$5 == d || index($5, d "/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo
}

# safe_rm DIR: rm -rf, but never through a mount point.
safe_rm() {
    if mounted_under "$1"; then die "$1 has something mounted below it in this mount namespace: not deleting it"; fi
    rm -rf --one-file-system "$1"
}

# The private-namespace chroot, run by sh: sh -euc "$NS" forky-ns ROOT REPO CMD... (REPO empty: no
# repository bind). `unshare --mount` execs sh, which execs chroot, which execs CMD: one process.
# shellcheck disable=SC2016  # expanded by that sh
NS='
    root=$1 repo=$2; shift 2
    mkdir -p "$root/proc" "$root/dev" "$root/sys" "$root/tmp"
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --rbind /sys "$root/sys"
    mount --bind /tmp "$root/tmp"
    if [ -n "$repo" ]; then
        mkdir -p "$root$repo"
        mount --bind "$repo" "$root$repo"
    fi
    exec chroot "$root" "$@"'
in_ns() { unshare --mount --propagation private -- sh -euc "$NS" forky-ns "$@"; }

# run_env: env(1) arguments for commands inside the chroot (see the header).
run_env() {
    local path=${PATH:-} d
    for d in ${DEB_PATH//:/ }; do
        case ":$path:" in *":$d:"*) ;; *) path=${path:+$path:}$d ;; esac
    done
    printf '%s\n' HOME=/root "PATH=$path"
}

# sync_cas ROOT: the host's own trust anchors (/usr/local/share/ca-certificates, e.g. the CA of a
# TLS-intercepting egress proxy, which pip and git inside need) copied into the chroot and
# update-ca-certificates run there, when they differ from the chroot's copy (checked on every run).
sync_cas() {
    local root=$1 src=/usr/local/share/ca-certificates
    [ -d "$src" ] || return 0
    diff -rq "$src" "$root$src" >/dev/null 2>&1 && return 0
    rm -rf "$root$src"
    cp -a "$src" "$root$src"
    in_ns "$root" "" /usr/bin/env -i PATH="$DEB_PATH" update-ca-certificates --fresh >/dev/null 2>&1 \
        || say "update-ca-certificates failed inside $root: the host's own CAs are not trusted there"
}

chroot_apt() {  # chroot_apt ROOT LOG: apt-get update + install of $PACKAGES inside ROOT
    local root=$1 log=$2
    in_ns "$root" "" /usr/bin/env -i HOME=/root PATH="$DEB_PATH" DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 sh -ec '
        dpkg --configure -a
        apt-get -q update
        apt-get -q -y --no-install-recommends install "$@"
        apt-get clean' apt "${PACKAGES[@]}" >>"$log" 2>&1
}

prepare_root() {  # apt and service settings inside a fresh (or older) chroot
    local root=$1
    printf '%s\n' '// Written by scripts/forky.sh: the mirror'\''s forky Release is past its Valid-Until.' \
        'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99stompfast-valid-until"
    printf '%s\n' '#!/bin/sh' '# Written by scripts/forky.sh: no service starts when a package is installed.' 'exit 101' \
        >"$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    [ -s "$root/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
}

ensure() {
    local t0 t1 mirror tmp log want old
    need_root
    t0=$(now)
    want="packages=${PACKAGES[*]}"
    if [ "$(cat "$FORKY_DIR/$MARKER" 2>/dev/null || true)" = "$want" ]; then
        say "chroot ready: $FORKY_DIR (nothing to do, $(since "$t0") s)"; return 0
    fi
    mkdir -p "$(dirname "$FORKY_DIR")"
    exec 8>"$FORKY_DIR.lock"
    flock -w 900 8 || die "another forky.sh ensure holds $FORKY_DIR.lock"
    if [ "$(cat "$FORKY_DIR/$MARKER" 2>/dev/null || true)" = "$want" ]; then
        say "chroot ready: $FORKY_DIR (made meanwhile by another ensure)"; return 0
    fi
    for old in "$FORKY_DIR".new.*; do
        [ -d "$old" ] || continue
        say "deleting $old (left by an interrupted ensure)"
        safe_rm "$old"
    done
    log=$FORKY_DIR.log
    : >"$log"
    if [ -d "$FORKY_DIR" ] && [ -s "$FORKY_DIR/$MARKER" ]; then
        # A complete chroot made with another package list: install what is missing, in place.
        say "installing the missing packages into $FORKY_DIR (log: $log)"
        prepare_root "$FORKY_DIR"
        chroot_apt "$FORKY_DIR" "$log" || { tail -n 30 "$log" >&2; die "apt-get install failed inside $FORKY_DIR (log: $log)"; }
        sync_cas "$FORKY_DIR"
        echo "$want" >"$FORKY_DIR/$MARKER"
        say "chroot ready: $FORKY_DIR (packages added in $(since "$t0") s)"; return 0
    fi
    if [ -e "$FORKY_DIR" ]; then
        say "deleting $FORKY_DIR: not a complete chroot (no $MARKER)"
        safe_rm "$FORKY_DIR"
    fi
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap is not installed (apt-get install debootstrap)"
    [ -r /usr/share/debootstrap/scripts/sid ] || die "debootstrap has no sid script"
    mirror=$(host_mirror)
    tmp=$(mktemp -d "$FORKY_DIR.new.XXXXXX")
    chmod 755 "$tmp"
    say "debootstrap $SUITE from $mirror into $tmp (log: $log)"
    # debootstrap mounts /proc, /sys and (in a container) /dev nodes into the target while it works:
    # in a private namespace those mounts can never outlive it, even if it is killed.
    if ! unshare --mount --propagation private -- \
            debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$tmp" "$mirror" \
            /usr/share/debootstrap/scripts/sid >>"$log" 2>&1 </dev/null; then
        tail -n 30 "$log" >&2
        [ -r "$tmp/debootstrap/debootstrap.log" ] && { echo "----- tail of $tmp/debootstrap/debootstrap.log"; tail -n 30 "$tmp/debootstrap/debootstrap.log"; } >&2
        die "debootstrap failed (log: $log; the partial chroot $tmp is deleted by the next ensure)"
    fi
    say "debootstrap done in $(since "$t0") s"
    t1=$(now)
    prepare_root "$tmp"
    chroot_apt "$tmp" "$log" || { tail -n 30 "$log" >&2; die "apt-get install failed inside $tmp (log: $log)"; }
    sync_cas "$tmp"
    say "apt-get update + install of ${#PACKAGES[@]} packages done in $(since "$t1") s"
    echo "$want" >"$tmp/$MARKER"
    mv -T "$tmp" "$FORKY_DIR"
    say "chroot ready: $FORKY_DIR ($(du -sh "$FORKY_DIR" 2>/dev/null | cut -f1)) in $(since "$t0") s"
}

run() {
    local repo="" envs
    need_root
    if [ "${1:-}" = --repo ]; then repo=$REPO; shift; fi
    [ $# -gt 0 ] || die "usage: $0 run [--repo] CMD ARGS..."
    [ -s "$FORKY_DIR/$MARKER" ] || die "no chroot at $FORKY_DIR; run: $0 ensure"
    if ! diff -rq /usr/local/share/ca-certificates "$FORKY_DIR/usr/local/share/ca-certificates" >/dev/null 2>&1; then
        ( flock -w 300 8 || die "could not lock $FORKY_DIR.lock"; sync_cas "$FORKY_DIR" ) 8>"$FORKY_DIR.lock"
    fi
    mapfile -t envs < <(run_env)
    exec unshare --mount --propagation private -- sh -euc "$NS" forky-ns "$FORKY_DIR" "$repo" /usr/bin/env "${envs[@]}" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
    ensure)
        [ $# = 0 ] || die "usage: $0 ensure"
        ensure ;;
    run)
        run "$@" ;;
    python)
        [ $# = 1 ] && [[ $1 =~ ^3\.[0-9]+$ ]] || die "usage: $0 python VERSION (e.g. 3.15)"
        [ -x "$FORKY_DIR/usr/bin/python$1" ] || die "no python$1 in $FORKY_DIR (run: $0 ensure)"
        echo "/usr/bin/python$1" ;;
    dir)
        echo "$FORKY_DIR" ;;
    -h|--help|help)
        usage ;;
    *)
        usage >&2; exit 2 ;;
esac
