#!/usr/bin/env bash
#
# checkpoint_cost.sh -- time and bytes written by ptrack's map flush at the
# end of each checkpoint, for 64 MB and 1 GB maps.
#
# The flush (src/pg/persist/map_save.cpp): the first one of a checkpointer
# writes the whole map (ptrack.map.tmp, CRC-32C per 64 KB chunk, fsync,
# durable rename); the following ones append the 8-byte words changed since
# the previous flush to ptrack.map.delta, 16 bytes each, until the delta
# file outgrows a quarter of the map.  With log_checkpoints = on the server
# logs one line per flush: "ptrack map flush: full|delta, N bytes written in
# X ms".
#
# Part 1, synthetic (bench/checkpoint/flush_bench.cpp, linked with the
# engine): the same I/O as the server, step by step, on a map in which 1% or
# 100% of the words changed since the previous flush, for 64 MB and 1 GB
# maps: bytes written and time of a full and of a delta flush, median of
# --reps runs (--reps-big for 1 GB), and the ratio of delta to full bytes
# (target: at most 5% at 1% changed).  A test server cannot change 100% of a
# map, nor 1% of a 1 GB one (670 000 blocks between two checkpoints).
# Then the full flush with other CRC chunk sizes than kMapFileChunkBytes
# (64 KB; include/ptrack/map_file.h cites this file for the choice).
#
# Part 2, in the server (ptrack.map_size = 64MB, then 1024MB), read from the
# log lines:
#   - the full flush of the first CHECKPOINT after a start, --reps restarts
#     (the checkpointer is a new process: it also pays the first touch of
#     every page of the shared map)
#   - delta flushes: CHECKPOINT; L; UPDATE one row on each of K pages of a
#     table without indexes and with fillfactor 50 (HOT updates: one heap
#     block per row); CHECKPOINT.  K = 0 (idle), 4200 (about 0.1% of a 64 MB
#     map's words) and 42000 (about 1%: 2 slots per block).  The heap pages
#     with page LSN >= L are counted with pageinspect, the blocks listed by
#     ptrack_get_pagemapset(L) (without _fsm) too; entries = (bytes - 64)/16.
#
# Run as root (the server runs as ptrack_test through runuser) or as a normal
# user.  Unix socket in a private temp dir only; the server is stopped by its
# postmaster PID at the end, also on failure.  That plumbing, the options
# --port, --keep, --prefix and the machine lines of the report are shared
# with the other benchmarks in bench/lib.sh.
#
# Usage: bench/checkpoint_cost.sh [options]
#   --reps N        repetitions of each figure, 64 MB map (default 5)
#   --reps-big N    repetitions with the 1 GB map (default 3)
#   --pages N       K of the "1%" in-server case (default 42000)
#   --no-server     synthetic part only
#   --no-synthetic  in-server part only
#   --chunks LIST   CRC chunk sizes in KB for the chunk-size comparison, or
#                   "none" (default 16,64,1024)
#   --port N        port of the server's socket (default 56103)
#   --quick         smoke run: 2 repetitions, 1 with 1 GB, K = 4200 and 420,
#                   synthetic 64 MB only, chunks 16,64, no 1 GB server
#                   (explicit options win)
#   --keep          keep the temp dir (cluster, logs)
#   --prefix DIR    PostgreSQL prefix (default: PG_PREFIX, else
#                   scripts/build-postgres.sh --print-prefix)
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
pg_ctl_timeout=600

reps='' reps_big='' pages='' chunks='' server=1 synthetic=1 port=56103 quick=0 keep=0 prefix=${PG_PREFIX:-}
cmdline=$(printf '%q ' "$0" "$@")
while [ $# -gt 0 ]; do
    case $1 in
        --reps) reps=${2:?}; shift ;;
        --reps-big) reps_big=${2:?}; shift ;;
        --pages) pages=${2:?}; shift ;;
        --chunks) chunks=${2:?}; shift ;;
        --no-server) server=0 ;;
        --no-synthetic) synthetic=0 ;;
        --quick) quick=1 ;;
        *) common_option "$@" && shift ;;   # --port, --keep, --prefix, --help
    esac
    shift
done
synthetic_maps='64 1024' server_maps='64 1024'
if [ $quick -eq 1 ]; then
    reps=${reps:-2} reps_big=${reps_big:-1} pages=${pages:-4200} synthetic_maps='64' server_maps='64'
    chunks=${chunks:-16,64}
fi
reps=${reps:-5} reps_big=${reps_big:-3} pages=${pages:-42000} chunks=${chunks:-16,64,1024}
chunk_list=()
if [ "$chunks" != none ]; then
    IFS=, read -r -a chunk_list <<<"$chunks"
    for c in "${chunk_list[@]}"; do
        [[ $c =~ ^[0-9]+$ ]] && [ "$c" -ge 1 ] || die "--chunks: not a size in KB: $c"
    done
fi
for v in "$reps" "$reps_big" "$pages" "$port"; do is_int "$v" || die "not a non-negative integer: $v"; done
[ "$reps" -ge 1 ] && [ "$reps_big" -ge 1 ] && [ "$pages" -ge 10 ] || die "--reps, --reps-big >= 1, --pages >= 10"
small_pages=$((pages / 10))

find_postgres postgres pg_ctl initdb psql pg_config
command -v g++ >/dev/null || die "g++ is needed for bench/checkpoint/flush_bench.cpp"
grep -q sse4_2 /proc/cpuinfo || die "this CPU has no SSE4.2 (CRC-32C instruction)"

pg_user_setup
make_work ptrack-ckpt 700   # also the socket directory, $sock
dd="$work/data" log="$work/server.log"

# ------------------------------------------------------------------ header
so_md5=$(md5_of "$pkglib/ptrack.so")
git_rev=$(tree_rev)
report_header "ptrack map flush at the end of a checkpoint"
echo "disk:       $(df -h --output=source,fstype,size,avail "$work" | tail -n 1 | tr -s ' ') (temp dir $work)"
report_load
report_postgres
echo "ptrack.so:  md5 $so_md5, tree $git_rev"
echo "settings:   $reps repetitions (64 MB), $reps_big (1 GB); in-server K = 0, $small_pages, $pages pages;"
echo "            CRC chunk sizes compared: ${chunks} KB"
echo

summary="$work/summary.txt"
: >"$summary"

# ------------------------------------------------------------ 1. synthetic
if [ $synthetic -eq 1 ]; then
    echo "## synthetic flushes (bench/checkpoint/flush_bench.cpp, engine linked, SSE4.2 CRC-32C)"
    g++ -std=c++17 -O2 -Wall -Wextra -msse4.2 -I"$repo/include" "$repo/bench/checkpoint/flush_bench.cpp" \
        "$repo"/src/engine/*.cpp -o "$work/flush_bench" || die "cannot build flush_bench"
    mkdir -p "$work/flushdir"
    printf '%-6s %-8s %12s %10s | %12s %10s %10s | %8s\n' map changed full_bytes full_ms delta_bytes delta_ms \
        entries delta/full >"$work/synthetic.txt"
    for m in $synthetic_maps; do
        n=$reps
        [ "$m" -ge 1024 ] && n=$reps_big
        for f in 0.01 1; do
            out=$("$work/flush_bench" "$work/flushdir" "$m" "$f" "$n") || die "flush_bench failed"
            echo "$out"
            full=$(grep '^median kind=full' <<<"$out") delta=$(grep '^median kind=delta' <<<"$out")
            fb=$(kv bytes "$full") db=$(kv bytes "$delta")
            printf '%-6s %-8s %12s %10s | %12s %10s %10s | %7.2f%%\n' "${m}MB" "$(awk -v f="$f" 'BEGIN {printf "%g%%", 100 * f}')" \
                "$fb" "$(kv ms "$full")" "$db" "$(kv ms "$delta")" "$(kv entries "$delta")" \
                "$(awk -v a="$db" -v b="$fb" 'BEGIN {print 100 * a / b}')" >>"$work/synthetic.txt"
        done
    done
    if [ ${#chunk_list[@]} -gt 0 ]; then
        echo "## full flush by CRC chunk size (1% changed; $reps_big repetitions)"
        printf '%-6s %8s %8s %12s %10s %8s %8s %8s\n' map chunk chunks file_bytes full_ms cpu_ms write_ms \
            sync_ms >"$work/chunks.txt"
        for m in $synthetic_maps; do
            for c in "${chunk_list[@]}"; do
                out=$("$work/flush_bench" "$work/flushdir" "$m" 0.01 "$reps_big" $((c * 1024))) ||
                    die "flush_bench failed"
                echo "$out" | grep -v '^rep .*kind=delta'
                full=$(grep '^median kind=full' <<<"$out")
                printf '%-6s %8s %8s %12s %10s %8s %8s %8s\n' "${m}MB" "${c}KB" \
                    "$(sed -n 's/.* chunks=\([0-9]*\).*/\1/p' <<<"$out")" "$(kv bytes "$full")" "$(kv ms "$full")" \
                    "$(kv cpu_ms "$full")" "$(kv write_ms "$full")" "$(kv sync_ms "$full")" >>"$work/chunks.txt"
            done
        done
    fi
    echo
fi

# ------------------------------------------------------------- 2. server
log_from() { tail -c +"$(($1 + 1))" "$log"; }
log_size() { stat -c %s "$log"; }
# The checkpointer's on-CPU ns (/proc/<pid>/schedstat) and minor faults (/proc/<pid>/stat).
checkpointer_usage() {
    echo "$(cut -d' ' -f1 "/proc/$1/schedstat") $(cut -d' ' -f10 "/proc/$1/stat")"
}
# Runs CHECKPOINT; sets FLUSH_KIND FLUSH_BYTES FLUSH_MS CKPT_S from the log lines it produced,
# and CKPT_CPU_MS CKPT_FAULTS: the checkpointer's CPU time and minor page faults meanwhile.
checkpoint_flush() {
    local off line pid before after
    off=$(log_size)
    pid=$(psql_q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
    before=$(checkpointer_usage "$pid")
    psql_q "CHECKPOINT" >/dev/null
    after=$(checkpointer_usage "$pid")
    CKPT_CPU_MS=$(awk -v b="$before" -v a="$after" 'BEGIN {split(b, x, " "); split(a, y, " "); printf "%.0f", (y[1] - x[1]) / 1e6}')
    CKPT_FAULTS=$(awk -v b="$before" -v a="$after" 'BEGIN {split(b, x, " "); split(a, y, " "); print y[2] - x[2]}')
    line=$(log_from "$off" | grep 'ptrack map flush:' | tail -n 1)
    [ -n "$line" ] || { log_from "$off" >&2; die "no ptrack map flush line after CHECKPOINT"; }
    FLUSH_KIND=$(sed -n 's/.*ptrack map flush: \([a-z]*\),.*/\1/p' <<<"$line")
    FLUSH_BYTES=$(sed -n 's/.*, \([0-9]*\) bytes written.*/\1/p' <<<"$line")
    FLUSH_MS=$(sed -n 's/.* written in \([0-9.]*\) ms.*/\1/p' <<<"$line")
    CKPT_S=$(log_from "$off" | sed -n 's/.*checkpoint complete:.* total=\([0-9.]*\) s.*/\1/p' | tail -n 1)
}

set_map_size() {
    as_pg sed -i "s/^ptrack.map_size = .*/ptrack.map_size = $1/" "$dd/postgresql.conf"
}
start_server() { server_start "$dd" "$log" server; }
stop_server() { server_stop "$dd"; }

# Startup full flushes: restart, first CHECKPOINT; N times.  Prints a summary line.
startup_flushes() {
    local m=$1 n=$2 r ms='' bytes='' cpu='' faults=''
    for ((r = 1; r <= n; r++)); do
        stop_server
        start_server
        checkpoint_flush
        [ "$FLUSH_KIND" = full ] || die "first flush after start was $FLUSH_KIND, not full"
        ms+=" $FLUSH_MS" bytes=$FLUSH_BYTES cpu+=" $CKPT_CPU_MS" faults+=" $CKPT_FAULTS"
        echo "map ${m}MB restart $r: first CHECKPOINT: full flush $FLUSH_BYTES bytes in $FLUSH_MS ms (checkpoint total ${CKPT_S}s;" \
             "checkpointer: ${CKPT_CPU_MS} ms CPU, $CKPT_FAULTS minor page faults)"
    done
    printf '%-6s %-24s %8s %12s %10s %10s %8s %8s %8s %8s\n' "${m}MB" "startup (full)" - - - "$bytes" - \
        "$(median <<<"$ms")" "$(median <<<"$cpu")" "$(median <<<"$faults")" >>"$summary"
}

# Delta flushes after changing one row on each of K pages starting at page P, N times.
# Items (line pointers) 1, 2, ... of those pages are updated in turn.
declare -A next_item
delta_flushes() {
    local m=$1 k=$2 first=$3 n=$4 r ms='' bytes='' heap='' listed='' lsn item cpu='' faults='' 
    checkpoint_flush   # the previous flush sets the threshold of the next delta
    for ((r = 1; r <= n; r++)); do
        lsn=$(psql_q "SELECT pg_current_wal_insert_lsn()")
        if [ "$k" -gt 0 ]; then
            item=${next_item[$first]:-1}
            [ "$item" -le "$rows_per_page" ] || die "no row left to update on pages from $first"
            next_item[$first]=$((item + 1))
            updated=$(psql_q "UPDATE flushbench SET v = v + 1 WHERE ctid = ANY (ARRAY(
                SELECT format('(%s,%s)', p, $item)::tid FROM generate_series($first, $first + $k - 1) p))
                RETURNING 1" | wc -l)
            [ "$updated" -eq "$k" ] || die "updated $updated rows, expected $k"
        fi
        checkpoint_flush
        [ "$FLUSH_KIND" = delta ] || echo "note: this flush was $FLUSH_KIND (the delta file outgrew a quarter of the map)"
        local h l
        h=$(psql_q "SELECT count(*) FROM generate_series(0, $table_pages - 1) b
                    WHERE (page_header(get_raw_page('flushbench', b::int))).lsn >= '$lsn'")
        l=$(psql_q "SELECT coalesce(sum(pagecount), 0) FROM ptrack_get_pagemapset('$lsn') WHERE path NOT LIKE '%\\_fsm'")
        ms+=" $FLUSH_MS" bytes+=" $FLUSH_BYTES" heap+=" $h" listed+=" $l" cpu+=" $CKPT_CPU_MS" faults+=" $CKPT_FAULTS"
        echo "map ${m}MB K=$k rep $r: $h heap pages with LSN >= L, $l blocks listed; $FLUSH_KIND flush" \
             "$FLUSH_BYTES bytes ($(( (FLUSH_BYTES - 64) / 16 )) entries) in $FLUSH_MS ms (checkpoint total ${CKPT_S}s;" \
             "checkpointer: ${CKPT_CPU_MS} ms CPU, $CKPT_FAULTS minor page faults)"
    done
    local mb ml
    mb=$(median <<<"$bytes") ml=$(median <<<"$listed")
    printf '%-6s %-24s %8s %12s %10s %10s %8s %8s %8s %8s\n' "${m}MB" "delta K=$k" "$(median <<<"$heap")" "$ml" \
        "$(awk -v b="$mb" 'BEGIN {printf "%d", (b - 64) / 16}')" "${mb%.0}" \
        "$(awk -v b="$mb" -v l="$ml" 'BEGIN {if (l > 0) printf "%.2f", (b - 64) / 16 / l; else print "-"}')" \
        "$(median <<<"$ms")" "$(median <<<"$cpu")" "$(median <<<"$faults")" >>"$summary"
}

if [ $server -eq 1 ]; then
    echo "## in the server"
    server_initdb "$dd" "$work/initdb.log"
    server_conf "$dd" <<EOF
shared_buffers = 512MB
synchronous_commit = off
max_wal_size = 8GB
checkpoint_timeout = 1h
autovacuum = off
log_checkpoints = on
shared_preload_libraries = 'ptrack'
ptrack.map_size = 64
EOF
    start_server
    psql_q "CREATE EXTENSION ptrack" "CREATE EXTENSION pageinspect" "SELECT ptrack_init_lsn()" >/dev/null
    table_pages=$((pages + small_pages))
    t0=$(date +%s)
    # 400-byte rows, fillfactor 50: 9 rows per page, room for HOT updates, no index.
    psql_q "CREATE TABLE flushbench (id int, v int, pad text) WITH (fillfactor = 50, autovacuum_enabled = off)" \
        "INSERT INTO flushbench SELECT g, 0, repeat('x', 400) FROM generate_series(1, $((table_pages * 9))) g" \
        "VACUUM flushbench" >/dev/null
    real_pages=$(psql_q "SELECT pg_relation_size('flushbench') / 8192")
    rows_per_page=$(psql_q "SELECT count(*) FROM flushbench WHERE ctid >= '(1,0)' AND ctid < '(2,0)'")
    [ "$real_pages" -ge "$table_pages" ] || die "flushbench has $real_pages pages, expected $table_pages"
    table_pages=$real_pages
    echo "table flushbench: $table_pages pages, $rows_per_page rows per page, loaded in $(( $(date +%s) - t0 ))s"
    printf '%-6s %-24s %8s %12s %10s %10s %8s %8s %8s %8s\n' map flush heap_chg listed entries bytes ent/blk ms \
        ckpt_cpu faults >>"$summary"
    for m in $server_maps; do
        n=$reps
        [ "$m" -ge 1024 ] && n=$reps_big
        stop_server
        set_map_size "$m"
        start_server
        [ "$(psql_q "SELECT setting FROM pg_settings WHERE name = 'ptrack.map_size'")" = "$m" ] ||
            die "ptrack.map_size is not $m MB"
        psql_q "SELECT ptrack_init_lsn()" >/dev/null
        startup_flushes "$m" "$n"
        delta_flushes "$m" 0 0 "$n"
        if [ "$m" -lt 1024 ]; then
            delta_flushes "$m" "$small_pages" "$pages" "$n"
        fi
        delta_flushes "$m" "$pages" 0 "$n"
    done
    echo
fi

warn_if_reinstalled
# ----------------------------------------------------------------- summary
if [ $synthetic -eq 1 ]; then
    echo "## summary, synthetic (medians; delta = first batch after a full flush)"
    cat "$work/synthetic.txt"
    if [ ${#chunk_list[@]} -gt 0 ]; then
        echo "## summary, full flush by CRC chunk size (medians; cpu = copy + CRC, sync = fsyncs + rename)"
        cat "$work/chunks.txt"
    fi
fi
if [ $server -eq 1 ]; then
    echo "## summary, in the server (medians; bytes and ms from the server's log line;"
    echo "## heap_chg = flushbench pages with LSN >= L (pageinspect), listed = ptrack blocks without _fsm,"
    echo "## entries = (bytes - 64) / 16, ent/blk = entries per listed block; ckpt_cpu = the checkpointer's CPU ms"
    echo "## and faults = its minor page faults during the whole CHECKPOINT, flush included)"
    cat "$summary"
    stop_server
fi
exit 0
