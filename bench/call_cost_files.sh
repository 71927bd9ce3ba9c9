#!/usr/bin/env bash
#
# call_cost_files.sh -- what one ptrack_init_lsn() and one
# ptrack_get_pagemapset(L) cost with wal capture on a cluster of many small
# relation files (issue 21: "under 100 ms beyond reading the summaries" at
# 20,000 and 100,000 files).
#
# The cost of a call has two parts: the backend's answer, and the follower's
# work the call waits for (the freshness wait, and with summaries the cut
# it requests).  A walk of every relation file, where one is made per call,
# grows with the number of files, not with the change; that is what this
# script shows.  Per relation count: N tables with one row and a primary
# key, VACUUMed (4 files a table: heap, index, FSM, VM); CHECKPOINT; L =
# the redo LSN of that checkpoint; one row updated in 1% of the tables;
# then, per answer source, C calls of each function, timed by psql
# (\timing, wall ms) in one session, and the follower's CPU over the C calls
# (/proc/PID/stat).  The answer sources are the values of the developer GUC
# ptrack.wal_answer_source of earlier builds (summaries: from the summary
# files; map: from the shared map); this build answers from the summaries
# only ("default"), and a source the build does not know is skipped.  Medians.
# Per answer source, each value of --watch: the developer GUC
# ptrack.wal_file_watch (off: every call walks every relation file; on: the
# follower's inotify watch, a call stat()s only the files changed since the
# previous walk; src/pg/capture/wal/growth_watch.h), switched by ALTER
# SYSTEM and a reload in the same server; the follower's pg_stat_activity
# row shows the walks ("walks: N watched, M full"), reported per run.
#
# Usage: bench/call_cost_files.sh [options]
#   --relations LIST  table counts, comma-separated (default 5000,25000:
#                     about 20,000 and 100,000 files)
#   --calls N         calls of each function per source (default 7)
#   --sources LIST    answer sources (default "default": no SET; earlier
#                     builds: summaries,map)
#   --watch LIST      values of ptrack.wal_file_watch (default "default": not
#                     set; e.g. off,on; a build without the GUC: skipped)
#   --port N          port of the server's socket (default 56109)
#   --keep            keep the temp dir (cluster, logs)
#   --prefix DIR      PostgreSQL prefix (default: PG_PREFIX, else
#                     scripts/build-postgres.sh --print-prefix)
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmdline="$0 $*"
relations=5000,25000
calls=7
sources=default
watches=default
port=56109
keep=0
prefix=${PG_PREFIX:-}
while [ $# -gt 0 ]; do
    case $1 in
        --relations) relations=${2:?}; shift ;;
        --calls) calls=${2:?}; shift ;;
        --sources) sources=${2:?}; shift ;;
        --watch) watches=${2:?}; shift ;;
        *) common_option "$@" && shift ;;
    esac
    shift
done
is_int "$calls" && [ "$calls" -ge 1 ] || die "--calls takes a positive integer"

find_postgres initdb pg_ctl postgres psql
pg_user_setup
make_work call_cost_files 0755
so_md5=$(md5_of "$pkglib/ptrack.so")

# follower_cpu_ms: utime + stime of the ptrack WAL follower, in ms.
follower_cpu_ms() {
    local pid
    pid=$(pgrep -P "$(head -n 1 "$dd/postmaster.pid")" -f 'ptrack WAL follower' | head -n 1)
    [ -n "$pid" ] || die "no ptrack WAL follower process"
    process_cpu_ms "$pid"
}

# timed SQL...: the wall times (ms) psql reports for each statement, in one session.
timed() {
    local args=(-c '\timing on') s
    for s in "$@"; do args+=(-c "$s"); done
    as_pg "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres -d postgres "${args[@]}" |
        sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
}

report_header "cost of one call against the number of relation files (wal capture)"
report_load
report_postgres
echo "code:       $(tree_rev)"
echo
echo "| tables | files | source | file watch | rows listed | ptrack_init_lsn() ms | ptrack_get_pagemapset(L) ms | follower CPU per pagemapset call, ms | follower's walks after the run |"
echo "|---:|---:|---|---|---:|---:|---:|---:|---|"

# follower_walks: the walks the follower reports in its pg_stat_activity row ("" if it reports none).
follower_walks() {
    psql_q "SELECT query FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'" |
        sed -n 's/.*ptrack file watch: \([^,]*\),.*walks: \(.*\)$/\1; \2/p'
}

# set_watch VALUE: ptrack.wal_file_watch = VALUE ("default": RESET) and a reload; false if the GUC is unknown.
set_watch() {
    local stmt="ALTER SYSTEM SET ptrack.wal_file_watch = '$1'"
    [ "$1" = default ] && stmt="ALTER SYSTEM RESET ptrack.wal_file_watch"
    psql_q "$stmt" "SELECT pg_reload_conf()" >/dev/null 2>&1 || return 1
    sleep 0.5
    # Two calls: the first after switching on is a full walk (it arms the watch).
    psql_q "SELECT ptrack_init_lsn()" "SELECT ptrack_init_lsn()" >/dev/null
}

dd=$work/data
server_initdb "$dd" "$work/initdb.log"
server_conf "$dd" <<EOF
shared_preload_libraries = 'ptrack'
ptrack.map_size = 64MB
ptrack.capture = wal
wal_level = replica
checkpoint_timeout = 1h
max_wal_size = 4GB
autovacuum = off
max_locks_per_transaction = 1024
EOF
server_start "$dd" "$work/server.log" "the server"
psql_q "CREATE EXTENSION ptrack" >/dev/null
made=0
IFS=, read -r -a counts <<<"$relations"
IFS=, read -r -a srcs <<<"$sources"
IFS=, read -r -a watch_values <<<"$watches"
for n in "${counts[@]}"; do
    is_int "$n" || die "--relations takes integers"
    create_small_tables $((made + 1)) "$n"
    made=$((n > made ? n : made))
    psql_q "VACUUM" "CHECKPOINT" >/dev/null
    files=$(find "$dd/base" "$dd/global" -type f -name '[0-9]*' | wc -l)
    lsn=$(psql_q "SELECT redo_lsn FROM pg_control_checkpoint()")
    psql_q "DO \$\$ BEGIN FOR i IN 1..$n BY 100 LOOP
              EXECUTE format('UPDATE w_%s SET v = v + 1', i);
            END LOOP; END \$\$" >/dev/null
    for src in "${srcs[@]}"; do
        for watch in "${watch_values[@]}"; do
            set_src="SET ptrack.wal_answer_source = '$src'"
            [ "$src" = default ] && set_src="SELECT 'the build''s default answer source'"
            if ! psql_q "$set_src" >/dev/null 2>&1; then
                echo "| $n | $files | $src | $watch | (this build has no such answer source) | | | | |"
                continue
            fi
            if ! set_watch "$watch"; then
                echo "| $n | $files | $src | $watch | (this build has no ptrack.wal_file_watch) | | | | |"
                continue
            fi
            rows=$(psql_q "$set_src" "SELECT count(*) FROM ptrack_get_pagemapset('$lsn')" | tail -n 1)
            q_init=() q_map=()
            for ((i = 0; i < calls; i++)); do
                q_init+=("SELECT ptrack_init_lsn()")
                q_map+=("SELECT count(*) FROM ptrack_get_pagemapset('$lsn')")
            done
            init=$(timed "$set_src" "${q_init[@]}" | median)
            c0=$(follower_cpu_ms)
            mapset=$(timed "$set_src" "${q_map[@]}" | median)
            c1=$(follower_cpu_ms)
            cpu=$(awk -v a="$c0" -v b="$c1" -v c="$calls" 'BEGIN { printf "%.1f", (b - a) / c }')
            echo "| $n | $files | $src | $watch | $rows | $init | $mapset | $cpu | $(follower_walks) |"
        done
    done
done
server_stop "$dd"
warn_if_reinstalled
