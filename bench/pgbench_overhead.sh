#!/usr/bin/env bash
#
# pgbench_overhead.sh -- what does loading ptrack cost a running server?
#
# Runs pgbench against one and the same patched PostgreSQL binary in two
# configurations and compares their throughput:
#   A  baseline: no shared_preload_libraries (the core hooks stay NULL)
#   B  shared_preload_libraries = 'ptrack', ptrack.map_size = 64 MB (or the
#      sizes given with --map-size), so every block write and extension goes
#      through the ptrack hooks and marks the map
#
# The constraint that shaped it: the machines are shared and noisy, identical
# 15-second runs differ by 15-30%, and the noise drifts.  A single A run
# against a single B run says nothing.  So each workload gets one cluster,
# initialised once, and the server is restarted between runs with the other
# configuration (same data, only a conf include file changes); runs come in
# pairs in ABBA order (A B, B A, A B, ...) so a linear drift cancels; only the
# two runs of one pair are compared (ratio B/A); and the figure reported is
# the median of those ratios with a bootstrap 95% interval
# (bench/ratio_summary.pl).  Each run is preceded by a restart, a VACUUM and
# CHECKPOINT where the workload writes, and a short pgbench warm-up; a
# writing workload also gets one unmeasured conditioning run after pgbench -i.
# B loads a pinned hard link of the installed ptrack.so, so that a `make
# install` by someone else in the middle of a series cannot mix two builds.
#
# Workloads:
#   select-only   pgbench -S, 8 clients; data fits shared_buffers, so almost
#                 nothing is written: measures the cost of merely loading ptrack
#   tpcb-like     pgbench built-in tpcb-like, 4 clients; data fits
#                 shared_buffers, writes are WAL + relation extension
#   evict-update  shared_buffers = 16MB, scale 20 (~300 MB of data in the OS
#                 page cache), random single-row UPDATEs of pgbench_accounts,
#                 4 clients: nearly every transaction evicts a dirty buffer,
#                 i.e. a backend or the bgwriter calls mdwrite() -- exactly
#                 where the hook runs
# All workloads use synchronous_commit = off and -M prepared, so that commit
# fsyncs and query parsing do not hide the write path's CPU cost.
#
# Run as root (servers and pgbench then run as the unprivileged user
# ptrack_test through runuser, as PostgreSQL refuses root) or as a normal
# user.  Servers listen on a Unix socket in a private temp dir only, and are
# stopped by their own postmaster PID at the end, also on failure.  That
# plumbing, the options --port, --keep, --prefix and the machine lines of
# the report are shared with the other benchmarks in bench/lib.sh.
#
# Usage: bench/pgbench_overhead.sh [options]
#   --pairs N          A/B pairs per workload and map size (default 10)
#   --duration S       seconds of each measured run (default 15)
#   --warmup S         seconds of pgbench warm-up before each run (default 5)
#   --workloads LIST   comma list of select-only,tpcb-like,evict-update
#                      (default: all three)
#   --map-size MB      ptrack.map_size of B; repeat it or give a comma list to
#                      run a series per size, e.g. --map-size 64,1024
#                      (default 64)
#   --scale N          pgbench scale of select-only and tpcb-like (default 10)
#   --evict-scale N    pgbench scale of evict-update (default 20)
#   --port N           port number of the servers' socket (default 55440)
#   --quick            smoke check: pairs 2, duration 5, warm-up 2 (explicit
#                      options still win)
#   --results FILE     also copy the per-run TSV to FILE
#   --keep             keep the temp dir (clusters, logs) at the end
#   --prefix DIR       PostgreSQL prefix (default: PG_PREFIX, else
#                      scripts/build-postgres.sh --print-prefix)
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pairs='' duration='' warmup='' quick=0 keep=0 results_copy='' prefix=${PG_PREFIX:-}
workloads='select-only,tpcb-like,evict-update'
map_sizes='' scale=10 evict_scale=20 port=55440
cmdline=$(printf '%q ' "$0" "$@")

while [ $# -gt 0 ]; do
    case $1 in
        --pairs) pairs=${2:?}; shift ;;
        --duration) duration=${2:?}; shift ;;
        --warmup) warmup=${2:?}; shift ;;
        --workloads) workloads=${2:?}; shift ;;
        --map-size) map_sizes=${map_sizes:+$map_sizes,}${2:?}; shift ;;
        --scale) scale=${2:?}; shift ;;
        --evict-scale) evict_scale=${2:?}; shift ;;
        --quick) quick=1 ;;
        --results) results_copy=${2:?}; shift ;;
        *) common_option "$@" && shift ;;   # --port, --keep, --prefix, --help
    esac
    shift
done
if [ $quick -eq 1 ]; then
    pairs=${pairs:-2} duration=${duration:-5} warmup=${warmup:-2}
fi
pairs=${pairs:-10} duration=${duration:-15} warmup=${warmup:-5} map_sizes=${map_sizes:-64}

for v in "$pairs" "$duration" "$warmup" "$scale" "$evict_scale" "$port"; do
    is_int "$v" || die "not a non-negative integer: $v"
done
[ "$pairs" -ge 1 ] && [ "$duration" -ge 1 ] || die "--pairs and --duration must be at least 1"
IFS=, read -r -a map_list <<<"$map_sizes"
for m in "${map_list[@]}"; do
    is_int "$m" && [ "$m" -ge 1 ] || die "--map-size must be a size in MB >= 1: $m"
done
IFS=, read -r -a workload_list <<<"$workloads"
for w in "${workload_list[@]}"; do
    case $w in select-only|tpcb-like|evict-update) ;; *) die "unknown workload: $w" ;; esac
done

summary_pl="$repo/bench/ratio_summary.pl"
[ -r "$summary_pl" ] || die "missing $summary_pl"
find_postgres postgres pg_ctl initdb pgbench psql pg_config

# Who runs the servers.  As root, everything that touches a cluster goes
# through runuser; as anyone else it runs directly.
pg_user_setup

# The temp dir, also the servers' socket directory ($sock): private to this run.
make_work ptrack-pgbench 700
cd "$work"
# The EXIT trap may run while a command's stderr is redirected into a run log
# (a signal during pgbench): fd 9 keeps the script's own stderr for it.
exec 9>&2
bench_errfd=9
results="$work/runs.tsv"

# Pin the build.  Others may `make install` while a series runs, and a B run
# on another build would mix two binaries into one figure.  B loads 'ptrack'
# through dynamic_library_path from $work/lib, which holds a hard link to the
# installed file as it is now (install(1) replaces the file with a new inode,
# so the link keeps this build).  A hard link rather than a copy: while the
# install is unchanged, the SQL functions ($libdir/ptrack) resolve to the very
# same inode, so a backend finds the library already loaded.  If linking is
# refused (another filesystem, protected_hardlinks) it falls back to a copy;
# then only the marked_pages column reads n/a.
as_pg mkdir "$work/lib"
if ln "$pkglib/ptrack.so" "$work/lib/ptrack.so" 2>/dev/null; then
    pin_how='hard link'
else
    cp "$pkglib/ptrack.so" "$work/lib/ptrack.so"
    chmod 755 "$work/lib/ptrack.so"
    pin_how='copy'
fi

# ---------------------------------------------------------------- workloads
# Sets wl_scale wl_sb wl_clients wl_args wl_writes for workload $1.
workload_setup() {
    case $1 in
        select-only)
            wl_scale=$scale wl_sb=256MB wl_clients=8 wl_writes=0
            wl_args=(-S) ;;
        tpcb-like)
            wl_scale=$scale wl_sb=256MB wl_clients=4 wl_writes=1
            wl_args=(-b tpcb-like) ;;
        evict-update)
            wl_scale=$evict_scale wl_sb=16MB wl_clients=4 wl_writes=1
            as_pg tee "$work/evict-update.sql" >/dev/null <<EOF
\\set aid random(1, $((100000 * evict_scale)))
\\set delta random(-5000, 5000)
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
EOF
            wl_args=(-f "$work/evict-update.sql") ;;
    esac
}

# The settings shared by every cluster; the workload adds shared_buffers and
# the mode file (A or B) is included last.
write_conf() {
    local dd=$1 sb=$2
    server_conf "$dd" <<EOF
shared_buffers = $sb
synchronous_commit = off
max_wal_size = 4GB
checkpoint_timeout = 30min
autovacuum = off
log_checkpoints = on
include_if_exists = 'bench_mode.conf'
EOF
}

set_mode() {   # set_mode DATADIR A|B MAP_MB
    local dd=$1 cfg=$2 map=$3
    {
        # The same search path in both modes; only B asks for the library.
        printf "dynamic_library_path = '%s:%s'\n" "$work/lib" '$libdir'
        if [ "$cfg" = A ]; then
            printf "shared_preload_libraries = ''\n"
        else
            printf "shared_preload_libraries = 'ptrack'\nptrack.map_size = %d\n" "$map"
        fi
    } | as_pg tee "$dd/bench_mode.conf" >/dev/null
}

postmaster_maps_ptrack() {   # true if the running postmaster mapped a ptrack.so
    local pid
    pid=$(head -n 1 "$running_dd/postmaster.pid")
    grep -q '/ptrack\.so' "/proc/$pid/maps"
}

start_server() { server_start "$1" "$1/../server.log" "server in $1"; }

# Proves that B really runs ptrack and A really does not.
verify_mode() {
    local cfg=$1 map=$2 spl shm
    spl=$(psql_q "SHOW shared_preload_libraries")
    shm=$(psql_q "SELECT count(*) FROM pg_shmem_allocations WHERE name = 'ptrack'")
    if [ "$cfg" = A ]; then
        [ -z "$spl" ] || die "A: shared_preload_libraries is '$spl', expected empty"
        [ "$shm" = 0 ] || die "A: ptrack shared memory is allocated"
        if psql_q "SHOW ptrack.map_size" >/dev/null 2>&1; then
            die "A: ptrack.map_size is a known setting, so ptrack is loaded"
        fi
        if postmaster_maps_ptrack; then
            die "A: the postmaster has a ptrack.so mapped"
        fi
    else
        local pid
        pid=$(head -n 1 "$running_dd/postmaster.pid")
        grep -q " $work/lib/ptrack\.so$" "/proc/$pid/maps" ||
            die "B: the postmaster did not map the pinned $work/lib/ptrack.so"
        [ "$spl" = ptrack ] || die "B: shared_preload_libraries is '$spl', expected 'ptrack'"
        local shown setting
        shown=$(psql_q "SHOW ptrack.map_size") || die "B: SHOW ptrack.map_size failed"
        setting=$(psql_q "SELECT setting || unit FROM pg_settings WHERE name = 'ptrack.map_size'")
        [ "$setting" = "${map}MB" ] || die "B: ptrack.map_size is $shown ($setting), expected ${map}MB"
        [ "$shm" = 1 ] || die "B: no ptrack shared memory allocation"
        # The SQL objects only serve the marked_pages evidence (see one_run),
        # and only while the installed file is still the pinned build.
        if cmp -s "$pkglib/ptrack.so" "$work/lib/ptrack.so"; then
            psql_q "CREATE EXTENSION IF NOT EXISTS ptrack" >/dev/null
            # Fix the map's init LSN now, so that the LSN taken before the
            # measured run is not older than it (ptrack_get_change_stat would
            # refuse it).
            psql_q "SELECT ptrack_init_lsn()" >/dev/null
        fi
    fi
}

# pgbench as the server user; prints its output, fails if pgbench fails.
run_pgbench() {
    as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -M prepared \
        -c "$wl_clients" -j 2 "${wl_args[@]}" "$@" postgres
}

# One measured run: restart in config $cfg, prepare, warm up, measure.
# Appends a TSV line to $results and prints a human line.
one_run() {
    local wl=$1 dd=$2 map=$3 pair=$4 slot=$5 cfg=$6 out tps lsn marked load
    [ -n "$running_dd" ] && server_stop "$running_dd"
    set_mode "$dd" "$cfg" "$map"
    start_server "$dd"
    verify_mode "$cfg" "$map"
    if [ "$cfg" = B ]; then
        # Every B run loads the pinned build (verify_mode checked the mapping);
        # say so once if the installed file has been replaced meanwhile.
        local md5_now
        md5_now=$(md5_of "$work/lib/ptrack.so")
        [ "$md5_now" = "$so_md5" ] || die "the pinned ptrack.so changed in place (md5 $md5_now)"
        if [ $so_changed -eq 0 ] && ! cmp -s "$pkglib/ptrack.so" "$work/lib/ptrack.so"; then
            so_changed=1
            echo "# note: ptrack.so was reinstalled since the start; B keeps loading the pinned build"
        fi
    fi
    if [ "$wl_writes" -eq 1 ]; then
        # Keep the data stationary over the series: prune the dead tuples of
        # the previous runs, then start from a clean checkpoint.
        psql_q "VACUUM pgbench_accounts" >/dev/null
        psql_q "CHECKPOINT" >/dev/null
    fi
    if [ "$wl" != evict-update ]; then
        psql_q "SELECT pg_prewarm('pgbench_accounts') + pg_prewarm('pgbench_accounts_pkey')" \
            >/dev/null 2>&1 || true
    fi
    out="$work/$wl-m$map-p$pair-$cfg"
    # Warm-up, not measured: pgbench's own vacuum of the small tables and
    # truncation of pgbench_history, then a few seconds of the same load so
    # the measured run starts from warm caches (shared buffers, OS cache).
    if [ "$warmup" -gt 0 ]; then
        run_pgbench -T "$warmup" >"$out.warmup" 2>&1 || { cat "$out.warmup" >&2; die "warm-up failed"; }
    fi
    lsn=$(psql_q "SELECT pg_current_wal_lsn()")
    load=$(cut -d' ' -f1 /proc/loadavg)
    run_pgbench -n -T "$duration" >"$out.log" 2>&1 || { cat "$out.log" >&2; die "pgbench failed"; }
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$out.log" | tail -n 1)
    [ -n "$tps" ] || { cat "$out.log" >&2; die "no tps in the pgbench output"; }
    marked=-
    if [ "$cfg" = B ]; then
        # Evidence that the hook fired: pages marked since the run started.
        # The SQL functions resolve to the installed file: if that is another
        # build now, its code would run against the pinned build's state, so
        # skip the query then.
        if cmp -s "$pkglib/ptrack.so" "$work/lib/ptrack.so"; then
            marked=$(psql_q "SELECT pages FROM ptrack_get_change_stat('$lsn')" 2>"$out.marked.err") ||
                marked='n/a'
        else
            marked='n/a(reinstalled)'
        fi
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$wl" "$map" "$pair" "$slot" "$cfg" "$tps" >>"$results"
    printf '%-13s %5s %4s %4s %3s %12.1f %6s %s\n' "$wl" "${map}MB" "$pair" "$slot" "$cfg" "$tps" "$load" "$marked"
}

# ------------------------------------------------------------------ header
so_md5=$(md5_of "$work/lib/ptrack.so")
git_rev=$(tree_rev)
report_header "ptrack loaded (B) vs not loaded (A), same binary"
report_load
report_postgres
echo "ptrack.so:  md5 $so_md5 (tree $git_rev at start), pinned as $work/lib/ptrack.so ($pin_how of $pkglib/ptrack.so)"
echo "runs as:    $pguser; sockets in $sock, port $port"
echo "settings:   pairs $pairs (ABBA), duration ${duration}s, warm-up ${warmup}s, map sizes ${map_sizes} MB"
echo "            synchronous_commit=off, autovacuum=off, max_wal_size=4GB, checkpoint_timeout=30min,"
echo "            pgbench -M prepared -j 2; restart + (VACUUM accounts + CHECKPOINT if writing) before each run"
echo "            writing workloads: one unmeasured ${duration}s conditioning run + VACUUM after pgbench -i"
for w in "${workload_list[@]}"; do
    workload_setup "$w"
    echo "workload:   $w: scale $wl_scale, shared_buffers $wl_sb, $wl_clients clients, pgbench ${wl_args[*]}"
done
echo

# -------------------------------------------------------------------- runs
: >"$results"
so_changed=0
printf '%-13s %5s %4s %4s %3s %12s %6s %s\n' workload map pair slot cfg tps load1 marked_pages
for w in "${workload_list[@]}"; do
    workload_setup "$w"
    dd="$work/$w/data"
    as_pg mkdir -p "$work/$w"
    server_initdb "$dd" "$work/$w/initdb.log"
    write_conf "$dd" "$wl_sb"
    set_mode "$dd" A 0
    start_server "$dd"
    verify_mode A 0
    t0=$(date +%s)
    load_pgbench "$wl_scale" "$work/$w/init.log"
    psql_q "CREATE EXTENSION IF NOT EXISTS pg_prewarm" >/dev/null 2>&1 || true
    if [ "$wl_writes" -eq 1 ]; then
        # Condition the data, not measured.  Straight after pgbench -i every
        # page is full, so the first run's updates all go to new pages at the
        # end of the table; from the second run on they reuse the space the
        # VACUUM before each run frees, all over the table.  Without this the
        # first run (an A, in ABBA order) is up to twice as fast as the rest.
        run_pgbench -T "$duration" >"$work/$w/condition.log" 2>&1 ||
            { cat "$work/$w/condition.log" >&2; die "conditioning run failed"; }
        psql_q "VACUUM pgbench_accounts" >/dev/null
    fi
    size=$(psql_q "SELECT pg_size_pretty(pg_database_size('postgres'))")
    echo "# $w: initialised scale $wl_scale ($size) in $(( $(date +%s) - t0 ))s"
    slot=0
    for m in "${map_list[@]}"; do
        for ((p = 1; p <= pairs; p++)); do
            if [ $((p % 2)) -eq 1 ]; then order='A B'; else order='B A'; fi
            for cfg in $order; do
                slot=$((slot + 1))
                one_run "$w" "$dd" "$m" "$p" "$slot" "$cfg"
            done
        done
    done
    server_stop "$dd"
    [ $keep -eq 1 ] || as_pg rm -rf "$dd"   # the next cluster does not need its disk
done

# ----------------------------------------------------------------- summary
echo
echo "# summary: per-pair ratio B/A = TPS with ptrack / TPS without, same pair"
perl "$summary_pl" "$results"
if [ $so_changed -eq 1 ]; then
    echo "note: the installed ptrack.so was replaced during the series; every B run still loaded the pinned build, md5 $so_md5"
fi
if [ -n "$results_copy" ]; then
    cp "$results" "$results_copy"
    echo "per-run TSV copied to $results_copy"
fi
