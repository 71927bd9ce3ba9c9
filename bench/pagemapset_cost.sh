#!/usr/bin/env bash
#
# pagemapset_cost.sh -- what does ptrack_get_pagemapset(L) cost in the
# server, against what a backup tool does without change tracking?
#
# A pgbench database of about 2 GB (scale 140) with ptrack.map_size = 64 MB.
# Each round: VACUUM, pick the pgbench_accounts pages to change, CHECKPOINT,
# L = pg_current_wal_insert_lsn(), update one row on each picked page,
# CHECKPOINT, then time
#   (a) ptrack_get_pagemapset(L), default settings (segment summary on);
#   (b) the same with ptrack.use_segment_summary = off (developer GUC: every
#       block of every file is probed, no segment is skipped);
#   (c) no tracking: a small C++ reader (compiled from this script) that
#       reads every page of every relation file of the data directory and
#       keeps those whose page LSN >= L, run read-only over the running
#       server's directory, with a warm page cache and, as root, a cold one
#       (sync; echo 3 > /proc/sys/vm/drop_caches before each cold run).
# (a) and (b) are timed inside the server: the "actual time" of the Function
# Scan node of EXPLAIN (ANALYZE, TIMING ON) SELECT count(*) FROM
# ptrack_get_pagemapset(L), i.e. the function's own execution, not psql's.
# Each of S sessions (fresh connections) makes C calls: the first call of a
# session pays the page faults of a new backend on the shared map and is
# reported apart ("first"); calls 2..C are "repeated".  Medians are reported.
#
# Rounds (pages changed = pgbench_accounts pages with one row updated):
#   0%        nothing changed
#   1% spread every 100th page (every 1 GB segment of the table changes)
#   1% range  the first 1% of the pages (one segment changes)
#   10% spread, 10% range
#   100%      every page
# How many blocks really changed in the whole database (heap, index, VM,
# catalogs) is counted with the page-LSN oracle (t/lib/PtrackOracle.pm):
# main-fork blocks with page LSN >= L plus blocks beyond a file's length at
# L; the same pass counts misses (changed but not listed: must be 0).
#
# The database takes minutes to load; --datadir keeps it between runs (it is
# created there if missing, and reused if it holds a cluster of this script
# with the same scale).  Without --datadir it lives in the temp dir and is
# removed at the end.
#
# Run as root (servers run as ptrack_test through runuser; the cold-cache
# figures need root) or as a normal user.  The server listens on a Unix
# socket in a private temp dir only and is stopped by its postmaster PID at
# the end, also on failure.  That plumbing, the options --port, --keep,
# --prefix and the machine lines of the report are shared with the other
# benchmarks in bench/lib.sh.
#
# Usage: bench/pagemapset_cost.sh [options]
#   --datadir DIR     cluster directory to create or reuse (default: temp)
#   --scale N         pgbench scale (default 140, about 2.1 GB)
#   --map-size MB     ptrack.map_size (default 64)
#   --sessions N      fresh connections per variant and round (default 5)
#   --calls N         calls per session, the first one reported apart (default 6)
#   --scans N         runs of the full-read reader (c) per cache state (default 3)
#   --rounds LIST     comma list of 0,1s,1r,10s,10r,100 (default: all)
#   --no-cold         skip the cold-cache figures
#   --no-oracle       skip the page-LSN oracle pass
#   --port N          port of the server's socket (default 56101)
#   --quick           smoke run: scale 10, 2 sessions, 3 calls, 1 scan,
#                     rounds 0,1s,100 (explicit options still win)
#   --keep            keep the temp dir (logs) at the end
#   --prefix DIR      PostgreSQL prefix (default: PG_PREFIX, else
#                     scripts/build-postgres.sh --print-prefix)
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
pg_ctl_timeout=600

datadir='' scale='' map_size=64 sessions='' calls='' scans='' rounds='' cold=1 oracle=1
port=56101 quick=0 keep=0 prefix=${PG_PREFIX:-}
cmdline=$(printf '%q ' "$0" "$@")

while [ $# -gt 0 ]; do
    case $1 in
        --datadir) datadir=${2:?}; shift ;;
        --scale) scale=${2:?}; shift ;;
        --map-size) map_size=${2:?}; shift ;;
        --sessions) sessions=${2:?}; shift ;;
        --calls) calls=${2:?}; shift ;;
        --scans) scans=${2:?}; shift ;;
        --rounds) rounds=${2:?}; shift ;;
        --no-cold) cold=0 ;;
        --no-oracle) oracle=0 ;;
        --quick) quick=1 ;;
        *) common_option "$@" && shift ;;   # --port, --keep, --prefix, --help
    esac
    shift
done
if [ $quick -eq 1 ]; then
    scale=${scale:-10} sessions=${sessions:-2} calls=${calls:-3} scans=${scans:-1} rounds=${rounds:-0,1s,100}
fi
scale=${scale:-140} sessions=${sessions:-5} calls=${calls:-6} scans=${scans:-3} rounds=${rounds:-0,1s,1r,10s,10r,100}

for v in "$scale" "$map_size" "$sessions" "$calls" "$scans" "$port"; do
    is_int "$v" || die "not a non-negative integer: $v"
done
[ "$scale" -ge 1 ] && [ "$map_size" -ge 1 ] && [ "$sessions" -ge 1 ] && [ "$calls" -ge 2 ] &&
    [ "$scans" -ge 1 ] || die "--scale, --map-size, --sessions, --scans must be >= 1 and --calls >= 2"
IFS=, read -r -a round_list <<<"$rounds"
for r in "${round_list[@]}"; do
    case $r in 0|1s|1r|10s|10r|100) ;; *) die "unknown round: $r" ;; esac
done

[ -r "$repo/t/lib/PtrackOracle.pm" ] || die "missing $repo/t/lib/PtrackOracle.pm"
find_postgres postgres pg_ctl initdb pgbench psql pg_config
command -v g++ >/dev/null || die "g++ is needed for the full-read reader"

pg_user_setup
[ "$(id -u)" -eq 0 ] || cold=0
if [ $cold -eq 1 ] && ! [ -w /proc/sys/vm/drop_caches ]; then
    echo "# note: /proc/sys/vm/drop_caches is not writable: no cold-cache figures"
    cold=0
fi

make_work ptrack-pagemapset 700   # also the socket directory, $sock
own_datadir=0
if [ -z "$datadir" ]; then
    datadir="$work/data"
    own_datadir=1
fi
datadir=$(realpath -m "$datadir")

start_server() {
    server_start "$datadir" "$work/server.log" server
    psql_q "CREATE EXTENSION IF NOT EXISTS ptrack" >/dev/null
    psql_q "SELECT ptrack_init_lsn()" >/dev/null   # fixes init_lsn before any L is taken
}

# ------------------------------------------------------ the full-read reader
cat >"$work/lsn_scan.cpp" <<'EOF'
// lsn_scan PGDATA LSN: what a backup tool does without change tracking.
// Reads every page of every permanent relation segment file (global/,
// base/<db>/, pg_tblspc/<spc>/PG_<major>_*/<db>/; temporary files skipped)
// and counts the pages whose header LSN (pd_lsn, native byte order) is
// >= LSN.  Read-only.  Prints one line of key=value figures; "ms" is the
// wall time of the whole walk and read, "cpu_ms" the process's CPU time.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kPage = 8192;
constexpr size_t kBuffer = 128 * kPage;

struct Totals {
    uint64_t files = 0, pages = 0, bytes = 0, changed = 0, changed_main = 0;
};

std::vector<std::string> list_dir(const std::string& dir)
{
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    if (d == nullptr)
        return names;
    while (dirent* de = readdir(d)) {
        if (std::strcmp(de->d_name, ".") != 0 && std::strcmp(de->d_name, "..") != 0)
            names.emplace_back(de->d_name);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

bool all_digits(const char* s, size_t n)
{
    if (n == 0 || s[0] == '0')
        return false;
    for (size_t i = 0; i < n; ++i)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

// <relfilenode>[_fsm|_vm|_init][.<segno>]; sets *main for the main fork.
bool relation_file_name(const std::string& name, bool* main)
{
    const char* s = name.c_str();
    size_t n = std::strspn(s, "0123456789");
    if (!all_digits(s, n))
        return false;
    const char* rest = s + n;
    *main = true;
    for (const char* fork : {"_fsm", "_vm", "_init"}) {
        const size_t len = std::strlen(fork);
        if (std::strncmp(rest, fork, len) == 0) {
            rest += len;
            *main = false;
            break;
        }
    }
    if (*rest == '\0')
        return true;
    return *rest == '.' && all_digits(rest + 1, std::strlen(rest + 1));
}

void scan_file(const std::string& path, bool main, uint64_t since, char* buffer, Totals* t)
{
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0)
        return;  // dropped meanwhile
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    t->files++;
    for (;;) {
        const ssize_t got = read(fd, buffer, kBuffer);
        if (got <= 0)
            break;
        t->bytes += static_cast<uint64_t>(got);
        for (size_t off = 0; off + kPage <= static_cast<size_t>(got); off += kPage) {
            uint32_t hi, lo;
            std::memcpy(&hi, buffer + off, 4);
            std::memcpy(&lo, buffer + off + 4, 4);
            const uint64_t lsn = (uint64_t{hi} << 32) | lo;
            t->pages++;
            if (lsn >= since) {
                t->changed++;
                t->changed_main += main;
            }
        }
    }
    close(fd);
}

void scan_dir(const std::string& dir, uint64_t since, char* buffer, Totals* t)
{
    for (const std::string& name : list_dir(dir)) {
        bool main = false;
        if (!relation_file_name(name, &main))
            continue;  // also skips temporary files (t<backend>_<relfilenode>)
        const std::string path = dir + "/" + name;
        struct stat st;
        if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        scan_file(path, main, since, buffer, t);
    }
}

bool oid_name(const std::string& s) { return all_digits(s.c_str(), s.size()); }

}  // namespace

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: lsn_scan PGDATA X/X\n");
        return 2;
    }
    unsigned hi = 0, lo = 0;
    if (std::sscanf(argv[2], "%X/%X", &hi, &lo) != 2) {
        std::fprintf(stderr, "lsn_scan: not an LSN: %s\n", argv[2]);
        return 2;
    }
    const uint64_t since = (uint64_t{hi} << 32) | lo;
    const std::string pgdata = argv[1];
    std::string major;
    if (FILE* f = std::fopen((pgdata + "/PG_VERSION").c_str(), "r")) {
        char line[32] = {0};
        if (std::fgets(line, sizeof(line), f))
            major = std::string(line, std::strcspn(line, "\n"));
        std::fclose(f);
    }
    std::vector<char> buffer(kBuffer);
    Totals t;
    const auto start = std::chrono::steady_clock::now();
    scan_dir(pgdata + "/global", since, buffer.data(), &t);
    for (const std::string& db : list_dir(pgdata + "/base"))
        if (oid_name(db))
            scan_dir(pgdata + "/base/" + db, since, buffer.data(), &t);
    const std::string prefix = "PG_" + major + "_";
    for (const std::string& spc : list_dir(pgdata + "/pg_tblspc")) {
        if (!oid_name(spc))
            continue;
        const std::string spc_dir = pgdata + "/pg_tblspc/" + spc;
        for (const std::string& version : list_dir(spc_dir)) {
            if (version.compare(0, prefix.size(), prefix) != 0)
                continue;
            for (const std::string& db : list_dir(spc_dir + "/" + version))
                if (oid_name(db))
                    scan_dir(spc_dir + "/" + version + "/" + db, since, buffer.data(), &t);
        }
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    std::printf("files=%llu pages=%llu bytes=%llu changed=%llu changed_main=%llu ms=%.1f cpu_ms=%.1f\n",
                static_cast<unsigned long long>(t.files), static_cast<unsigned long long>(t.pages),
                static_cast<unsigned long long>(t.bytes), static_cast<unsigned long long>(t.changed),
                static_cast<unsigned long long>(t.changed_main), ms, cpu.tv_sec * 1e3 + cpu.tv_nsec / 1e6);
    return 0;
}
EOF
g++ -std=c++17 -O2 -Wall -Wextra -o "$work/lsn_scan" "$work/lsn_scan.cpp" || die "cannot compile the reader"

# What a first touch of a shared-memory page costs a new process on this
# machine: the first ptrack call of a backend pays it for every 4 KB page of
# the map it reads (PostgreSQL's main segment, huge pages unavailable here).
cat >"$work/fault_cost.cpp" <<'EOF'
// fault_cost: a 64 MB MAP_SHARED|MAP_ANONYMOUS region (as PostgreSQL's main
// shared memory segment without huge pages) is filled by the parent; a
// forked child then reads one byte per 4 KB page, twice, and reports the
// CPU time (user + system, so robust to waiting for a CPU) and the minor
// page faults of each pass.  Prints the median of 3 children.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace {
double cpu_ms()
{
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
long minflt()
{
    rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}
}  // namespace

int main()
{
    const size_t bytes = size_t{64} << 20, page = 4096;
    char* region = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (region == MAP_FAILED)
        return 1;
    std::memset(region, 1, bytes);
    double first[3], again[3], faults[3];
    for (int r = 0; r < 3; ++r) {
        int fds[2];
        if (pipe(fds) != 0)
            return 1;
        const pid_t pid = fork();
        if (pid == 0) {
            volatile long sum = 0;
            const long f0 = minflt();
            const double t0 = cpu_ms();
            for (size_t i = 0; i < bytes; i += page)
                sum += region[i];
            const double t1 = cpu_ms();
            const long f1 = minflt();
            for (size_t i = 0; i < bytes; i += page)
                sum += region[i];
            const double t2 = cpu_ms();
            double out[3] = {t1 - t0, t2 - t1, static_cast<double>(f1 - f0)};
            if (write(fds[1], out, sizeof(out)) != sizeof(out))
                _exit(1);
            _exit(0);
        }
        double in[3] = {0, 0, 0};
        if (read(fds[0], in, sizeof(in)) != sizeof(in))
            return 1;
        waitpid(pid, nullptr, 0);
        close(fds[0]);
        close(fds[1]);
        first[r] = in[0];
        again[r] = in[1];
        faults[r] = in[2];
    }
    std::sort(first, first + 3);
    std::sort(again, again + 3);
    std::sort(faults, faults + 3);
    std::printf("first read of a 64 MB shared map in a new process: %.0f ms CPU, %.0f minor faults (%.1f us each);"
                " read again: %.1f ms\n", first[1], faults[1], first[1] * 1000 / faults[1], again[1]);
    return 0;
}
EOF
g++ -std=c++17 -O2 -Wall -Wextra -o "$work/fault_cost" "$work/fault_cost.cpp" || die "cannot compile fault_cost"

# ------------------------------------------------------- the page-LSN oracle
# baseline PGDATA OUT: file lengths right after L (PtrackOracle::block_counts).
# check PGDATA L BASELINE: reads the pages first, then asks the server; prints
# key=value counts of what really changed, what was listed, and misses.
{ bench_node_pl; cat <<'EOF'; } >"$work/oracle.pl"
use PtrackOracle qw(page_lsns relation_files block_counts pagemapset lsn_to_int);

my ($mode, $pgdata, @rest) = @ARGV;
if ($mode eq 'baseline')
{
	my $counts = block_counts($pgdata);
	open(my $out, '>', $rest[0]) or die "$rest[0]: $!";
	print $out "$_\t$counts->{$_}\n" foreach sort keys %$counts;
	close $out;
	exit 0;
}
die "usage: oracle.pl baseline|check ...\n" unless $mode eq 'check';
my ($lsn_text, $baseline_file) = @rest;
my $since = lsn_to_int($lsn_text);
my %had;
open(my $in, '<', $baseline_file) or die "$baseline_file: $!";
while (<$in>) { chomp; my ($p, $n) = split /\t/; $had{$p} = $n; }
close $in;

# 1. The disk first: every page seen was written before the server is asked.
my @checked;
foreach my $f (relation_files($pgdata))
{
	next if $f->{temp} || $f->{unlogged};
	push @checked, { f => $f, lsns => [ page_lsns($pgdata, $f->{path}) ], had => $had{ $f->{path} } // 0 };
}
# 2. The server.
my $node = BenchNode->new(pgdata => $pgdata, psql => [ split /\x1f/, $ENV{ORACLE_PSQL} ]);
my $map = pagemapset($node, 'postgres', $lsn_text);
# 3. Compare: truly changed = main fork with page LSN >= L, or beyond the length at L.
my %s = map { $_ => 0 } qw(blocks changed changed_lsn extended listed listed_fsm fp misses);
foreach my $c (@checked)
{
	my $f = $c->{f};
	my %listed = $map->{ $f->{path} } ? map { $_ => 1 } @{ $map->{ $f->{path} }{blocks} } : ();
	my $lsns = $c->{lsns};
	if ($f->{fork} eq 'fsm') { $s{listed_fsm} += scalar keys %listed; next; }
	for my $b (0 .. $#$lsns)
	{
		$s{blocks}++;
		my $by_lsn = $f->{fork} eq 'main' && $lsns->[$b] >= $since;
		my $ext = $b >= $c->{had};
		$s{changed_lsn}++ if $by_lsn;
		$s{extended}++ if $ext;
		my $changed = $by_lsn || $ext;
		$s{changed}++ if $changed;
		$s{listed}++ if $listed{$b};
		$s{misses}++ if $changed && !$listed{$b};
		$s{fp}++ if !$changed && $listed{$b};
	}
}
print join(' ', map { "$_=$s{$_}" } sort keys %s), "\n";
EOF

range_of() { tr ' ' '\n' | awk 'NF' | sort -g | awk 'NR==1{min=$1} {max=$1} END {if (NR) printf "%.1f-%.1f\n", min, max; else print "-"}'; }

# One session of variant $1 (a|b) at LSN $2: SELECT pg_backend_pid() first
# (as a backup tool runs other queries before), then $calls timed calls.
# Around each call the backend's on-CPU time (/proc/<pid>/schedstat, field 1,
# ns: robust to the waits for a CPU on a loaded machine) and minor page
# faults (/proc/<pid>/stat, field 10) are read.  Appends to FIRST, REPEATED
# (wall ms), FIRST_CPU, REPEATED_CPU (CPU ms) and FAULTS (first call).
session_calls() {
    local variant=$1 lsn=$2 i out opts='' script="$work/calls-$1.sql" probe="$work/probe.txt" times
    [ "$variant" = b ] && opts='-c ptrack.use_segment_summary=off'
    {
        echo 'SELECT pg_backend_pid() AS pid \gset'
        echo '\setenv BACKEND_PID :pid'
        echo "\\! echo \$(cut -d' ' -f1 /proc/\$BACKEND_PID/schedstat) \$(cut -d' ' -f10 /proc/\$BACKEND_PID/stat) >>$probe"
        for ((i = 1; i <= calls; i++)); do
            echo "EXPLAIN (ANALYZE, TIMING ON, COSTS OFF) SELECT count(*) FROM ptrack_get_pagemapset('$lsn');"
            echo "\\! echo \$(cut -d' ' -f1 /proc/\$BACKEND_PID/schedstat) \$(cut -d' ' -f10 /proc/\$BACKEND_PID/stat) >>$probe"
        done
    } | as_pg tee "$script" >/dev/null
    as_pg rm -f "$probe"
    out=$(as_pg env PGOPTIONS="$opts" "$bin/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" \
        -U postgres -d postgres -f "$script") || die "EXPLAIN ANALYZE failed"
    times=$(sed -n 's/.*Function Scan on ptrack_get_pagemapset.*actual time=[0-9.]*\.\.\([0-9.]*\) rows=.*/\1/p' <<<"$out")
    [ "$(wc -l <<<"$times")" -eq "$calls" ] || { echo "$out" >&2; die "unexpected EXPLAIN output"; }
    [ "$(wc -l <"$probe")" -eq $((calls + 1)) ] || die "unexpected probe output in $probe"
    FIRST+=" $(head -n 1 <<<"$times")"
    REPEATED+=" $(tail -n +2 <<<"$times" | tr '\n' ' ')"
    FIRST_CPU+=" $(awk 'NR == 2 {printf "%.1f", ($1 - c) / 1e6} {c = $1}' "$probe")"
    REPEATED_CPU+=" $(awk 'NR > 2 {printf "%.1f ", ($1 - c) / 1e6} {c = $1}' "$probe")"
    FAULTS+=" $(awk 'NR == 2 {print $2 - f} {f = $2}' "$probe")"
}

# $sessions sessions of each variant, alternating a and b (drift hits both).
# Fills R[<variant>_first|_rep|_first_cpu|_rep_cpu|_faults] from session_calls.
declare -A R
timed_variants() {
    local lsn=$1 s v k
    for v in a b; do
        for k in first rep first_cpu rep_cpu faults; do R[${v}_$k]=''; done
    done
    for ((s = 1; s <= sessions; s++)); do
        for v in a b; do
            FIRST='' REPEATED='' FIRST_CPU='' REPEATED_CPU='' FAULTS=''
            session_calls "$v" "$lsn"
            R[${v}_first]+=$FIRST R[${v}_rep]+=$REPEATED R[${v}_first_cpu]+=$FIRST_CPU
            R[${v}_rep_cpu]+=$REPEATED_CPU R[${v}_faults]+=$FAULTS
        done
    done
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# ------------------------------------------------------------------ header
so_md5=$(md5_of "$pkglib/ptrack.so")
git_rev=$(tree_rev)
report_header "ptrack_get_pagemapset(L) in the server vs reading every page"
report_load
echo "page fault: $("$work/fault_cost")"
report_postgres
echo "ptrack.so:  md5 $so_md5, tree $git_rev"
echo "settings:   scale $scale, ptrack.map_size ${map_size}MB, $sessions sessions x $calls calls per variant,"
echo "            $scans reader runs per cache state, rounds $rounds, cold cache $([ $cold -eq 1 ] && echo yes || echo no)"

# --------------------------------------------------------------- the cluster
if [ -f "$datadir/PG_VERSION" ]; then
    [ -f "$datadir/pagemapset_cost.scale" ] && [ "$(cat "$datadir/pagemapset_cost.scale")" = "$scale" ] ||
        die "$datadir holds a cluster that was not made by this script at scale $scale"
    as_pg sed -i "s|^unix_socket_directories = .*|unix_socket_directories = '$sock'|; s|^port = .*|port = $port|; s|^ptrack.map_size = .*|ptrack.map_size = $map_size|" \
        "$datadir/postgresql.conf"
    echo "cluster:    reusing $datadir"
    start_server
else
    [ -e "$datadir" ] && [ -n "$(ls -A "$datadir" 2>/dev/null)" ] && die "$datadir exists and is not empty"
    mkdir -p "$datadir"
    [ "$(id -u)" -eq 0 ] && chown "$pguser" "$datadir"
    chmod 700 "$datadir"
    server_initdb "$datadir" "$work/initdb.log"
    server_conf "$datadir" <<EOF
shared_buffers = 512MB
synchronous_commit = off
max_wal_size = 8GB
checkpoint_timeout = 1h
autovacuum = off
log_checkpoints = on
shared_preload_libraries = 'ptrack'
ptrack.map_size = $map_size
EOF
    start_server
    t0=$(date +%s)
    load_pgbench "$scale" "$work/init.log"
    echo "$scale" | as_pg tee "$datadir/pagemapset_cost.scale" >/dev/null
    echo "cluster:    created $datadir, pgbench -i -s $scale in $(( $(date +%s) - t0 ))s"
fi
db_bytes=$(psql_q "SELECT pg_database_size('postgres')")
echo "database:   $(psql_q "SELECT pg_size_pretty(pg_database_size('postgres'))") (postgres), map ${map_size}MB = 1/$(( db_bytes / (map_size * 1048576) )) of it;" \
     "huge_pages=$(psql_q "SHOW huge_pages") (HugePages_Total $(awk '/^HugePages_Total/ {print $2}' /proc/meminfo))"
echo

oracle_psql_env
perl_oracle() { perl -I"$repo/t/lib" "$work/oracle.pl" "$@"; }

# -------------------------------------------------------------------- rounds
# The cold-cache figures are taken once: in round 1s, else in the first round.
cold_round=${round_list[0]}
for r in "${round_list[@]}"; do [ "$r" = 1s ] && cold_round=1s; done
table="$work/table.txt"
: >"$table"
for r in "${round_list[@]}"; do
    case $r in
        0) pct=0 pattern=none ;;
        1s) pct=1 pattern=spread ;;
        1r) pct=1 pattern=range ;;
        10s) pct=10 pattern=spread ;;
        10r) pct=10 pattern=range ;;
        100) pct=100 pattern=all ;;
    esac
    echo "## round $r: $pct% of pgbench_accounts pages ($pattern)"
    t0=$(date +%s)
    psql_q "VACUUM pgbench_accounts" >/dev/null
    npages=$(psql_q "SELECT pg_relation_size('pgbench_accounts') / 8192")
    case $pattern in
        none) pages_sql="SELECT p FROM generate_series(0, -1) p" ;;
        spread) pages_sql="SELECT p FROM generate_series(0, $npages - 1, $((100 / pct))) p" ;;
        range) pages_sql="SELECT p FROM generate_series(0, ($npages * $pct) / 100 - 1) p" ;;
        all) pages_sql="SELECT p FROM generate_series(0, $npages - 1) p" ;;
    esac
    # One live row per picked page, found before L (the look-up may set hint bits).
    psql_q "DROP TABLE IF EXISTS bench_targets" \
        "CREATE UNLOGGED TABLE bench_targets AS SELECT (SELECT ctid FROM pgbench_accounts a
                WHERE a.ctid >= format('(%s,1)', p)::tid AND a.ctid < format('(%s,1)', p + 1)::tid LIMIT 1) AS t
            FROM ($pages_sql) pages" >/dev/null
    targets=$(psql_q "SELECT count(t) FROM bench_targets")
    # The CHECKPOINT writes what the preparation dirtied with marks whose LSN,
    # rounded up to the map's 64 KB granule, may reach past L: a WAL segment
    # switch puts L well after them (bench/false_positives.sh measures that
    # effect), so that "0%" lists nothing.
    psql_q "CHECKPOINT" "SELECT pg_switch_wal()" >/dev/null
    lsn=$(psql_q "SELECT pg_current_wal_insert_lsn()")
    [ $oracle -eq 1 ] && perl_oracle baseline "$datadir" "$work/baseline.tsv"
    t1=$(date +%s)
    psql_q "UPDATE pgbench_accounts SET abalance = abalance + 1
            WHERE ctid = ANY (ARRAY(SELECT t FROM bench_targets WHERE t IS NOT NULL))" >/dev/null
    psql_q "CHECKPOINT" >/dev/null
    t2=$(date +%s)
    listing=$(psql_q "SELECT count(*), coalesce(sum(pagecount), 0),
                             count(*) FILTER (WHERE path NOT LIKE '%\\_fsm'),
                             coalesce(sum(pagecount) FILTER (WHERE path NOT LIKE '%\\_fsm'), 0)
                      FROM ptrack_get_pagemapset('$lsn')")
    IFS='|' read -r rows_all blocks_all rows_nofsm blocks_nofsm <<<"$listing"
    echo "L = $lsn; $npages accounts pages, $targets rows updated (one per page) in $((t2 - t1))s (prep $((t1 - t0))s)"
    echo "listed: $rows_all rows / $blocks_all blocks; without _fsm: $rows_nofsm rows / $blocks_nofsm blocks"

    timed_variants "$lsn"
    for v in a b; do
        if [ $v = a ]; then label='(a) summary on, '; else label='(b) summary off,'; fi
        echo "$label first call: wall ms:${R[${v}_first]}; cpu ms:${R[${v}_first_cpu]}; page faults:${R[${v}_faults]}"
        echo "$label repeated:   wall ms:${R[${v}_rep]}"
        echo "$label repeated:   cpu ms: ${R[${v}_rep_cpu]}"
    done
    c_warm='' c_warm_cpu='' scan=''
    for ((i = 1; i <= scans; i++)); do
        "$work/lsn_scan" "$datadir" "$lsn" >/dev/null    # warms the page cache
        scan=$("$work/lsn_scan" "$datadir" "$lsn")
        c_warm+=" $(kv ms "$scan")" c_warm_cpu+=" $(kv cpu_ms "$scan")"
    done
    echo "(c) full read, warm cache: $scan; wall ms:$c_warm; cpu ms:$c_warm_cpu"
    a_cold='-' c_cold='-'
    if [ $cold -eq 1 ] && [ "$r" = "$cold_round" ]; then
        a_cold='' c_cold=''
        for ((i = 1; i <= scans; i++)); do
            drop_caches
            FIRST='' REPEATED='' FIRST_CPU='' REPEATED_CPU='' FAULTS=''
            session_calls a "$lsn"; a_cold+=" $FIRST"
            drop_caches
            scan=$("$work/lsn_scan" "$datadir" "$lsn")
            c_cold+=" $(kv ms "$scan")"
        done
        echo "(a) cold cache (drop_caches, fresh session), first call ms:$a_cold"
        echo "(c) full read, cold cache: $scan; ms:$c_cold"
        a_cold=$(median <<<"$a_cold") c_cold=$(median <<<"$c_cold")
    fi
    really='-' fp='-' misses='-' total_blocks='-'
    if [ $oracle -eq 1 ]; then
        res=$(perl_oracle check "$datadir" "$lsn" "$work/baseline.tsv")
        echo "oracle: $res"
        really=$(kv changed "$res") fp=$(kv fp "$res") misses=$(kv misses "$res") total_blocks=$(kv blocks "$res")
    fi
    printf '%-4s %-7s %7s %7s %7s %4s | %7s %7s %7s %7s %7s %7s | %7s %7s %7s %7s %7s %7s | %7s %7s %7s %7s\n' \
        "$r" "$pattern" "$targets" "$really" "$blocks_nofsm" "$misses" \
        "$(median <<<"${R[a_first]}")" "$(median <<<"${R[a_first_cpu]}")" \
        "$(median <<<"${R[a_rep]}")" "$(median <<<"${R[a_rep_cpu]}")" \
        "$(median <<<"${R[b_first]}")" "$(median <<<"${R[b_first_cpu]}")" \
        "$(median <<<"${R[b_rep]}")" "$(median <<<"${R[b_rep_cpu]}")" \
        "$(median <<<"${R[a_faults]}")" "$(median <<<"${R[b_faults]}")" \
        "$(awk -v a="$(median <<<"${R[a_rep_cpu]}")" -v b="$(median <<<"${R[b_rep_cpu]}")" 'BEGIN {if (a > 0) printf "%.1f", b / a; else print "-"}')" \
        "$(awk -v a="$(median <<<"${R[a_rep]}")" -v b="$(median <<<"${R[b_rep]}")" 'BEGIN {if (a > 0) printf "%.1f", b / a; else print "-"}')" \
        "$(median <<<"$c_warm")" "$(median <<<"$c_warm_cpu")" "$c_cold" "$a_cold" >>"$table"
    echo
done

warn_if_reinstalled
psql_q "DROP TABLE IF EXISTS bench_targets" >/dev/null
echo "## summary (ms, medians; a = default, b = use_segment_summary off, c = read every page: warm, cold cache;"
echo "## a_cold = first call of a session after drop_caches)"
echo "oracle: $total_blocks non-FSM blocks in the database; 'changed' = main-fork page LSN >= L or beyond the length at L"
echo "first = first call of a session, rep = repeated calls; wall = Function Scan actual time, cpu = backend on-CPU time"
echo "b/a = ratio of the repeated medians (cpu, wall); flt = minor page faults of the first call"
printf '%-4s %-7s %7s %7s %7s %4s | %7s %7s %7s %7s %7s %7s | %7s %7s %7s %7s %7s %7s | %7s %7s %7s %7s\n' round pattern \
    updated changed listed miss a_first a_1cpu a_rep a_rcpu b_first b_1cpu b_rep b_rcpu a_flt b_flt b/a_cpu b/a_wal \
    c_warm c_wcpu c_cold a_cold
cat "$table"
server_stop "$datadir"
[ $own_datadir -eq 1 ] && [ $keep -eq 0 ] && as_pg rm -rf "$datadir"
exit 0
