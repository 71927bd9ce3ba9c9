#!/usr/bin/env bash
#
# server_cpu.sh -- the whole server's CPU added by WAL capture on a bulk-load
# job: the user + system time of the postmaster and every process it ran
# (its rusage, which counts the children it reaped), with ptrack capturing
# from the WAL against the same server without ptrack, interleaved.
#
# How: per round, two runs in ABBA order (off, wal; then wal, off): a copy of
# one initdb'd cluster, shared_buffers = --shared-buffers, started under
# /usr/bin/time (wait4: the postmaster's rusage including its reaped
# children); the job: pgbench -i -s --scale, then --transactions tpcb-like
# transactions over 4 clients; with ptrack, the job ends once the follower
# has applied the WAL (ptrack_status(), which never waits or walks); then a
# fast stop.  The CPU of a run is user + system of that whole server.
# Reported: each run, the medians, and the overhead median(wal) /
# median(off) - 1 and the median of the per-round ratios; also the WAL
# follower's own CPU in each wal run (/proc/<pid>/schedstat, read once it
# has applied the job's WAL) as a share of that run's server CPU: the part of
# the difference that is the follower's, which a loaded machine's noise in
# the two totals does not hide.
#
# Usage: bench/server_cpu.sh --prefix DIR [options]
#   --rounds N          rounds of two runs (default 4)
#   --scale N           pgbench -i scale (default 50)
#   --transactions N    tpcb-like transactions after the load, in all (default 10000)
#   --shared-buffers S  (default 32MB)
#   --wal-conf LINE     a line added to the wal runs' postgresql.conf, e.g.
#                       'ptrack.wal_file_watch = off' (repeatable)
#   --port N            port number of the server's socket (default 55475)
#   --keep              keep the temp dir at the end
#   --prefix DIR        PostgreSQL prefix whose postgres runs without the core hooks
#                       (Debian's 15, or a build's postgres-nohooks copied as postgres)
# The extension must be installed into that prefix (make PG_CONFIG=DIR/bin/pg_config install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rounds=4 scale=50 transactions=10000 shared_buffers=32MB port=55475 keep=0 prefix=${PG_PREFIX:-} wal_conf=
cmdline=$(printf '%q ' "$0" "$@")
while [ $# -gt 0 ]; do
    case $1 in
        --rounds) rounds=${2:?}; shift ;;
        --scale) scale=${2:?}; shift ;;
        --transactions) transactions=${2:?}; shift ;;
        --shared-buffers) shared_buffers=${2:?}; shift ;;
        --wal-conf) wal_conf+="${2:?}"$'\n'; shift ;;
        *) common_option "$@" && shift ;;
    esac
    shift
done
for v in "$rounds" "$scale" "$transactions" "$port"; do
    is_int "$v" || die "not a non-negative integer: $v"
done
[ -n "$prefix" ] || die "--prefix DIR is required"
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (Debian package time)"

find_postgres postgres pg_ctl initdb pgbench psql pg_config pg_isready
pg_user_setup
make_work ptrack-server-cpu 755
cd "$work"
so_md5=$(md5_of "$pkglib/ptrack.so")

server_initdb "$work/pristine" "$work/initdb.log"
server_conf "$work/pristine" <<EOF
shared_buffers = $shared_buffers
max_wal_size = 4GB
EOF

# run_once MODE: one run of the job (MODE off or wal); prints the server's CPU
# seconds and the follower's (0 without ptrack).
run_once() {
    local mode=$1 dd=$work/data-$1 out=$work/time-$1 lsn i follower_ns=0 follower
    rm -rf "$dd"
    cp -a "$work/pristine" "$dd"
    if [ "$mode" = wal ]; then
        printf "shared_preload_libraries = 'ptrack'\nptrack.capture = wal\nptrack.map_size = 64MB\n%s" "$wal_conf" |
            as_pg tee -a "$dd/postgresql.conf" >/dev/null
    fi
    as_pg /usr/bin/time -o "$out" -f '%U %S' "$bin/postgres" -D "$dd" >"$work/server-$mode.log" 2>&1 &
    running_dd=$dd
    for i in $(seq 1 300); do
        "$bin/pg_isready" -q -h "$sock" -p "$port" -U postgres && break
        [ "$i" = 300 ] && die "the server ($mode) did not start"
        sleep 0.2
    done
    if [ "$mode" = wal ]; then
        [ "$(psql_q 'SHOW ptrack.capture')" = wal ] || die "ptrack does not capture from the WAL on $prefix"
        psql_q 'CREATE EXTENSION ptrack' >/dev/null
    fi
    load_pgbench "$scale" "$work/pgbench-init.log"
    as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -n -c 4 -j 4 -t $((transactions / 4)) postgres \
        >"$work/pgbench.log" 2>&1 || die "pgbench failed: $(tail -3 "$work/pgbench.log")"
    if [ "$mode" = wal ]; then
        lsn=$(psql_q 'SELECT pg_current_wal_lsn()')
        for i in $(seq 1 600); do
            [ "$(psql_q "SELECT follower_lsn >= '$lsn' FROM ptrack_status()")" = t ] && break
            [ "$i" = 600 ] && die "the follower did not reach $lsn in 120 s"
            sleep 0.2
        done
        follower=$(psql_q "SELECT follower_pid FROM ptrack_status()")
        follower_ns=$(process_cpu_ns "$follower")
    fi
    as_pg "$bin/pg_ctl" -D "$dd" -w -m fast stop >/dev/null
    running_dd=''
    wait
    awk -v f="$follower_ns" '{ printf "%.2f %.3f\n", $1 + $2, f / 1e9 }' "$out"
}

report_header "whole-server CPU (postmaster and children, rusage) of a bulk-load job, with and without WAL capture"
report_load
report_postgres
echo "job:        pgbench -i -s $scale, then $transactions tpcb-like transactions (4 clients); shared_buffers = $shared_buffers"
: >"$work/results.txt"
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="off wal"; else order="wal off"; fi
    declare -A cpu=() fcpu=()
    for m in $order; do
        read -r cpu[$m] fcpu[$m] < <(run_once "$m")
    done
    echo "round $r:    off ${cpu[off]} s, wal ${cpu[wal]} s, of which the follower ${fcpu[wal]} s" \
         "($(awk -v f="${fcpu[wal]}" -v t="${cpu[wal]}" 'BEGIN { printf "%.1f%%", 100 * f / t }')) (order: $order; load $(cut -d' ' -f1 /proc/loadavg))"
    echo "${cpu[off]} ${cpu[wal]} ${fcpu[wal]}" >>"$work/results.txt"
done
med() { sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
off_med=$(cut -d' ' -f1 "$work/results.txt" | med)
wal_med=$(cut -d' ' -f2 "$work/results.txt" | med)
ratio_med=$(awk '{ printf "%.4f\n", $2 / $1 }' "$work/results.txt" | med)
echo "result:     whole-server CPU, median of $rounds: off $off_med s, wal $wal_med s:" \
     "$(awk -v a="$off_med" -v b="$wal_med" 'BEGIN { printf "%+.1f%%", (b / a - 1) * 100 }') (median of the round ratios $ratio_med;" \
     "range $(awk '{ printf "%.3f\n", $2 / $1 }' "$work/results.txt" | sort -g | sed -n '1p;$p' | tr '\n' ' ' | sed 's/ $//; s/ /-/'));" \
     "the follower's own CPU: median $(awk '{ printf "%.4f\n", $3 / $2 }' "$work/results.txt" | med | awk '{ printf "%.1f%%", $1 * 100 }') of the wal runs' server CPU" \
     "(range $(awk '{ printf "%.1f\n", 100 * $3 / $2 }' "$work/results.txt" | sort -g | sed -n '1p;$p' | tr '\n' ' ' | sed 's/ $//; s/ /-/')%); load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
warn_if_reinstalled
echo "tree:       $(tree_rev)"
