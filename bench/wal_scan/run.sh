#!/usr/bin/env bash
# bench/wal_scan/run.sh -- what reading a WAL stream costs an in-place
# reader (wal_scan.cpp) against xlogreader (pg_waldump --stats), on the same
# segment files, in CPU ms per MB of WAL; and that both list the same block
# references.
#
# For each pg_wal directory given: wal_scan (built against the prefix's
# headers and its CRC-32C, libpgcommon/libpgport) reads the WAL in 128 KB
# pread()s and mapped; pg_waldump --stats reads it through xlogreader.
# Times are medians of N: `perf stat -e task-clock` of N pg_waldump runs and
# N passes inside wal_scan (getrusage), all over files in the page cache.  The block
# references wal_scan finds must equal pg_waldump's (records, count, an
# order-free digest), else the run fails.
#
# The WAL streams used in bench/RESULTS.md are the templates of
# bench/replay_callgrind.sh (/tmp/ptrack-replay-<major>-<workload>/data/pg_wal).
#
# Usage: bench/wal_scan/run.sh --prefix DIR [--runs N] PG_WAL_DIR...
# Needs g++, perf (Debian's linux-perf) and the prefix's server headers.
set -euo pipefail
export LC_ALL=C

here=$(cd "$(dirname "$0")" && pwd)
prefix='' runs=5 dirs=()
while [ $# -gt 0 ]; do
    case $1 in
    --prefix) prefix=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    -*) echo "usage: $0 --prefix DIR [--runs N] PG_WAL_DIR..." >&2; exit 2 ;;
    *) dirs+=("$1") ;;
    esac
    shift
done
[ -n "$prefix" ] && [ ${#dirs[@]} -gt 0 ] || { echo "usage: $0 --prefix DIR [--runs N] PG_WAL_DIR..." >&2; exit 2; }
pg_config=$prefix/bin/pg_config
[ -x "$pg_config" ] || { echo "run.sh: no $pg_config" >&2; exit 2; }
command -v perf >/dev/null || { echo "run.sh: perf is needed (apt-get install linux-perf)" >&2; exit 2; }

work=$(mktemp -d /tmp/wal-scan.XXXXXX)
trap 'rm -rf "$work"' EXIT
g++ -std=c++17 -O2 -Wall -Wextra -DPTRACK_PG_LAYER -I"$here/../../include" -I"$("$pg_config" --includedir-server)" -o "$work/wal_scan" "$here/wal_scan.cpp" \
    -L"$("$pg_config" --libdir)" -lpgcommon -lpgport

echo "command: bench/wal_scan/run.sh --prefix $prefix --runs $runs ${dirs[*]}"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC'); load $(cut -d' ' -f1-3 /proc/loadavg) at start"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(nproc) cpus"
echo "server:  $("$prefix/bin/postgres" --version)"
printf '%-50s %10s %12s %12s %14s %9s %9s\n' "pg_wal" "MB" "pread ms/MB" "mmap ms/MB" "waldump ms/MB" "pread/wd" "mmap/wd"
status=0
for d in "${dirs[@]}"; do
    segs=$(ls "$d" | grep -E '^[0-9A-F]{24}$' | sort)
    first=$(echo "$segs" | head -1) last=$(echo "$segs" | tail -1)
    [ -n "$first" ] || { echo "run.sh: no segment files in $d" >&2; exit 2; }
    "$prefix/bin/pg_waldump" -p "$d" "$first" "$last" >"$work/waldump.txt" 2>/dev/null || true
    theirs=$("$work/wal_scan" --waldump-digest "$work/waldump.txt")
    pread=$("$work/wal_scan" --passes "$runs" "$d")
    mmap=$("$work/wal_scan" --passes "$runs" --read mmap "$d")
    ours=$(echo "$pread" | head -1 | cut -d' ' -f1-6)
    if [ "$ours" != "$theirs" ]; then
        echo "run.sh: $d: wal_scan found \"$ours\", pg_waldump \"$theirs\"" >&2
        status=1
    fi
    bytes=$(echo "$pread" | head -1 | awk '{print $8}')
    ms=$(for _ in $(seq "$runs"); do
        # pg_waldump exits 1 at the end of valid WAL, which is where it stops here
        { perf stat -x, -e task-clock "$prefix/bin/pg_waldump" --stats -p "$d" "$first" "$last" 2>&1 >/dev/null || true; } |
            awk -F, '/task-clock/ {print $1}'
    done | sort -n | awk '{v[NR] = $1} END {print v[int(NR / 2) + 1]}')
    awk -v d="$d" -v b="$bytes" -v p="$(echo "$pread" | tail -1 | awk '{print $2}')" \
        -v m="$(echo "$mmap" | tail -1 | awk '{print $2}')" -v w="$ms" 'BEGIN {
        mb = b / 1048576; wd = w / mb
        printf "%-50s %10.1f %12.4f %12.4f %14.4f %9.2f %9.2f\n", d, mb, p, m, wd, p / wd, m / wd }'
done
exit $status
