#!/usr/bin/env bash
#
# size_walk_cost.sh -- what the hooks source's size walk adds to a
# checkpoint (docs/design.md section 3.7).
#
# Before each map save the checkpointer stat()s every relation segment file
# of the cluster and writes ptrack.sizes.new (24 bytes a file); the cost
# grows with the number of files, not with the data.  Measured on one data
# directory holding many small relations, started in turn without ptrack
# (shared_preload_libraries = '') and with it, on the same binaries, in
# ABAB order: the wall time of a forced idle CHECKPOINT (psql, \timing) and
# the checkpointer's CPU time over it (/proc/PID/stat, utime + stime).  The
# first checkpoint after each start is not counted (with ptrack it writes
# the whole map and first-touches it).  With ptrack, an idle checkpoint also
# scans the map for its delta (bench/RESULTS.md, "Checkpoint cost"): the
# run is made at two relation counts, so that the difference between them
# is the walk's share, per file.
#
# Usage: bench/size_walk_cost.sh [options]
#   --relations LIST  relation counts, comma-separated (default 200,10000):
#                     each a table with one row, its primary key index, and
#                     after VACUUM its FSM and VM forks (4 files a table)
#   --reps N          checkpoints measured per start (default 10)
#   --pairs N         ABAB pairs of starts per relation count (default 2)
#   --port N          port of the server's socket (default 56107)
#   --keep            keep the temp dir (cluster, logs)
#   --prefix DIR      PostgreSQL prefix (default: PG_PREFIX, else
#                     scripts/build-postgres.sh --print-prefix)
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmdline="$0 $*"
relations=200,10000
reps=10
pairs=2
port=56107
keep=0
prefix=${PG_PREFIX:-}
while [ $# -gt 0 ]; do
    case $1 in
        --relations) relations=${2:?}; shift ;;
        --reps) reps=${2:?}; shift ;;
        --pairs) pairs=${2:?}; shift ;;
        *) common_option "$@" && shift ;;
    esac
    shift
done
is_int "$reps" && is_int "$pairs" || die "--reps and --pairs take integers"

find_postgres initdb pg_ctl postgres psql
pg_user_setup
make_work size_walk_cost 0755
so_md5=$(md5_of "$pkglib/ptrack.so")

# checkpointer_cpu_ms DATADIR: utime + stime of the checkpointer, in ms.
checkpointer_cpu_ms() {
    local pid
    pid=$(pgrep -P "$(head -n 1 "$1/postmaster.pid")" -f 'checkpointer' | head -n 1)
    process_cpu_ms "$pid"
}

# measure DATADIR: prints "wall_ms cpu_ms" medians of $reps forced CHECKPOINTs (after one not counted).
measure() {
    local dd=$1 walls=() cpus=() i c0 c1 out
    psql_q "CHECKPOINT" >/dev/null
    for ((i = 0; i < reps; i++)); do
        c0=$(checkpointer_cpu_ms "$dd")
        out=$(as_pg "$bin/psql" -X -q -h "$sock" -p "$port" -U postgres -d postgres \
            -c '\timing on' -c 'CHECKPOINT' | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p')
        c1=$(checkpointer_cpu_ms "$dd")
        walls+=("$out")
        cpus+=($((c1 - c0)))
    done
    echo "$(echo "${walls[*]}" | median) $(echo "${cpus[*]}" | median)"
}

report_header "checkpoint cost of the hooks source's size walk"
report_load
report_postgres
echo "code:       $(tree_rev)"
echo
echo "| relations | files | ptrack | CHECKPOINT ms (median) | checkpointer CPU ms (median) |"
echo "|---:|---:|---|---:|---:|"

dd=$work/data
server_initdb "$dd" "$work/initdb.log"
server_conf "$dd" <<EOF
ptrack.map_size = 64MB
checkpoint_timeout = 1h
max_wal_size = 4GB
autovacuum = off
log_checkpoints = on
EOF
made=0
declare -A result
IFS=, read -r -a counts <<<"$relations"
for n in "${counts[@]}"; do
    is_int "$n" || die "--relations takes integers"
    server_start "$dd" "$work/server.log" "the server" -o "-c shared_preload_libraries=''"
    create_small_tables $((made + 1)) "$n"
    made=$((n > made ? n : made))
    psql_q "VACUUM" >/dev/null
    server_stop "$dd"
    files=$(find "$dd/base" "$dd/global" -type f -name '[0-9]*' | wc -l)
    for ((p = 0; p < pairs; p++)); do
        for with in off on; do
            if [ $with = on ]; then spl=ptrack; else spl=''; fi
            server_start "$dd" "$work/server.log" "the server" -o "-c shared_preload_libraries='$spl'"
            read -r wall cpu < <(measure "$dd")
            server_stop "$dd"
            result[$n,$with]+="$wall/$cpu "
            echo "| $n | $files | $with | $wall | $cpu |"
        done
    done
    result[$n,files]=$files
done

echo
echo "Per relation count, the medians over the pairs, and what ptrack adds:"
for n in "${counts[@]}"; do
    off_w=$(tr ' ' '\n' <<<"${result[$n,off]}" | cut -d/ -f1 | median)
    on_w=$(tr ' ' '\n' <<<"${result[$n,on]}" | cut -d/ -f1 | median)
    off_c=$(tr ' ' '\n' <<<"${result[$n,off]}" | cut -d/ -f2 | median)
    on_c=$(tr ' ' '\n' <<<"${result[$n,on]}" | cut -d/ -f2 | median)
    echo "  $n relations (${result[$n,files]} files): CHECKPOINT $off_w -> $on_w ms, checkpointer CPU $off_c -> $on_c ms"
done
if [ "${#counts[@]}" -ge 2 ]; then
    a=${counts[0]} b=${counts[-1]}
    awk -v fa="${result[$a,files]}" -v fb="${result[$b,files]}" \
        -v ca="$(tr ' ' '\n' <<<"${result[$a,on]}" | cut -d/ -f2 | median)" \
        -v cb="$(tr ' ' '\n' <<<"${result[$b,on]}" | cut -d/ -f2 | median)" \
        -v oa="$(tr ' ' '\n' <<<"${result[$a,off]}" | cut -d/ -f2 | median)" \
        -v ob="$(tr ' ' '\n' <<<"${result[$b,off]}" | cut -d/ -f2 | median)" \
        'BEGIN { d = (cb - ob) - (ca - oa); printf "ptrack CPU per checkpoint that grows with the files: %.1f ms for %d more files, %.1f us a file\n", d, fb - fa, d * 1000 / (fb - fa) }'
fi
warn_if_reinstalled
