#!/usr/bin/env bash
#
# replay_callgrind.sh -- instructions the WAL follower (and, on PostgreSQL 17
# and later, the WAL summarizer) spend per MB of one fixed WAL stream, under
# callgrind: a measure that a loaded machine does not disturb, for comparing
# builds of ptrack on the very same WAL.
#
# How.  Once per (server, workload), a template: a cluster with ptrack
# preloaded (ptrack.capture = wal) and, on 17 and later, summarize_wal = on
# runs the workload's setup, a CHECKPOINT, then holds the follower
# (ptrack.wal_batch_delay, so that it applies almost nothing) while the
# workload writes its WAL, and stops (fast).  Its data directory keeps that
# WAL (the follower's slot, wal_keep_size), the follower resumes at the point
# it had applied, and the summaries the summarizer wrote from the checkpoint
# on are removed, so that it summarizes that WAL again.  Each replay copies the
# template, starts the server under valgrind --tool=callgrind (every process,
# one output file per process), waits until the follower has applied the
# workload's WAL and the summarizer has read it, and stops.  The follower's
# and the summarizer's instructions (Ir) are read from their output files:
# the whole process, and the part spent in its main loop's WAL work.
#
# Workloads (bench/vs_summarizer.sh runs the same ones, see workload_run in
# bench/lib.sh):
#   tpcb    pgbench tpcb-like -M prepared, 4 clients, --transactions each, scale 10
#   copy    a bulk load: pgbench -i -s --copy-scale (COPY, CREATE INDEX, VACUUM)
#   update  single-row UPDATEs of pgbench_accounts (scale 20) with
#           shared_buffers = 32MB, 4 clients, --transactions each
#
# Usage: bench/replay_callgrind.sh --prefix DIR --workload W [options]
#   --workload W        tpcb, copy or update
#   --template DIR      where the template lives (default /tmp/ptrack-replay-<major>-<W>);
#                       made if absent, reused if present (--remake: made again)
#   --transactions N    per client, tpcb and update (default 5000)
#   --copy-scale N      pgbench scale of the copy workload (default 10)
#   --runs N            replays (default 1)
#   --port N            port number of the server's socket (default 55480)
#   --keep              keep the temp dir (with the callgrind files) at the end
#   --prefix DIR        PostgreSQL prefix with ptrack installed
# The extension must be installed into that prefix (make PG_CONFIG=DIR/bin/pg_config install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

workload='' template='' remake=0 transactions=5000 copy_scale=10 runs=1 port=55480 keep=0 prefix=${PG_PREFIX:-}
cmdline=$(printf '%q ' "$0" "$@")
while [ $# -gt 0 ]; do
    case $1 in
        --workload) workload=${2:?}; shift ;;
        --template) template=${2:?}; shift ;;
        --remake) remake=1 ;;
        --transactions) transactions=${2:?}; shift ;;
        --copy-scale) copy_scale=${2:?}; shift ;;
        --runs) runs=${2:?}; shift ;;
        *) common_option "$@" && shift ;;
    esac
    shift
done
for v in "$transactions" "$copy_scale" "$runs" "$port"; do
    is_int "$v" || die "not a non-negative integer: $v"
done
workload_check "$workload"
[ -n "$prefix" ] || die "--prefix DIR is required"
command -v valgrind >/dev/null || die "valgrind is not installed"

find_postgres postgres pg_ctl initdb pgbench psql pg_config pg_isready
major=$("$bin/pg_config" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
summarizer=0
[ "${major:-0}" -ge 17 ] && summarizer=1
pg_user_setup
make_work ptrack-replay 755
template=${template:-/tmp/ptrack-replay-$major-$workload}
so_md5=$(md5_of "$pkglib/ptrack.so")

# --- the template ------------------------------------------------------------

make_template() {
    local dd=$template/data lsn_from lsn_to redo
    rm -rf "$template"
    mkdir -p "$template"
    [ "$(id -u)" -eq 0 ] && chown "$pguser" "$template"
    server_initdb "$dd" "$template/initdb.log"
    {
        follower_conf
        echo "max_wal_size = 8GB"
        echo "wal_keep_size = 8GB"
        echo "checkpoint_timeout = 1h"
        echo "synchronous_commit = off"
        echo "autovacuum = off"
        workload_conf "$workload"
    } | server_conf "$dd"
    workload_start "$dd" "$template/server.log" "$workload" "$template"
    redo=$(checkpoint_redo)
    psql_q 'SELECT ptrack_init_lsn()' >/dev/null
    # The follower applies one batch more at most, then waits: its slot keeps the rest.
    psql_q 'ALTER SYSTEM SET ptrack.wal_batch_delay = 60000' 'SELECT pg_reload_conf()' >/dev/null
    sleep 1
    psql_q 'CREATE TABLE replay_nudge AS SELECT 1 AS x' >/dev/null
    sleep 1
    lsn_from=$(psql_q 'SELECT pg_current_wal_lsn()')
    workload_run "$workload" "$template"
    lsn_to=$(psql_q 'SELECT pg_current_wal_lsn()')
    psql_q 'ALTER SYSTEM RESET ptrack.wal_batch_delay' >/dev/null
    # Where the follower resumes: it saves what it applied when it stops (it waits, applying nothing).
    follower_from=$(psql_q 'SELECT follower_lsn FROM ptrack_status()')
    server_stop "$dd"
    if [ "$summarizer" = 1 ]; then
        # Summaries from the checkpoint on go: the summarizer reads that WAL again.
        local f start
        for f in "$dd"/pg_wal/summaries/*.summary; do
            [ -e "$f" ] || continue
            start=$(basename "$f" | cut -c9-24)
            [ "$((16#$start))" -ge "$(lsn_int "$redo")" ] && rm -f "$f"
        done
    fi
    printf 'redo=%s\nfrom=%s\nto=%s\nfollower_from=%s\n' "$redo" "$lsn_from" "$lsn_to" "$follower_from" \
        >"$template/lsns"
}

# lsn_int X/Y: the LSN as a decimal integer.
lsn_int() { local hi=${1%/*} lo=${1#*/}; echo $(((16#$hi << 32) + 16#$lo)); }

if [ "$remake" = 1 ] || [ ! -e "$template/lsns" ]; then
    make_template
fi
# shellcheck disable=SC1091
. "$template/lsns"
# the variables redo, from, to, follower_from: the follower reads from
# follower_from, the summarizer from redo; the figures are per MB of each one's WAL up to `to`.
mb_between() { awk -v a="$(lsn_int "$1")" -v b="$(lsn_int "$2")" 'BEGIN { printf "%.1f", (b - a) / 1048576 }'; }
wal_mb=$(mb_between "$from" "$to")
f_mb=$(mb_between "$follower_from" "$to")
s_mb=$(mb_between "$redo" "$to")

# --- the replays ---------------------------------------------------------------

# Only the follower's and the summarizer's main functions are measured
# (--toggle-collect): a process's total is its own work since it started.
# ir_total FILE: that total; ir_inclusive FILE FUNCTION_REGEX: inclusive Ir
# of the first function matching.
ir_total() { sed -n 's/^totals: \([0-9]*\).*/\1/p' "$1" | head -1; }
ir_inclusive() {
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk -v re="$2" '!found && $0 ~ re { gsub(",", "", $1); print $1; found = 1 }'
}

report_header "instructions per MB of one fixed WAL stream, under callgrind"
report_load
report_postgres
echo "workload:   $(workload_describe "$workload"); its WAL $from .. $to, $wal_mb MB (template $template)"
echo "reads:      the follower from $follower_from ($f_mb MB)$([ "$summarizer" = 1 ] && echo ", the summarizer from $redo ($s_mb MB)")"

for run in $(seq 1 "$runs"); do
    rd=$work/run$run
    mkdir -p "$rd"
    cp -a "$template/data" "$rd/data"
    [ "$(id -u)" -eq 0 ] && chown -R "$pguser" "$rd"
    rm -f "$rd/data/postmaster.pid"
    # Started directly (not through pg_ctl), so that valgrind is the postmaster's parent of nothing.
    as_pg bash -c "cd '$rd' && exec valgrind --tool=callgrind --callgrind-out-file='$rd/cg.%p' \
        --collect-atstart=no --toggle-collect=ptrack_wal_follower_main --toggle-collect=WalSummarizerMain \
        '$bin/postgres' -D '$rd/data' -c port=$port \
        -c unix_socket_directories='$sock' -c autovacuum=off >'$rd/server.log' 2>&1" &
    running_dd=$rd/data
    for i in $(seq 1 600); do
        "$bin/pg_isready" -q -h "$sock" -p "$port" && break
        [ "$i" = 600 ] && die "the server under valgrind did not start in 300 s: $(tail -5 "$rd/server.log")"
        sleep 0.5
    done
    # Until both have read the workload's WAL (polling is cheap: ptrack_status() never waits).
    for i in $(seq 1 3600); do
        done_f=$(psql_q "SELECT follower_lsn >= '$to' FROM ptrack_status()")
        done_s=t
        [ "$summarizer" = 1 ] && done_s=$(psql_q "SELECT pending_lsn >= '$to' FROM pg_get_wal_summarizer_state()")
        [ "$done_f" = t ] && [ "$done_s" = t ] && break
        [ "$i" = 3600 ] && die "the replay did not finish in 30 min"
        sleep 0.5
    done
    follower_pid=$(psql_q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'")
    summarizer_pid=''
    [ "$summarizer" = 1 ] && summarizer_pid=$(psql_q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walsummarizer'")
    server_stop "$rd/data"
    wait || true
    f_file=$rd/cg.$follower_pid
    [ -s "$f_file" ] || die "no callgrind output of the follower ($f_file)"
    f_total=$(ir_total "$f_file")
    f_loop=$(ir_inclusive "$f_file" "XLogReadRecord ")
    per_mb() { awk -v t="${1:-0}" -v w="$2" 'BEGIN { printf "%.0f", t / w / 1000 }'; }
    line="replay $workload PG$major run $run: follower $(per_mb "$f_total" "$f_mb") kIr/MB (XLogReadRecord $(per_mb "$f_loop" "$f_mb"))"
    if [ -n "$summarizer_pid" ]; then
        s_file=$rd/cg.$summarizer_pid
        [ -s "$s_file" ] || die "no callgrind output of the summarizer ($s_file)"
        s_total=$(ir_total "$s_file")
        s_loop=$(ir_inclusive "$s_file" "XLogReadRecord ")
        line+="; summarizer $(per_mb "$s_total" "$s_mb") kIr/MB (XLogReadRecord $(per_mb "$s_loop" "$s_mb"))"
        line+="; ratio per MB $(awk -v f="$f_total" -v s="$s_total" -v fm="$f_mb" -v sm="$s_mb" 'BEGIN { printf "%.3f", (f / fm) / (s / sm) }')"
    fi
    echo "$line"
    cp "$f_file" "$work/follower.run$run.callgrind"
    [ -n "$summarizer_pid" ] && cp "$s_file" "$work/summarizer.run$run.callgrind"
    rm -rf "$rd/data"
done
warn_if_reinstalled
echo "tree:       $(tree_rev)"
echo "callgrind:  $work/*.callgrind (kept with --keep)"
