#!/usr/bin/env bash
# run-tests.sh -- the README's test command: installs and builds everything it
# needs, then runs every suite in both capture modes:
#
#   the docs' references (scripts/check-doc-refs.pl), the include layering
#   (scripts/check-layers.pl) and the engine unit tests (GoogleTest, no server);
#   hooks: pg_regress and the TAP suite on the patched server
#          (scripts/build-postgres.sh, cached);
#   wal:   pg_regress and the TAP suite on Debian's stock postgresql-15,
#          where ptrack captures changes from the WAL;
#   scripts/test-debian-cluster.sh: a Debian cluster starts on the patched server;
#   with --package (or PTRACK_TEST_PACKAGE=1): scripts/test-debian-package.sh
#          builds the Debian package, installs it in a private mount namespace
#          and runs pg_regress against a stock cluster (needs root; CI runs it).
#
# Each TAP test runs in both modes unless it says it is specific to one
# (PtrackCluster::capture_mode()).  PostgreSQL refuses to run as root, and CI
# runs as root: in that case the server-side suites run as an unprivileged
# user (ptrack_test, created if missing) on a copy of the tree, and their logs
# are copied back to ./test-logs/<mode>/.
#
# Usage: scripts/run-tests.sh [--mode hooks|wal|both] [--package] [PROVE_TESTS='t/001_page_lsn_oracle.pl ...']
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

mode=both
package=${PTRACK_TEST_PACKAGE:-0}
while [ $# -gt 0 ]; do
    case $1 in
        --mode) [ $# -ge 2 ] || { echo "run-tests: --mode needs a value" >&2; exit 2; }
                mode=$2; shift 2 ;;
        --package) package=1; shift ;;
        *) break ;;
    esac
done
case $mode in hooks|wal|both) ;; *) echo "run-tests: --mode must be hooks, wal or both" >&2; exit 2 ;; esac

# Overridable so that several work trees on one machine can each test against
# a private copy of the servers (their `make install` would otherwise replace
# each other's ptrack.so): PTRACK_STOCK_PG_CONFIG (a stock server's pg_config)
# and PTRACK_PATCHED_PREFIX (a patched server's prefix, instead of building it).
STOCK_PG_CONFIG=${PTRACK_STOCK_PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

need_pkgs=()
pkgs=(libgtest-dev libipc-run-perl g++ postgresql-15 postgresql-server-dev-15 gdb)
# The package build: dpkg-buildpackage, dh, pg_buildext (debian/control).
[ "$package" = 1 ] && pkgs+=(dpkg-dev debhelper postgresql-server-dev-all)
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "run-tests: missing packages: ${need_pkgs[*]} (install them as root)" >&2
        exit 1
    fi
    apt-get install -y --no-install-recommends "${need_pkgs[@]}" >&2 ||
        { apt-get update >&2 && apt-get install -y --no-install-recommends "${need_pkgs[@]}" >&2; }
fi

make -s check-doc-refs
make -s PG_CONFIG="$STOCK_PG_CONFIG" unittest

if [ "$(id -u)" -eq 0 ]; then
    id ptrack_test >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash ptrack_test
fi

# run_mode MODE PG_CONFIG [make args...]: build and install ptrack into that
# server, then run pg_regress (tracking on and off) and the TAP suite.
run_mode() {
    local m=$1 pg_config=$2
    shift 2
    echo "run-tests: === $m capture: $("$pg_config" --version) ($("$pg_config" --bindir)) ===" >&2
    make -s PG_CONFIG="$pg_config" clean >/dev/null
    make -s PG_CONFIG="$pg_config" install
    local suites=(installcheck installcheck-off "$@")
    if [ "$(id -u)" -ne 0 ]; then
        PTRACK_CAPTURE=$m make PG_CONFIG="$pg_config" "${suites[@]}"
        return
    fi
    local work status=0
    work=$(mktemp -d /tmp/ptrack-tests.XXXXXX)
    cp -a "$repo/." "$work/tree"
    chown -R ptrack_test "$work"
    runuser -u ptrack_test -- env PTRACK_CAPTURE="$m" make -C "$work/tree" PG_CONFIG="$pg_config" "${suites[@]}" ||
        status=$?
    rm -rf "$repo/test-logs/$m"
    mkdir -p "$repo/test-logs/$m"
    for f in regression.diffs regression.out tmp_check/log results; do
        [ -e "$work/tree/$f" ] && cp -a "$work/tree/$f" "$repo/test-logs/$m/" || true
    done
    rm -rf "$work"
    return $status
}

status=0
if [ "$mode" != wal ]; then
    prefix=${PTRACK_PATCHED_PREFIX:-$(scripts/build-postgres.sh | tail -n 1)}
    run_mode hooks "$prefix/bin/pg_config" "$@" || status=$?
    # A cluster made by Debian's pg_createcluster must start unchanged on the
    # patched server (SSL, ICU, lz4...); needs root.
    if [ "$(id -u)" -eq 0 ]; then
        scripts/test-debian-cluster.sh "$prefix" || status=1
    else
        echo "run-tests: scripts/test-debian-cluster.sh NOT run (it needs root)" >&2
    fi
fi
if [ "$mode" != hooks ]; then
    run_mode wal "$STOCK_PG_CONFIG" "$@" || status=$?
fi
if [ "$package" = 1 ]; then
    # --nocheck: the package build would compile and run the unit tests
    # again (about a minute of CPU); they ran above.
    # With the patched server built above, it also checks that the packaged
    # ptrack.so takes the hooks there.
    pkg_args=(--nocheck)
    [ -n "${prefix:-}" ] && pkg_args+=(--patched "$prefix")
    if [ "$(id -u)" -eq 0 ]; then
        scripts/test-debian-package.sh "${pkg_args[@]}" || status=1
    else
        echo "run-tests: scripts/test-debian-package.sh NOT run: it needs root (dpkg -i in a private mount namespace)" >&2
        status=1
    fi
fi
make -s PG_CONFIG="$STOCK_PG_CONFIG" clean >/dev/null
[ $status -eq 0 ] && echo "run-tests: all suites passed ($mode$([ "$package" = 1 ] && echo ', package'))" >&2
exit $status
