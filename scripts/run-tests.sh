#!/usr/bin/env bash
# run-tests.sh -- the README's test command: builds everything it needs and
# runs every suite (engine unit tests, pg_regress, TAP, and the check that a
# Debian cluster starts on the patched server) against the patched server.
#
# PostgreSQL refuses to run as root, and CI runs as root: in that case the
# server-side suites run as an unprivileged user (ptrack_test, created if
# missing) on a copy of the tree, and their logs are copied back to
# ./test-logs/.  Usage: scripts/run-tests.sh [PROVE_TESTS='t/001_x.pl ...']
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

need_pkgs=()
dpkg -s libgtest-dev >/dev/null 2>&1 || need_pkgs+=(libgtest-dev)
dpkg -s libipc-run-perl >/dev/null 2>&1 || need_pkgs+=(libipc-run-perl)
command -v g++ >/dev/null 2>&1 || need_pkgs+=(g++)
if [ ${#need_pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "run-tests: missing packages: ${need_pkgs[*]} (install them as root)" >&2
        exit 1
    fi
    apt-get install -y --no-install-recommends "${need_pkgs[@]}" >&2
fi

prefix=$(scripts/build-postgres.sh | tail -n 1)
pg_config="$prefix/bin/pg_config"
echo "run-tests: patched server at $prefix" >&2

make -s PG_CONFIG="$pg_config" unittest
make -s PG_CONFIG="$pg_config" install

suites=(installcheck installcheck-off "$@")
if [ "$(id -u)" -ne 0 ]; then
    make PG_CONFIG="$pg_config" "${suites[@]}"
    echo "run-tests: scripts/test-debian-cluster.sh NOT run (it needs root)" >&2
    exit 0
fi

id ptrack_test >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash ptrack_test
work=$(mktemp -d /tmp/ptrack-tests.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -a "$repo/." "$work/tree"
chown -R ptrack_test "$work"
status=0
runuser -u ptrack_test -- make -C "$work/tree" PG_CONFIG="$pg_config" "${suites[@]}" || status=$?
# A cluster made by Debian's pg_createcluster must start unchanged on the
# patched server (SSL, ICU, lz4...).
scripts/test-debian-cluster.sh "$prefix" || status=1
rm -rf "$repo/test-logs"
mkdir -p "$repo/test-logs"
for f in regression.diffs regression.out tmp_check/log results; do
    [ -e "$work/tree/$f" ] && cp -a "$work/tree/$f" "$repo/test-logs/" || true
done
exit $status
