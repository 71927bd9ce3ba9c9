#!/usr/bin/env bash
#
# wal_follower.sh -- what does the WAL follower (wal capture) cost, and does
# it keep up?
#
# On Debian's stock PostgreSQL 15 (no core hooks, so ptrack captures from the
# WAL), one cluster with ptrack preloaded (64 MB map), pgbench -i at --scale,
# then pgbench tpcb-like at full speed (--clients, -M prepared) for
# --duration seconds while a second session measures, every 0.5 s, how long
# ptrack_init_lsn() takes to answer: it waits until the follower has applied
# the WAL flushed at the call and looked at the files' sizes (the freshness
# wait every answer of ptrack makes), so that time is the follower's lag as a
# backup tool sees it.  Reported:
#
#   - the follower's CPU (user + system, from /proc/<pid>/stat) per MB of WAL
#     written during the run (reference: PostgreSQL 17's WAL summarizer, about
#     3 ms of CPU per MB under pgbench tpcb-like with 4 clients);
#   - the lag samples: median, 95th percentile, maximum;
#   - after the run, the time of ptrack_get_pagemapset(L) right after a burst
#     of writes (an UPDATE of 1/50 of pgbench_accounts), wait included.
#
# The TPS cost of the follower against no extension on the same binary is
# measured by bench/pgbench_overhead.sh --prefix /usr/lib/postgresql/15.
#
# Usage: bench/wal_follower.sh [options]
#   --duration S    seconds of pgbench (default 60)
#   --clients N     pgbench clients (default 4)
#   --scale N       pgbench scale (default 10)
#   --no-probe      no lag probe: the follower's CPU alone (each probe also makes
#                   it walk the relation files once)
#   --port N        port number of the server's socket (default 55460)
#   --keep          keep the temp dir at the end
#   --prefix DIR    PostgreSQL prefix (default /usr/lib/postgresql/15)
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

probe=1 duration=60 clients=4 scale=10 port=55460 keep=0 prefix=${PG_PREFIX:-/usr/lib/postgresql/15}
cmdline=$(printf '%q ' "$0" "$@")
while [ $# -gt 0 ]; do
    case $1 in
        --duration) duration=${2:?}; shift ;;
        --clients) clients=${2:?}; shift ;;
        --scale) scale=${2:?}; shift ;;
        --no-probe) probe=0 ;;
        *) common_option "$@" && shift ;;
    esac
    shift
done
for v in "$duration" "$clients" "$scale" "$port"; do
    is_int "$v" || die "not a non-negative integer: $v"
done

find_postgres postgres pg_ctl initdb pgbench psql pg_config
pg_user_setup
make_work ptrack-wal-follower 700
cd "$work"

dd="$work/data"
server_initdb "$dd" "$work/initdb.log"
server_conf "$dd" <<EOF
shared_preload_libraries = 'ptrack'
ptrack.map_size = 64MB
shared_buffers = 256MB
max_wal_size = 2GB
synchronous_commit = off
EOF
server_start "$dd" "$work/server.log" "the server"
[ "$(psql_q 'SHOW ptrack.capture')" = wal ] || die "ptrack does not capture from the WAL on $prefix"
psql_q 'CREATE EXTENSION ptrack' >/dev/null
load_pgbench "$scale" "$work/pgbench-init.log"
psql_q 'CHECKPOINT' >/dev/null

follower=$(psql_q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'")
is_int "$follower" || die "no WAL follower found"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks_per_s=$(getconf CLK_TCK)

report_header "the WAL follower's CPU per MB of WAL and its lag"
report_load
report_postgres
echo "workload:   pgbench tpcb-like -M prepared, scale $scale, $clients clients, ${duration} s; 64 MB map"

lsn0=$(psql_q 'SELECT pg_current_wal_lsn()')
cpu0=$(cpu_ticks "$follower")
as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -n -M prepared -c "$clients" -j "$clients" \
    -T "$duration" postgres >"$work/pgbench.log" 2>&1 &
bench_pid=$!
: >"$work/lag.txt"
sleep 2
while [ "$probe" -eq 1 ] && kill -0 "$bench_pid" 2>/dev/null; do
    # Milliseconds of one freshness wait, measured in the server.
    as_pg "$bin/psql" -X -h "$sock" -p "$port" -U postgres -d postgres -Atq -c \
        "SELECT round(extract(epoch FROM clock_timestamp() - now()) * 1000) FROM (SELECT ptrack_init_lsn()) s" \
        >>"$work/lag.txt" 2>/dev/null || true
    sleep 0.5
done
wait "$bench_pid" || die "pgbench failed: $(tail -3 "$work/pgbench.log")"
cpu1=$(cpu_ticks "$follower")
lsn1=$(psql_q 'SELECT pg_current_wal_lsn()')
wal_mb=$(psql_q "SELECT round((pg_wal_lsn_diff('$lsn1', '$lsn0') / 1048576)::numeric, 1)")
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.log" | head -1)
cpu_ms=$(( (cpu1 - cpu0) * 1000 / ticks_per_s ))
echo "pgbench:    $tps TPS; $wal_mb MB of WAL"
echo "follower:   $cpu_ms ms of CPU = $(awk -v c="$cpu_ms" -v w="$wal_mb" 'BEGIN { printf "%.2f", c / w }') ms per MB of WAL (PID $follower, user + system)"
sort -g "$work/lag.txt" >"$work/lag.sorted"
n=$(wc -l <"$work/lag.sorted")
p95=$(awk -v n="$n" 'NR == int(n * 0.95 + 0.5) { print; exit }' "$work/lag.sorted")
[ "$n" -gt 0 ] && echo "lag:        $n samples of the freshness wait: median $(median <"$work/lag.sorted") ms, p95 ${p95:--} ms, max $(tail -1 "$work/lag.sorted") ms"

# pagemapset right after a burst.
lsn_l=$(psql_q 'SELECT pg_current_wal_lsn()')
t=$(psql_q "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 50 = 0" \
    "SELECT round(extract(epoch FROM clock_timestamp() - now()) * 1000) || ' ' || count(*) || ' ' || sum(pagecount) FROM ptrack_get_pagemapset('$lsn_l')" | tail -1)
echo "burst:      ptrack_get_pagemapset() right after UPDATE of 2% of pgbench_accounts: ${t%% *} ms (wait included), ${t#* } (files pages)"
echo "tree:       $(tree_rev)"
