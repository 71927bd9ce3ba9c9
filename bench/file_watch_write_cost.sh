#!/usr/bin/env bash
#
# file_watch_write_cost.sh -- what the WAL follower's file watch costs the
# write path (src/pg/capture/wal/growth_watch.h).
#
# With wal capture the follower watches every relation directory with
# inotify, so every write() of a relation file queues an event in the
# kernel (merged with the previous one when it names the same file) and the
# follower reads them every loop.  Measured on one cluster and one binary in
# three configurations, restarted between runs:
#   none  no shared_preload_libraries
#   off   ptrack, ptrack.capture = wal, ptrack.wal_file_watch = off (every
#         call walks every relation file: the code before the watch)
#   on    the same with the watch on (the default)
# Workload: pgbench random single-row UPDATEs of pgbench_accounts, scale 20
# (about 300 MB) with shared_buffers = 16MB, 4 clients, -M prepared,
# synchronous_commit = off: nearly every transaction evicts a dirty buffer,
# i.e. a backend writes a relation file (one event each).  Rounds in rotating
# order (none off on, on off none, ...), each run preceded by a restart,
# VACUUM, CHECKPOINT and a warm-up; per round the ratios of the TPS (on/off,
# on/none, off/none), reported as the median and range over the rounds.
# Also the follower's CPU per MB of WAL in each run (/proc/PID/stat) and
# the walks it reports (pg_stat_activity).
#
# Usage: bench/file_watch_write_cost.sh [options]
#   --rounds N      rounds of the three configurations (default 4)
#   --duration S    seconds of each measured run (default 15)
#   --warmup S      seconds of warm-up before each run (default 3)
#   --port N        port of the server's socket (default 56193)
#   --keep          keep the temp dir (cluster, logs)
#   --prefix DIR    PostgreSQL prefix (default: PG_PREFIX, else
#                   scripts/build-postgres.sh --print-prefix)
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmdline="$0 $*"
rounds=4
duration=15
warmup=3
port=56193
keep=0
prefix=${PG_PREFIX:-}
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) rounds=${2:?}; shift ;;
        --duration) duration=${2:?}; shift ;;
        --warmup) warmup=${2:?}; shift ;;
        *) common_option "$@" && shift ;;
    esac
    shift
done
for v in "$rounds" "$duration" "$warmup"; do is_int "$v" || die "not a non-negative integer: $v"; done

find_postgres initdb pg_ctl postgres psql pgbench
pg_user_setup
make_work file_watch_write_cost 0755
so_md5=$(md5_of "$pkglib/ptrack.so")

report_header "the file watch's cost to the write path (wal capture): none / watch off / watch on"
report_load
report_postgres
echo "code:       $(tree_rev)"
echo "workload:   pgbench UPDATE pgbench_accounts (random aid), scale 20, shared_buffers 16MB, 4 clients,"
echo "            -M prepared, synchronous_commit off; ${duration}s runs after ${warmup}s warm-up, $rounds rounds"
echo

dd=$work/data
server_initdb "$dd" "$work/initdb.log"
server_conf "$dd" <<EOF
shared_buffers = 16MB
synchronous_commit = off
autovacuum = off
max_wal_size = 4GB
checkpoint_timeout = 30min
wal_level = replica
include_if_exists = 'bench_mode.conf'
EOF
set_mode() {
    case $1 in
        none) printf "shared_preload_libraries = ''\n" ;;
        off) printf "shared_preload_libraries = 'ptrack'\nptrack.map_size = 64MB\nptrack.capture = wal\nptrack.wal_file_watch = off\n" ;;
        on) printf "shared_preload_libraries = 'ptrack'\nptrack.map_size = 64MB\nptrack.capture = wal\nptrack.wal_file_watch = on\n" ;;
    esac | as_pg tee "$dd/bench_mode.conf" >/dev/null
}
set_mode none
server_start "$dd" "$work/server.log" "the server"
load_pgbench 20 "$work/pgbench-i.log"
server_stop "$dd"
as_pg tee "$work/update.sql" >/dev/null <<'EOF'
\set aid random(1, 2000000)
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;
EOF

follower_pid() {
    psql_q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'" | head -n 1
}

run_pgbench() {
    as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -n -M prepared -c 4 -j 2 -f "$work/update.sql" "$@" postgres
}

# one_run CFG ROUND: prints "cfg round tps follower_ms wal_mb walks"
one_run() {
    local cfg=$1 round=$2 pid='' c0=0 c1=0 l0 l1 tps walks=''
    set_mode "$cfg"
    server_start "$dd" "$work/server.log" "the server ($cfg)"
    if [ "$cfg" != none ]; then
        psql_q "CREATE EXTENSION IF NOT EXISTS ptrack" "SELECT ptrack_init_lsn()" >/dev/null
        pid=$(follower_pid)
        [ -n "$pid" ] || die "$cfg: no WAL follower"
    fi
    psql_q "VACUUM pgbench_accounts" "CHECKPOINT" >/dev/null
    run_pgbench -T "$warmup" >"$work/warmup.log" 2>&1 || { cat "$work/warmup.log" >&2; die "warm-up failed"; }
    [ -n "$pid" ] && c0=$(process_cpu_ms "$pid")
    l0=$(psql_q "SELECT pg_current_wal_lsn()")
    run_pgbench -T "$duration" >"$work/run.log" 2>&1 || { cat "$work/run.log" >&2; die "pgbench failed"; }
    l1=$(psql_q "SELECT pg_current_wal_lsn()")
    if [ -n "$pid" ]; then
        psql_q "SELECT ptrack_init_lsn()" >/dev/null    # the follower has applied the run's WAL
        c1=$(process_cpu_ms "$pid")
        walks=$(psql_q "SELECT query FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'" |
            sed -n 's/.*ptrack file watch: \([^,]*\),.*walks: \(.*\)$/\1; \2/p')
    fi
    local mb
    mb=$(psql_q "SELECT round(('$l1'::pg_lsn - '$l0'::pg_lsn) / 1048576.0, 1)")
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$work/run.log" | tail -n 1)
    server_stop "$dd"
    echo "$cfg $round $tps $((c1 - c0)) $mb ${walks:--}"
}

echo "| round | config | TPS | load (1 min) | WAL MB | follower CPU ms | follower ms per MB of WAL | follower's walks |"
echo "|---:|---|---:|---:|---:|---:|---:|---|"
: >"$work/runs"
for ((r = 1; r <= rounds; r++)); do
    case $((r % 3)) in
        1) order="none off on" ;;
        2) order="on off none" ;;
        0) order="off none on" ;;
    esac
    for cfg in $order; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        read -r c rr tps ms mb walks < <(one_run "$cfg" "$r")
        per=$(awk -v m="$ms" -v w="$mb" 'BEGIN { if (w > 0 && m > 0) printf "%.2f", m / w; else print "-" }')
        echo "| $rr | $c | $tps | $load | $mb | $ms | $per | $walks |"
        echo "$rr $c $tps $per" >>"$work/runs"
    done
done
echo
# Per round: on/off, on/none, off/none; median and range.
awk '
    { tps[$1, $2] = $3; if ($2 != "none") per[$2] = per[$2] " " $4; rounds[$1] = 1 }
    function stats(name, list,    n, a, i, j, t) {
        n = split(list, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        printf "%-34s median %.3f  range [%.3f, %.3f]  (%d rounds)\n", name, (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2), a[1], a[n], n
    }
    END {
        for (r in rounds) {
            onoff = onoff " " tps[r, "on"] / tps[r, "off"]
            onnone = onnone " " tps[r, "on"] / tps[r, "none"]
            offnone = offnone " " tps[r, "off"] / tps[r, "none"]
        }
        stats("TPS watch on / watch off:", onoff)
        stats("TPS watch on / no extension:", onnone)
        stats("TPS watch off / no extension:", offnone)
        stats("follower ms per MB of WAL, off:", per["off"])
        stats("follower ms per MB of WAL, on:", per["on"])
    }' "$work/runs"
report_load "at the end"
warn_if_reinstalled
