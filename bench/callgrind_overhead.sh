#!/usr/bin/env bash
#
# callgrind_overhead.sh -- ptrack's write-path cost in instructions per
# transaction, counted by callgrind.
#
# Why instructions: the machines are shared and noisy, so wall-clock TPS
# (bench/pgbench_overhead.sh) only resolves differences of a few percent.
# callgrind counts the instructions a process executes; for the same input
# the count repeats to within some thousands of instructions per run (a few
# instructions per transaction here), so a difference of 0.01% per
# transaction is visible.
#
# How: a fixed SQL script runs through `postgres --single` (single-user mode:
# one process, no checkpointer or background writer, so every buffer
# eviction, every mdwrite()/mdextend() and the checkpoints run inside the
# measured process) under `valgrind --tool=callgrind --trace-children=no`,
#   baseline  no shared_preload_libraries (the core hooks stay NULL)
#   ptrack    -c shared_preload_libraries=<copy of ptrack.so> -c ptrack.map_size=<MB>
# (the installed ptrack.so is copied once at the start, so that a concurrent
# `make install` cannot change the code between runs).  Every run starts from
# a fresh copy of the same data directory contents: initdb + pgbench -i
# (normal server, stopped cleanly), then one empty single-user session per
# configuration, so that the ptrack templates carry a valid ptrack.map of
# their size and the measured ptrack runs pay the map file load like a real
# restart does.  The script checks that all templates have the same
# checkpoint REDO location.
#
# Workloads (SQL generated with a fixed seed, one statement per line, i.e.
# one transaction per line in single-user mode without -j):
#   evict-update  shared_buffers 16MB, pgbench scale 2 (~30 MB of accounts):
#                 "UPDATE pgbench_accounts SET abalance = abalance + 1
#                 WHERE aid = <random>", then CHECKPOINT; once the buffers
#                 are full, about every second transaction evicts a dirty
#                 buffer, i.e. calls mdwrite() and the ptrack hook
#   select-only   shared_buffers 128MB (nothing is evicted):
#                 "SELECT abalance FROM pgbench_accounts WHERE aid = <random>"
#
# Two lengths in one process.  The script holds `long` transactions with a
# marker statement (SELECT pg_backend_pid()) after transaction `short` and
# after transaction `long`, and callgrind dumps its counters when the marker
# runs (--dump-before=pg_backend_pid), so one run yields
#   head  start-up + transactions 1..short
#   body  transactions short+1..long
#   tail  the rest: final CHECKPOINT, shutdown checkpoint, exit
# and
#   marginal Ir/txn = body / (long - short)
# is exactly Ir(N=long) - Ir(N=short) of two separate runs over the same
# prefix, minus the difference between their shutdowns, at half the
# valgrind time (a 1 GB map costs ~5 G instructions of start-up and
# checkpoints per run);
#   fixed Ir = head + tail - marginal * short
# is what a configuration costs once per process; for ptrack minus baseline
# it splits into start (map zeroing, map file load) and end (map flushes at
# the two checkpoints).  Overhead % = (ptrack - baseline) / baseline of the
# marginal cost.  The body also holds about one marker statement (a trivial
# SELECT, the same in every run).
#
# Noise: the backend flushes its statistics when idle at most once a second
# (pgstat_report_stat, the idle-stats timeout around it, and the re-creation
# of the flushed pending entries by the next transactions,
# pgstat_prep_pending_entry), so a few thousand instructions per second
# follow the wall-clock duration of the run, which on a loaded machine under
# valgrind varies by minutes.  Those functions' inclusive Ir ("clock") is
# subtracted from every figure.  A second baseline
# evict-update run shows what is left (--no-repeat skips it).
#
# The callgrind output is parsed (call counts and inclusive cost of every
# function, from the call arcs) to show where ptrack's instructions go and
# the cost of one mark.  The script fails unless the ptrack runs really ran
# ptrack (map loaded from its file, flush_map called once per checkpoint,
# hook calls == mdwrite/mdextend calls) and the baseline runs did not
# (no ptrack.so code in the profile).
#
# Limits: callgrind counts instructions, not cache or TLB misses; a 1 GB map
# costs more than a 64 MB one mainly through misses, which this does not
# see.  valgrind counts every iteration of `rep stosb` (glibc's memset of
# large blocks) as one instruction, i.e. 1 Ir per byte zeroed.  fsync=off by
# default: it only skips the fsync system calls (kernel time is never
# counted) and makes the runs much faster on slow disks; --fsync on
# restores them.
#
# Runs as root (PostgreSQL then runs as the unprivileged user ptrack_test
# through runuser) or as a normal user.  That plumbing, the temp dir, the
# initialisation server, the options --port, --keep, --prefix and the
# machine lines of the report are shared with the other benchmarks in
# bench/lib.sh.
#
# Usage: bench/callgrind_overhead.sh [options]
#   --short N          transactions before the first marker (default 2000)
#   --long N           transactions before the second marker (default 8000)
#   --map-sizes LIST   comma list of ptrack.map_size values in MB (default 64,1024)
#   --workloads LIST   comma list of evict-update,select-only (default both)
#   --scale N          pgbench scale (default 2)
#   --update-sb SIZE   shared_buffers of evict-update (default 16MB)
#   --select-sb SIZE   shared_buffers of select-only (default 128MB)
#   --seed N           seed of the random aids (default 42)
#   --fsync on|off     fsync setting of the measured runs (default off)
#   --jobs N           valgrind runs in parallel (default: nproc, at most 4);
#                      instruction counts do not depend on it
#   --no-repeat        skip the repeatability check (a second baseline
#                      evict-update run)
#   --port N           port of the initialisation server's socket (default 55450)
#   --results FILE     also copy the report to FILE
#   --keep             keep the temp dir (callgrind.out files, logs)
#   --prefix DIR       PostgreSQL prefix (default: PG_PREFIX, else
#                      scripts/build-postgres.sh --print-prefix)
#   --checksums on|off|default
#                      data checksums of the cluster (default: the version's
#                      initdb default, off up to 17, on from 18); with them,
#                      and a core patch whose mdwritev_hook passes the pages,
#                      evictions are marked with the page's LSN
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

short=2000 long=8000 map_sizes=64,1024 workloads=evict-update,select-only
scale=2 update_sb=16MB select_sb=128MB seed=42 fsync=off jobs='' repeat=1
port=55450 results_copy='' keep=0 prefix=${PG_PREFIX:-}
cmdline=$0
for a in "$@"; do
    if [[ $a =~ ^[-A-Za-z0-9_./,=:+]+$ ]]; then cmdline+=" $a"; else cmdline+=" $(printf '%q' "$a")"; fi
done

while [ $# -gt 0 ]; do
    case $1 in
        --short) short=${2:?}; shift ;;
        --long) long=${2:?}; shift ;;
        --map-sizes|--map-size) map_sizes=${2:?}; shift ;;
        --workloads) workloads=${2:?}; shift ;;
        --scale) scale=${2:?}; shift ;;
        --update-sb) update_sb=${2:?}; shift ;;
        --select-sb) select_sb=${2:?}; shift ;;
        --seed) seed=${2:?}; shift ;;
        --fsync) fsync=${2:?}; shift ;;
        --jobs) jobs=${2:?}; shift ;;
        --no-repeat) repeat=0 ;;
        --results) results_copy=${2:?}; shift ;;
        *) common_option "$@" && shift ;;   # --port, --keep, --prefix, --help
    esac
    shift
done

if [ -z "$jobs" ]; then
    jobs=$(nproc)
    [ "$jobs" -le 4 ] || jobs=4
fi
for v in "$short" "$long" "$scale" "$seed" "$jobs" "$port"; do
    is_int "$v" || die "not a non-negative integer: $v"
done
[ "$short" -ge 1 ] && [ "$long" -gt "$short" ] || die "need 1 <= --short < --long"
[ "$scale" -ge 1 ] && [ "$jobs" -ge 1 ] || die "--scale and --jobs must be at least 1"
case $fsync in on|off) ;; *) die "--fsync must be on or off" ;; esac
[[ $update_sb =~ ^[0-9]+[kMG]B$ ]] && [[ $select_sb =~ ^[0-9]+[kMG]B$ ]] ||
    die "shared_buffers sizes look like 16MB"
IFS=, read -r -a map_list <<<"$map_sizes"
[ ${#map_list[@]} -ge 1 ] || die "--map-sizes is empty"
for m in "${map_list[@]}"; do
    is_int "$m" && [ "$m" -ge 1 ] || die "--map-sizes: not a size in MB >= 1: $m"
done
IFS=, read -r -a workload_list <<<"$workloads"
[ ${#workload_list[@]} -ge 1 ] || die "--workloads is empty"
for w in "${workload_list[@]}"; do
    case $w in evict-update|select-only) ;; *) die "unknown workload: $w" ;; esac
done

find_postgres postgres pg_ctl initdb pgbench pg_controldata pg_config
major=$("$bin/pg_config" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
for c in valgrind perl pkill md5sum; do
    command -v "$c" >/dev/null || die "$c is not installed"
done

# Who runs PostgreSQL: as root, the unprivileged ptrack_test through runuser.
pg_user_setup

declare -a job_pids=()
# Before the temp dir's cleanup: our own background runs only, by the PIDs we
# started: first the child of each run's subshell (runuser or valgrind), then
# the subshell.
cleanup_hook() {
    local p
    for p in "${job_pids[@]}"; do
        pkill -TERM -P "$p" 2>/dev/null || true
        kill "$p" 2>/dev/null || true
    done
    for p in "${job_pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
}
make_work cg-overhead 755   # the initialisation server's socket is there too
mkdir -p "$work/sql" "$work/cg" "$work/log" "$work/stats" "$work/runs"
so_lib="$work/ptrack.so"
cp "$pkglib/ptrack.so" "$so_lib"
chmod 755 "$so_lib"
[ "$(id -u)" -eq 0 ] && chown -R "$pguser" "$work"
log_prefix='[cg] '  # no PID in log lines: its digits would vary the counts
marker='SELECT pg_backend_pid()'
marker_fn=pg_backend_pid
clock_fns='pgstat_report_stat pgstat_prep_pending_entry enable_timeout_after disable_timeout get_timeout_active'

# ------------------------------------------------------------ SQL scripts
# The aids come from perl's drand48 (perl >= 5.20), seeded: the same file on
# every machine.
gen_sql() {   # gen_sql WORKLOAD FILE
    local wl=$1 file=$2
    perl -e '
        my ($wl, $short, $long, $seed, $rows, $marker) = @ARGV;
        srand($seed);
        for my $i (1 .. $long) {
            my $aid = 1 + int(rand($rows));
            if ($wl eq "evict-update") {
                print "UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = $aid\n";
            } else {
                print "SELECT abalance FROM pgbench_accounts WHERE aid = $aid\n";
            }
            print "$marker\n" if $i == $short || $i == $long;
        }
        print "CHECKPOINT\n" if $wl eq "evict-update";
    ' "$wl" "$short" "$long" "$seed" "$((100000 * scale))" "$marker" >"$file"
    chmod a+r "$file"
}

# --------------------------------------------------- callgrind.out parser
# Reads callgrind.out files written with --compress-strings=no
# --compress-pos=no and prints, per function: F name object calls inclusive
# self (calls and inclusive cost summed over all call arcs into it, over all
# the files), then the call arcs leaving ptrack.so: E caller callee
# callee_object calls inclusive, then T total.  Only the first event (Ir) is
# read.
cat >"$work/cgstats.pl" <<'PERL'
use strict;
use warnings;
my (%ob_of, %self, %calls, %incl, %arc_calls, %arc_incl);
my $total = 0;
my $parts = 0;
for my $file (@ARGV) {
    open my $in, '<', $file or die "$file: $!\n";
    my ($ob, $fn, $cfn, $pending) = ('', '', '', undef);
    while (my $line = <$in>) {
        chomp $line;
        if ($line =~ /^ob=(.*)$/) { $ob = $1; next; }
        if ($line =~ /^fn=(.*)$/) { $fn = $1; $ob_of{$fn} //= $ob; next; }
        if ($line =~ /^cfn=(.*)$/) { $cfn = $1; next; }
        if ($line =~ /^calls=(\d+)/) { $pending = $1; next; }
        if ($line =~ /^totals:\s*(\d+)/) { $total += $1; $parts++; next; }
        if ($line =~ /^[-+*0-9]\S*\s+(\d+)/) {
            my $ir = $1;
            if (defined $pending) {
                $calls{$cfn} += $pending;
                $incl{$cfn} += $ir;
                my $arc = "$fn\t$cfn";
                $arc_calls{$arc} += $pending;
                $arc_incl{$arc} += $ir;
                undef $pending;
            } else {
                $self{$fn} += $ir;
            }
        }
    }
    close $in;
}
die "no totals line\n" unless $parts == @ARGV;
sub base { my $p = shift // ''; $p =~ s{.*/}{}; return $p eq '' ? '?' : $p; }
for my $f (sort keys %ob_of) {
    printf "F\t%s\t%s\t%d\t%d\t%d\n", $f, base($ob_of{$f}), $calls{$f} // 0, $incl{$f} // 0, $self{$f} // 0;
}
for my $arc (sort keys %arc_calls) {
    my ($from, $to) = split /\t/, $arc;
    next unless base($ob_of{$from}) eq 'ptrack.so';
    printf "E\t%s\t%s\t%s\t%d\t%d\n", $from, $to, base($ob_of{$to}), $arc_calls{$arc}, $arc_incl{$arc};
}
print "T\t$total\n";
PERL

# Calls or inclusive Ir of one function in a stats file: NAME is a C name or a
# qualified C++ name without its parameter list.  The compiler's cold part of
# a function ("... [clone .cold]", reached by a jump that callgrind counts as
# a call, and whose cost the function's inclusive Ir holds) is left out.
stat_of() {   # stat_of STATSFILE NAME FIELD(calls|incl)
    awk -F'\t' -v n="$2" -v f="$3" '
        $1 == "F" && ($2 == n || index($2, n "(") == 1) && $2 !~ /\[clone \.cold\]$/ { c += $4; i += $5 }
        END { print (f == "calls" ? c + 0 : i + 0) }' "$1"
}
total_of() { awk -F'\t' '$1 == "T" { print $2 }' "$1"; }

# Inclusive Ir of the functions driven by the wall clock (see the header).
clock_of() {   # clock_of STATSFILE
    local sum=0 f
    for f in $clock_fns; do
        sum=$((sum + $(stat_of "$1" "$f" incl)))
    done
    echo "$sum"
}

# ---------------------------------------------------------------- one run
# run_one LABEL WORKLOAD CONFIG MAP_MB SLOT: copies the template, runs the
# script under callgrind, checks the run, writes $work/runs/LABEL.tsv.
run_one() {
    local label=$1 wl=$2 cfg=$3 map=$4 slot=$5
    # Same path length in every run: paths are measured too (canonicalize_path).
    local dd="$work/data$slot" sb tmpl expect_ckpt t0 t1 cg="$work/cg/$label.out" st="$work/stats/$label"
    local -a opts=()
    if [ "$wl" = evict-update ]; then sb=$update_sb expect_ckpt=2; else sb=$select_sb expect_ckpt=1; fi
    if [ "$cfg" = baseline ]; then
        tmpl="$work/tmpl-none"
    else
        tmpl="$work/tmpl-$map"
        opts=(-c "shared_preload_libraries=$so_lib" -c "ptrack.map_size=$map")
    fi
    as_pg rm -rf "$dd"
    as_pg cp -a "$tmpl" "$dd"
    t0=$(date +%s)
    if ! as_pg valgrind --tool=callgrind --trace-children=no --compress-strings=no --compress-pos=no \
        --dump-before="$marker_fn" --log-file="$work/log/$label.valgrind" --callgrind-out-file="$cg" \
        "$bin/postgres" --single -D "$dd" -c "shared_buffers=$sb" -c "fsync=$fsync" \
        -c synchronous_commit=off -c log_checkpoints=on -c "log_line_prefix=$log_prefix" "${opts[@]}" postgres \
        <"$work/sql/$wl.sql" >"$work/log/$label.stdout" 2>"$work/log/$label.stderr"; then
        tail -n 20 "$work/log/$label.stderr" "$work/log/$label.valgrind" >&2
        die "$label: postgres --single under callgrind failed"
    fi
    t1=$(date +%s)
    as_pg rm -rf "$dd"
    if grep -Eq '(ERROR|FATAL|PANIC):' "$work/log/$label.stderr" "$work/log/$label.stdout"; then
        grep -E '(ERROR|FATAL|PANIC):' "$work/log/$label.stderr" "$work/log/$label.stdout" | head >&2
        die "$label: the SQL script reported errors"
    fi
    local ckpts
    ckpts=$(grep -c 'checkpoint starting' "$work/log/$label.stderr" || true)
    [ "$ckpts" = "$expect_ckpt" ] ||
        die "$label: $ckpts checkpoints, expected $expect_ckpt (see $work/log/$label.stderr)"
    # Part 1 (head) and 2 (body) are the marker dumps, the last (tail) is at exit.
    [ -f "$cg.1" ] && [ -f "$cg.2" ] && [ -f "$cg" ] && [ ! -f "$cg.3" ] ||
        die "$label: expected exactly two marker dumps from callgrind"
    perl "$work/cgstats.pl" "$cg.1" >"$st.head.tsv" &&
        perl "$work/cgstats.pl" "$cg.2" >"$st.body.tsv" &&
        perl "$work/cgstats.pl" "$cg" >"$st.tail.tsv" &&
        perl "$work/cgstats.pl" "$cg.1" "$cg.2" "$cg" >"$st.all.tsv" ||
        die "$label: cannot parse the callgrind output"
    [ "$(stat_of "$st.all.tsv" "$marker_fn" calls)" = 2 ] || die "$label: the marker did not run twice"

    # Proof of configuration.
    local mdw mde hw he hwb heb
    # md.c's writers: mdwrite (15) or mdwritev (17 and later, whose hook
    # fires once per block of the vector), mdextend and, from 17 on,
    # mdzeroextend (one hook call per block added).  Exactly one of each
    # pair exists in a given server, so the sums are the calls of that version.
    mdw=$(( $(stat_of "$st.all.tsv" mdwrite calls) + $(stat_of "$st.all.tsv" mdwritev calls) ))
    mde=$(( $(stat_of "$st.all.tsv" mdextend calls) + $(stat_of "$st.all.tsv" mdzeroextend calls) ))
    hwb=0 heb=0
    if [ "$cfg" = baseline ]; then
        ! grep -Eq '(LOG|WARNING|ERROR):.*ptrack' "$work/log/$label.stderr" ||
            die "$label: the baseline log mentions ptrack"
        [ "$(awk -F'\t' '$1 == "F" && $3 == "ptrack.so" { c++ } END { print c + 0 }' "$st.all.tsv")" = 0 ] ||
            die "$label: ptrack.so code ran in a baseline run"
        hw=0 he=0
    else
        local hook='ptrack::pg::(anonymous namespace)::ptrack_md' flush startup
        grep -q 'ptrack loaded map file' "$work/log/$label.stderr" ||
            die "$label: ptrack did not load its map file (see $work/log/$label.stderr)"
        # The write hook: ptrack_mdwritev where the core patch has
        # mdwritev_hook (once per md.c write), else ptrack_mdwrite.
        hw=$(( $(stat_of "$st.all.tsv" "${hook}write" calls) + $(stat_of "$st.all.tsv" "${hook}writev" calls) ))
        he=$(stat_of "$st.all.tsv" "${hook}extend" calls)
        hwb=$(( $(stat_of "$st.body.tsv" "${hook}write" calls) + $(stat_of "$st.body.tsv" "${hook}writev" calls) ))
        heb=$(stat_of "$st.body.tsv" "${hook}extend" calls)
        flush=$(stat_of "$st.all.tsv" ptrack::pg::flush_map calls)
        startup=$(stat_of "$st.all.tsv" 'ptrack::pg::(anonymous namespace)::ptrack_shmem_startup' calls)
        [ "$startup" = 1 ] || die "$label: ptrack_shmem_startup ran $startup times"
        [ "$flush" = "$expect_ckpt" ] || die "$label: flush_map ran $flush times, expected $expect_ckpt"
        # Equal on 15; from 17 on a vectored write or a zero-extension of n
        # blocks makes n hook calls, so at least one per md.c call.
        { [ "$hw" = "$mdw" ] && [ "$he" = "$mde" ]; } ||
            { [ "$major" -ge 17 ] && [ "$hw" -ge "$mdw" ] && [ "$he" -ge "$mde" ]; } ||
            die "$label: hook calls ($hw write, $he extend) do not match md.c's writes/extensions ($mdw, $mde)"
        if [ "$wl" = evict-update ] && [ "$hwb" -eq 0 ]; then
            echo "callgrind_overhead: WARNING: $label: no mdwrite between the markers:" \
                 "--short is too small for shared_buffers to fill and evict" >&2
        fi
    fi
    local p
    {
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' "$label" "$wl" "$cfg" "$map" "$((t1 - t0))" "$mdw" "$mde" \
            "$hwb" "$heb"
        for p in head body tail; do
            printf '\t%s\t%s' "$(total_of "$st.$p.tsv")" "$(clock_of "$st.$p.tsv")"
        done
        printf '\n'
    } >"$work/runs/$label.tsv"
    printf '  %-30s Ir %15s  %5ss  mdwrite %6s  mdextend %5s\n' "$label" "$(total_of "$st.all.tsv")" \
        "$((t1 - t0))" "$mdw" "$mde"
}

# A tiny job pool: at most $jobs runs at a time; any failure stops the script.
# Finished runs are found by polling (kill -0) and then reaped with `wait PID`,
# which returns that run's own exit status.
declare -A job_label=()
wait_one() {
    local pid q
    local -a alive
    while :; do
        for pid in "${job_pids[@]}"; do
            kill -0 "$pid" 2>/dev/null && continue
            wait "$pid" || die "run ${job_label[$pid]} failed"
            alive=()
            for q in "${job_pids[@]}"; do [ "$q" = "$pid" ] || alive+=("$q"); done
            job_pids=("${alive[@]+"${alive[@]}"}")
            return 0
        done
        sleep 1
    done
}
job_count=0
submit() {   # submit LABEL WORKLOAD CONFIG MAP_MB
    while [ ${#job_pids[@]} -ge "$jobs" ]; do wait_one; done
    job_count=$((job_count + 1))
    run_one "$@" "$(printf '%03d' "$job_count")" &
    job_pids+=("$!")
    job_label[$!]=$1
}
wait_all() { while [ ${#job_pids[@]} -gt 0 ]; do wait_one; done; }

# ------------------------------------------------------------------ header
so_md5=$(md5_of "$so_lib")
so_mtime=$(date -u -r "$pkglib/ptrack.so" '+%Y-%m-%d %H:%M:%S UTC')
git_rev=$(tree_rev)
{
report_header "instructions per transaction, ptrack preloaded vs not"
report_load "does not change instruction counts"
report_postgres
echo "ptrack.so:  copy of $pkglib/ptrack.so (installed $so_mtime), md5 $so_md5, tree $git_rev"
echo "valgrind:   $(valgrind --version), callgrind, --trace-children=no, whole process counted"
echo "runs as:    $pguser; $jobs run(s) in parallel"
echo "settings:   postgres --single, pgbench scale $scale, markers after N = $short and $long, seed $seed,"
echo "            fsync=$fsync, synchronous_commit=off, other settings default; map sizes $map_sizes MB"
for w in "${workload_list[@]}"; do
    if [ "$w" = evict-update ]; then
        echo "workload:   evict-update: shared_buffers $update_sb, random single-row UPDATEs of pgbench_accounts, then CHECKPOINT"
    else
        echo "workload:   select-only: shared_buffers $select_sb, random single-row SELECTs of pgbench_accounts"
    fi
done
echo
} | tee "$work/report.txt"

# --------------------------------------------------------- data templates
t0=$(date +%s)
init_dd="$work/init"
server_initdb "$init_dd" "$work/log/initdb.log"
server_start "$init_dd" "$work/log/init-server.log" "initialisation server" \
    -o "-c listen_addresses='' -c unix_socket_directories='$sock' -p $port -c autovacuum=off"
load_pgbench "$scale" "$work/log/pgbench-init.log"
server_stop "$init_dd"
[ ! -f "$init_dd/postmaster.pid" ] || die "initialisation server did not stop"

# One empty single-user session per configuration: the same shutdown
# checkpoint everywhere, and a ptrack.map of the right size for ptrack runs.
make_template() {   # make_template NAME [postgres options]
    local name=$1
    shift
    as_pg cp -a "$work/init" "$work/tmpl-$name"
    as_pg "$bin/postgres" --single -D "$work/tmpl-$name" -c "fsync=$fsync" "$@" postgres \
        </dev/null >"$work/log/tmpl-$name.stdout" 2>"$work/log/tmpl-$name.stderr" ||
        { cat "$work/log/tmpl-$name.stderr" >&2; die "template $name: single-user session failed"; }
}
redo_of() { as_pg "$bin/pg_controldata" -D "$1" | sed -n "s/^Latest checkpoint's REDO location: *//p"; }
make_template none
redo=$(redo_of "$work/tmpl-none")
for m in "${map_list[@]}"; do
    make_template "$m" -c "shared_preload_libraries=$so_lib" -c "ptrack.map_size=$m"
    [ -f "$work/tmpl-$m/ptrack.map" ] || die "template $m: no ptrack.map written"
    [ "$(redo_of "$work/tmpl-$m")" = "$redo" ] || die "template $m: REDO location differs from the baseline template"
done
as_pg rm -rf "$work/init"
for w in "${workload_list[@]}"; do
    gen_sql "$w" "$work/sql/$w.sql"
done
echo "# templates ready in $(( $(date +%s) - t0 ))s (REDO $redo); callgrind runs:" | tee -a "$work/report.txt"

# -------------------------------------------------------------------- runs
t0=$(date +%s)
# The biggest runs first, so that the pool does not end with one long job.
for ((i = ${#map_list[@]} - 1; i >= 0; i--)); do
    for w in "${workload_list[@]}"; do
        submit "$w-ptrack${map_list[$i]}" "$w" ptrack "${map_list[$i]}"
    done
done
for w in "${workload_list[@]}"; do
    submit "$w-baseline" "$w" baseline 0
    if [ $repeat -eq 1 ] && [ "$w" = evict-update ]; then
        submit "$w-baseline-repeat" "$w" baseline 0
    fi
done
wait_all
echo "# all runs done in $(( $(date +%s) - t0 ))s" | tee -a "$work/report.txt"
echo | tee -a "$work/report.txt"

# ------------------------------------------------------------------ report
cat "$work"/runs/*.tsv >"$work/runs.tsv"
perl - "$work/runs.tsv" "$work/stats" "$short" "$long" "$clock_fns" <<'PERL' | tee -a "$work/report.txt"
use strict;
use warnings;
my ($runs_file, $stats_dir, $short, $long, $clock_fns) = @ARGV;
my %clock_fn = map { $_ => 1 } split ' ', $clock_fns;
my $dn = $long - $short;

# $run{workload}{config or 'repeat'}; configs ordered baseline, then by map size.
my (%run, %cfg_map, %seen_wl, @workloads);
open my $rf, '<', $runs_file or die "$runs_file: $!";
while (<$rf>) {
    chomp;
    my ($label, $wl, $cfg, $map, $wall, $mdw, $mde, $hwb, $heb, $h, $hc, $b, $bc, $t, $tc) = split /\t/;
    my $c = $label =~ /-repeat$/ ? 'repeat' : $cfg eq 'baseline' ? 'baseline' : "ptrack $map MB";
    $run{$wl}{$c} = { label => $label, wall => $wall, mdw => $mdw, mde => $mde, marks => $hwb + $heb,
                      head => $h - $hc, body => $b - $bc, tail => $t - $tc, clock => $hc + $bc + $tc,
                      raw => $h + $b + $t, rawbody => $b };
    $cfg_map{$c} = $c eq 'repeat' ? -1 : $map;
    push @workloads, $wl unless $seen_wl{$wl}++;
}
close $rf;
my @configs = grep { $_ ne 'repeat' } sort { $cfg_map{$a} <=> $cfg_map{$b} } keys %cfg_map;
@workloads = sort { ($a ne 'evict-update') <=> ($b ne 'evict-update') || $a cmp $b } @workloads;

sub short_name {
    my $f = shift;
    $f =~ s/\(anonymous namespace\):://g;
    $f =~ s/^ptrack::pg:://;
    $f =~ s/\(.*$//;
    return $f;
}
sub load_stats {   # load_stats LABEL PART -> (functions, arcs out of ptrack.so)
    my ($label, $part) = @_;
    my (%fn, @arcs);
    open my $sf, '<', "$stats_dir/$label.$part.tsv" or die "$label.$part: $!";
    while (<$sf>) {
        chomp;
        my @f = split /\t/;
        if ($f[0] eq 'F') {
            my $k = short_name($f[1]);
            $fn{$k}{obj} = $f[2];
            $fn{$k}{calls} += $f[3];
            $fn{$k}{incl} += $f[4];
            $fn{$k}{self} += $f[5];
        } elsif ($f[0] eq 'E') {
            push @arcs, { from => short_name($f[1]), to => short_name($f[2]), obj => $f[3], calls => $f[4],
                          incl => $f[5] };
        }
    }
    close $sf;
    return (\%fn, \@arcs);
}
sub commas { my $x = sprintf '%.0f', shift; 1 while $x =~ s/^(-?\d+)(\d{3})/$1,$2/; return $x; }
sub fnv { my ($s, $name, $what) = @_; return $s->{$name} ? $s->{$name}{$what} // 0 : 0; }

print "## Runs (one process each; Ir without the clock-driven part, which is shown separately)\n";
printf "%-13s %-15s %14s %14s %14s %10s %6s %8s %8s\n", 'workload', 'config', "head 1-$short",
    "body " . ($short + 1) . "-$long", 'tail', 'clock', 'wall s', 'mdwrite', 'mdextend';
for my $wl (@workloads) {
    for my $c (@configs, 'repeat') {
        my $r = $run{$wl}{$c} or next;
        printf "%-13s %-15s %14s %14s %14s %10s %6d %8s %8s\n", $wl, $c eq 'repeat' ? 'baseline again' : $c,
            commas($r->{head}), commas($r->{body}), commas($r->{tail}), commas($r->{clock}), $r->{wall},
            commas($r->{mdw}), commas($r->{mde});
    }
}
for my $wl (@workloads) {
    my ($a, $b) = ($run{$wl}{baseline}, $run{$wl}{repeat});
    next unless $a && $b;
    printf "repeatability (%s baseline, two runs): body differs by %s Ir (%+.2f Ir/txn, %+.5f%%), raw by %s Ir;\n",
        $wl, commas($b->{body} - $a->{body}), ($b->{body} - $a->{body}) / $dn,
        100 * ($b->{body} - $a->{body}) / $a->{body}, commas($b->{rawbody} - $a->{rawbody});
    printf "  whole run differs by %s Ir without clock, %s Ir raw\n", commas(($b->{head} + $b->{body} + $b->{tail})
        - ($a->{head} + $a->{body} + $a->{tail})), commas($b->{raw} - $a->{raw});
}

print "\n## Per-transaction (marginal) cost, from the body\n";
print "Ir/txn = body / $dn; overhead = (ptrack - baseline) / baseline of Ir/txn.  The difference splits into\n";
print "  ptrack code: inclusive Ir of the hooks (ptrack_mdwrite[v], ptrack_mdextend, with what they call) plus\n";
print "               the extra self Ir of mdwrite/mdextend (passing the arguments to the hook);\n";
print "  other:       everything else, i.e. PostgreSQL and libc code running with different instruction\n";
print "               counts because loading ptrack moved memory addresses (see the layout list below).\n";
print "marks/txn: hook calls per transaction; Ir/mark: hook inclusive Ir per call (both in the body).\n";
printf "%-13s %-15s %10s %9s %10s %10s %11s %10s %9s %8s\n", 'workload', 'config', 'Ir/txn', 'diff', 'overhead',
    'ptrack', 'ptrack %', 'other', 'marks/txn', 'Ir/mark';
my (%res, %layout);
for my $wl (@workloads) {
    my ($base, $bstats);
    for my $c (@configs) {
        my $r = $run{$wl}{$c} or next;
        my $m = $r->{body} / $dn;
        if ($c eq 'baseline') {
            $base = $m;
            ($bstats) = load_stats($r->{label}, 'body');
            printf "%-13s %-15s %10.1f %9s %10s %10s %11s %10s %9s %8s\n", $wl, $c, $m, ('-') x 7;
            next;
        }
        next unless defined $base;
        my ($body, $arcs) = load_stats($r->{label}, 'body');
        my $hooks = fnv($body, 'ptrack_mdwrite', 'incl') + fnv($body, 'ptrack_mdwritev', 'incl')
          + fnv($body, 'ptrack_mdextend', 'incl');
        my $sites = 0;
        $sites += fnv($body, $_, 'self') - fnv($bstats, $_, 'self') for qw(mdwrite mdwritev mdextend mdzeroextend);
        my $code = ($hooks + $sites) / $dn;
        my $d = $m - $base;
        my $ov = 100 * $d / $base;
        my $cov = 100 * $code / $base;
        printf "%-13s %-15s %10.1f %+9.1f %+9.4f%% %10.1f %+10.4f%% %+10.1f %9.3f %8s\n", $wl, $c, $m, $d, $ov,
            $code, $cov, $d - $code, $r->{marks} / $dn, $r->{marks} ? sprintf('%.1f', $hooks / $r->{marks}) : '-';
        $res{$wl}{ $cfg_map{$c} }{ov} = $ov;
        $res{$wl}{ $cfg_map{$c} }{cov} = $cov;
        # Layout list: self Ir differences outside ptrack.so and outside what ptrack.so calls.
        my %called = map { $_->{to} => 1 } @$arcs;
        my %names = map { $_ => 1 } keys %$body, keys %$bstats;
        my @diffs;
        for my $f (keys %names) {
            next if ($body->{$f}{obj} // '') eq 'ptrack.so' || $called{$f} || $f =~ /^md(write|writev|extend|zeroextend)$/
                || $clock_fn{$f};
            my $dd = fnv($body, $f, 'self') - fnv($bstats, $f, 'self');
            push @diffs, [$f, $dd] if abs($dd) / $dn >= 0.05;
        }
        $layout{"$wl, $c"} = [sort { abs($b->[1]) <=> abs($a->[1]) || $a->[0] cmp $b->[0] } @diffs];
    }
}
print "\nLayout effects: functions outside ptrack.so (not called by it, not clock-driven) whose self Ir\n";
print "in the body differs from the baseline's, largest first (Ir per transaction).  glibc's AVX2 string\n";
print "functions take a different number of instructions depending on the alignment of their arguments;\n";
print "the self Ir of the clock-driven functions' callees still varies a little with the run's duration.\n";
for my $k (sort keys %layout) {
    my @top = grep { defined } @{ $layout{$k} }[0 .. 5];
    printf "  [%s] %s\n", $k, @top ? join(', ', map { sprintf '%s %+.1f', $_->[0], $_->[1] / $dn } @top) : 'none';
}

print "\n## Fixed cost per process\n";
print "fixed = head + tail - Ir/txn * $short; fixed - base splits into start (start-up, i.e. head minus the\n";
print "marginal difference of its $short transactions) and end (tail: final CHECKPOINT, shutdown, exit).\n";
printf "%-13s %-15s %16s %16s %16s %16s\n", 'workload', 'config', 'fixed Ir', 'fixed - base', 'start', 'end';
for my $wl (@workloads) {
    my $base;
    for my $c (@configs) {
        my $r = $run{$wl}{$c} or next;
        my $m = $r->{body} / $dn;
        my $fixed = $r->{head} + $r->{tail} - $m * $short;
        if ($c eq 'baseline') {
            $base = { m => $m, fixed => $fixed, head => $r->{head}, tail => $r->{tail} };
            printf "%-13s %-15s %16s %16s %16s %16s\n", $wl, $c, commas($fixed), ('-') x 3;
            next;
        }
        next unless $base;
        my $start = $r->{head} - $base->{head} - ($m - $base->{m}) * $short;
        printf "%-13s %-15s %16s %16s %16s %16s\n", $wl, $c, commas($fixed), commas($fixed - $base->{fixed}),
            commas($start), commas($r->{tail} - $base->{tail});
        $res{$wl}{ $cfg_map{$c} }{fd} = $fixed - $base->{fixed};
    }
}

print "\n## Where ptrack's instructions go (whole run: calls and inclusive Ir summed over all calls)\n";
for my $wl (@workloads) {
    for my $c (@configs) {
        next if $c eq 'baseline';
        my $r = $run{$wl}{$c} or next;
        my ($fn, $arcs) = load_stats($r->{label}, 'all');
        print "[$wl, $c]\n";
        printf "  %-46s %10s %15s %12s\n", 'function in ptrack.so', 'calls', 'inclusive Ir', 'Ir/call';
        my @names = grep { $fn->{$_}{obj} eq 'ptrack.so' && $fn->{$_}{calls} > 0 } keys %$fn;
        @names = sort { $fn->{$b}{incl} <=> $fn->{$a}{incl} || $a cmp $b } @names;
        for my $f (grep { defined } @names[0 .. 13]) {
            printf "  %-46s %10s %15s %12.1f\n", $f, commas($fn->{$f}{calls}), commas($fn->{$f}{incl}),
                $fn->{$f}{incl} / $fn->{$f}{calls};
        }
        my @out = sort { $b->{incl} <=> $a->{incl} } grep { $_->{obj} ne 'ptrack.so' } @$arcs;
        printf "  %-46s %10s %15s %12s\n", 'call from ptrack.so into postgres or libc', 'calls', 'inclusive Ir',
            'Ir/call';
        for my $e (grep { defined } @out[0 .. 7]) {
            printf "  %-46s %10s %15s %12.1f\n", substr("$e->{from} -> $e->{to}", 0, 46), commas($e->{calls}),
                commas($e->{incl}), $e->{incl} / $e->{calls};
        }
    }
}

print "\n## Targets (reference, from the issue: C ptrack 2.x with a 64 MB map adds +0.14% Ir/txn on the\n";
print "## eviction-heavy update workload, plus ~420 M Ir of fixed cost)\n";
sub verdict { return $_[0] ? 'met' : 'NOT met'; }
print "  Each overhead twice: all code (the whole difference) / ptrack code only (layout effects removed).\n";
if (my $e = $res{'evict-update'}{64}) {
    printf "  64 MB, evict-update: %+.4f%% / %+.4f%% (target <= +0.07%%): %s / %s; fixed cost %s Ir (C: ~420,000,000)\n",
        $e->{ov}, $e->{cov}, verdict($e->{ov} <= 0.07), verdict($e->{cov} <= 0.07), commas($e->{fd});
}
if (my $s = $res{'select-only'}{64}) {
    printf "  64 MB, select-only:  %+.4f%% / %+.4f%% (target <= +0.01%%): %s / %s; fixed cost %s Ir\n",
        $s->{ov}, $s->{cov}, verdict($s->{ov} <= 0.01), verdict($s->{cov} <= 0.01), commas($s->{fd});
}
for my $wl (@workloads) {
    next unless $res{$wl}{64};
    for my $m (sort { $a <=> $b } keys %{ $res{$wl} }) {
        next if $m == 64;
        my $d = $res{$wl}{$m}{ov} - $res{$wl}{64}{ov};
        my $dc = $res{$wl}{$m}{cov} - $res{$wl}{64}{cov};
        printf "  %d MB vs 64 MB, %s: %+.4f / %+.4f points (target <= +0.03): %s / %s; fixed cost %s Ir\n",
            $m, $wl, $d, $dc, verdict($d <= 0.03), verdict($dc <= 0.03), commas($res{$wl}{$m}{fd});
    }
}
print "  Instruction counts only: the cache and TLB misses of a large map are not counted.\n";
PERL

if [ -n "$results_copy" ]; then
    cp "$work/report.txt" "$results_copy"
    echo "report copied to $results_copy"
fi
if [ $keep -eq 1 ]; then
    echo "callgrind.out files: $work/cg (callgrind_annotate --inclusive=yes FILE; .1 head, .2 body, no suffix tail)"
fi
