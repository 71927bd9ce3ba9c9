#!/usr/bin/env bash
# bench/engine/run.sh -- builds and runs the engine benchmarks:
#   mark_bench     nanoseconds per Map::mark (Google Benchmark)
#   scan_bench     pagemapset scan of a simulated 1 TB cluster, summary on/off
#   fp_bench       false positives by layout at equal memory, and the LSN granule
#   summary_bench  exact change summaries against the map on a simulated 10 TiB
#                  cluster (issue 21); not in the default set: ~15 minutes and
#                  3 GB; `summary --quick` runs 1 TiB, 1% only
# Usage: bench/engine/run.sh [mark|scan|fp|summary [summary_bench options] ...]
#        (default: mark scan fp)
# Output goes to the terminal and to bench/engine/build/run-<timestamp>.log.
# Needs g++ (C++17) and libbenchmark-dev; 3 GB of free memory; ~30 minutes
# on a quiet 2-core machine (scan_bench marks 134M blocks for its 100% case).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build="$here/build"
mkdir -p "$build"
what=()
summary_args=()
for a in "$@"; do
    case $a in
    --*) summary_args+=("$a") ;; # options of summary_bench (--quick, --no-map, --map-sample N is not supported here)
    *) what+=("$a") ;;
    esac
done
[ ${#what[@]} -eq 0 ] && what=(mark scan fp)
log="$build/run-$(date -u +%Y%m%dT%H%M%SZ).log"

{
echo "command: bench/engine/run.sh ${*:-}"
echo "date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "git:     $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?') (working tree, may be dirty)"
echo "machine: $(uname -srm); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $(nproc) cpus;" \
     "$(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo);" \
     "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at start"
echo "g++:     $(g++ --version | head -1)"
} | tee "$log"

cxx=(g++ -std=c++17 -O2 -march=x86-64-v2 -Wall -Wextra -I "$root/include" -I "$here")
engine=("$root"/src/engine/*.cpp)
build_one() {
    local name=$1; shift
    echo "+ ${cxx[*]} bench/engine/$name.cpp src/engine/*.cpp -o bench/engine/build/$name $*" | sed "s#$root/##g" | tee -a "$log"
    "${cxx[@]}" "$here/$name.cpp" "${engine[@]}" -o "$build/$name" "$@"
}

for w in "${what[@]}"; do
    case $w in
    mark)
        build_one mark_bench -lbenchmark -lpthread
        echo "== mark_bench: CPU ns per mark, min and median of 7 repetitions run in random interleaved order" | tee -a "$log"
        "$build/mark_bench" --benchmark_min_time=0.3 --benchmark_enable_random_interleaving=true --benchmark_out="$build/mark_bench.json" \
            --benchmark_out_format=json 2>&1 | grep -Ev '_(mean|stddev|cv) ' | tee -a "$log"
        ;;
    scan)
        build_one scan_bench
        echo "== scan_bench: 4 KB pages (PostgreSQL with huge_pages = off)" | tee -a "$log"
        "$build/scan_bench" 2>&1 | tee -a "$log"
        echo "== scan_bench --hugepages: the map on 2 MB pages (huge_pages = on)" | tee -a "$log"
        "$build/scan_bench" --hugepages 2>&1 | tee -a "$log"
        ;;
    fp)
        build_one fp_bench
        echo "== fp_bench" | tee -a "$log"
        "$build/fp_bench" 2>&1 | tee -a "$log"
        ;;
    summary)
        build_one summary_bench
        echo "== summary_bench ${summary_args[*]:-}" | tee -a "$log"
        "$build/summary_bench" "${summary_args[@]}" 2>&1 | tee -a "$log"
        ;;
    *)
        echo "unknown benchmark: $w (mark, scan, fp or summary)" >&2
        exit 2
        ;;
    esac
done
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) at end" | tee -a "$log"
echo "log:     ${log#$root/}"
