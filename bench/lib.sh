# shellcheck shell=bash disable=SC2154  # the sourcing script sets port, keep, cmdline, so_md5
#
# bench/lib.sh -- the plumbing shared by the benchmark scripts bench/*.sh.
#
# Why: every script found the PostgreSQL prefix, ran PostgreSQL as an
# unprivileged user, made a temp dir and cleaned it up on exit, started and
# stopped servers on a private Unix socket (stopping a stuck one by its own
# postmaster PID, nothing broader) and printed the same machine header, each
# with its own copy of that code.  One copy here keeps them alike; what a
# script measures, and how, stays in the script.
#
# Sourced, not run, after `set -euo pipefail`:
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# Sourcing only defines the functions below and sets
#   repo          the checkout (the parent of bench/)
#   bench_script  the script's file name, e.g. pgbench_overhead.sh
#   bench_name    the same without .sh: prefix of die() and cleanup messages
#   checksums     default (common_option's --checksums changes it)
#
# Variables the script sets and the functions read:
#   cmdline         its command line, for report_header
#   prefix          PostgreSQL prefix or empty, for find_postgres
#   port            port of the server's socket
#   keep            1: the temp dir survives a successful run
#   pg_ctl_timeout  seconds pg_ctl waits on start and stop (default 300)
#   bench_errfd     fd of cleanup's "temp dir kept" line (default 2)
#   so_md5          md5 of ptrack.so at the start, for warn_if_reinstalled
#   cleanup_hook    optional function: cleanup runs it first
#
# Functions:
#   usage                prints the script's "# Usage:" .. "# The extension"
#                        comment block, without the "# "
#   die MSG...           "<bench_name>: MSG" on stderr, exit 1
#   is_int V             true if V is a non-negative decimal integer
#   common_option ARG...  the catch-all arm of a script's option loop: takes
#                        the options every script has, --port N, --keep,
#                        --prefix DIR, --checksums on|off|default (data
#                        checksums of the clusters server_initdb makes;
#                        default: the version's own, off up to 17, on from
#                        18), -h|--help (usage, exit 0); dies with
#                        the usage on anything else.  Returns 0 if it used
#                        the next argument too (the caller shifts it once
#                        more), else 1:   *) common_option "$@" && shift ;;
#   find_postgres TOOL...
#                        sets prefix (if empty: scripts/build-postgres.sh
#                        --print-prefix), bin=$prefix/bin and pkglib; dies
#                        unless every $bin/TOOL is executable and
#                        $pkglib/ptrack.so is readable
#   pg_user_setup        sets pguser and defines as_pg CMD...: as root
#                        pguser=ptrack_test (created if missing) and as_pg
#                        runs CMD through runuser; else pguser is you and
#                        as_pg runs CMD directly
#   make_work NAME MODE  work=$(mktemp -d ${TMPDIR:-/tmp}/NAME.XXXXXX), chmod
#                        MODE, chown pguser as root; sock=$work (the servers'
#                        socket directory); installs cleanup as the EXIT trap
#                        and exit 130/143 on INT/TERM
#   cleanup              EXIT trap: cleanup_hook, then server_stop of the
#                        server that is up, then removes $work unless keep=1
#                        or the exit status is not 0 (then says it kept it);
#                        exits with the script's status
#   server_initdb DATADIR LOG
#                        initdb as pguser (superuser postgres, trust, no
#                        locale, UTF8, no sync, data checksums as --checksums
#                        says); output in LOG, shown on failure
#   server_conf DATADIR  appends to DATADIR/postgresql.conf a block headed
#                        "# ---- <bench_script>": listen_addresses = '',
#                        unix_socket_directories = $sock, port = $port,
#                        max_connections = 20, then its stdin
#   server_start DATADIR LOG WHAT [PG_CTL_OPTION...]
#                        pg_ctl start (-w, log in LOG); on failure shows the
#                        log's end and dies "WHAT did not start"; sets
#                        running_dd=DATADIR (before starting, so that cleanup
#                        also stops a server whose start timed out)
#   server_stop DATADIR  pg_ctl stop -m fast; if that fails, SIGQUIT then
#                        SIGKILL to the postmaster PID of DATADIR/postmaster.pid;
#                        nothing if that file is absent; clears running_dd.
#                        One server at a time.
#   load_pgbench SCALE LOG
#                        pgbench -i -q -s SCALE into database postgres of the
#                        server on $sock:$port; output in LOG, shown on failure
#   psql_q SQL...        runs the statements in one psql session as user
#                        postgres (client_min_messages = warning, stop on
#                        error); prints results unaligned, without headers
#   create_small_tables FROM TO
#                        tables w_FROM..w_TO (one row, a primary key each)
#   process_cpu_ms PID   prints the process's CPU time (user + system), ms
#   process_cpu_ns PID   the same in ns, from /proc/PID/schedstat (time on a
#                        CPU as the scheduler counts it, not 10 ms ticks)
#   command_cpu_ns CMD...  runs CMD, prints the CPU time it used in ns
#                        (wait4() rusage, user + system)
#   median               stdin: numbers separated by blanks or newlines;
#                        prints their median with one decimal, "-" if none
#   kv KEY TEXT          prints the number after "KEY=" in TEXT
#   md5_of FILE          prints FILE's md5 (hex)
#   tree_rev             prints `git describe --always --dirty` of the
#                        checkout, "unknown" outside git
#   report_header TITLE  prints "# <bench_script>: TITLE", then the command,
#                        date (UTC) and machine (CPUs, RAM, CPU model, kernel)
#   report_load [NOTE]   prints the load average "(at start[; NOTE])"
#   report_postgres      prints postgres --version and the prefix, and the
#                        data checksums setting (--checksums)
#   warn_if_reinstalled  two WARNING lines if $pkglib/ptrack.so's md5 is no
#                        longer $so_md5
#   workload_check W     dies unless W is one of the WAL workloads the
#                        follower is measured on: tpcb, copy, update
#   workload_describe W  one line saying what W does, with its sizes
#   workload_conf W      prints W's server settings (postgresql.conf lines)
#   workload_setup W DIR loads what W needs before its WAL is measured (logs in DIR)
#   follower_conf        prints the settings of a server whose WAL follower
#                        runs (ptrack preloaded, capture wal, 64 MB map) and,
#                        with summarizer=1, PostgreSQL's summarizer too
#   workload_start DATADIR LOG W DIR
#                        server_start, CREATE EXTENSION ptrack (dies unless
#                        it captures from the WAL), then workload_setup W DIR
#   checkpoint_redo      CHECKPOINT; with summarizer=1 waits (up to 120 s)
#                        until the summarizer has summarized up to its redo
#                        LSN; prints that LSN
#   workload_run W DIR   writes W's WAL (logs in DIR).  They read the script's
#                        variables clients (default 4), transactions (per
#                        client, default 5000; duration > 0 runs that many
#                        seconds instead) and copy_scale (default 10):
#                          tpcb    pgbench tpcb-like -M prepared at scale 10
#                          copy    a bulk load: pgbench -i -s copy_scale (COPY,
#                                  CREATE INDEX, VACUUM), after one at scale 1
#                          update  single-row UPDATEs of pgbench_accounts at
#                                  scale 20, shared_buffers = 32MB (evictions,
#                                  full-page images)
#   oracle_psql_env      exports ORACLE_PSQL: the psql command line (fields
#                        separated by \x1f) that BenchNode runs
#   bench_node_pl        prints the start of a Perl script for the page-LSN
#                        oracle (t/lib/PtrackOracle.pm): use strict/warnings
#                        and package BenchNode, the data_dir and safe_psql of
#                        a test cluster over $ENV{ORACLE_PSQL}; ends in
#                        package main

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bench_script=${0##*/}
bench_name=${bench_script%.sh}
checksums=default   # --checksums (common_option), read by server_initdb
pg_ctl_timeout=300
bench_errfd=2
running_dd=''           # data dir of the server that is up, if any

usage() { sed -n '/^# Usage:/,/^# The extension/p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "$bench_name: $*" >&2; exit 1; }
is_int() { [[ $1 =~ ^[0-9]+$ ]]; }

common_option() {
    case $1 in
        --port) port=${2:?}; return 0 ;;
        --keep) keep=1 ;;
        --prefix) prefix=${2:?}; return 0 ;;
        --checksums)
            case ${2:?} in on|off|default) checksums=$2 ;; *) die "--checksums must be on, off or default" ;; esac
            return 0 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    return 1
}

find_postgres() {
    local b
    if [ -z "$prefix" ]; then
        prefix=$("$repo/scripts/build-postgres.sh" --print-prefix) || die "cannot find the PostgreSQL prefix"
    fi
    bin="$prefix/bin"
    for b in "$@"; do
        [ -x "$bin/$b" ] || die "$bin/$b missing: build the server with scripts/build-postgres.sh"
    done
    pkglib=$("$bin/pg_config" --pkglibdir)
    [ -r "$pkglib/ptrack.so" ] || die "$pkglib/ptrack.so missing: run 'make install' in $repo"
}

# PostgreSQL refuses to run as root.
pg_user_setup() {
    if [ "$(id -u)" -eq 0 ]; then
        pguser=ptrack_test
        id "$pguser" >/dev/null 2>&1 || useradd --system --create-home --shell /bin/bash "$pguser"
        # shellcheck disable=SC2317  # called by the scripts
        as_pg() { runuser -u "$pguser" -- "$@"; }
    else
        pguser=$(id -un)
        # shellcheck disable=SC2317
        as_pg() { "$@"; }
    fi
}

make_work() {
    work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    chmod "$2" "$work"
    if [ "$(id -u)" -eq 0 ]; then
        chown "$pguser" "$work"
    fi
    sock="$work"
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

cleanup() {
    local rc=$?
    trap - EXIT
    if declare -F cleanup_hook >/dev/null; then
        cleanup_hook
    fi
    [ -n "$running_dd" ] && server_stop "$running_dd"
    if [ "$keep" -eq 1 ] || [ $rc -ne 0 ]; then
        echo "$bench_name: temp dir kept: $work" >&"$bench_errfd"
    else
        cd / && rm -rf "$work"
    fi
    exit $rc
}

server_initdb() {
    local -a sums=()
    case $checksums in
        on) sums=(--data-checksums) ;;
        # initdb has --no-data-checksums from 18 on, where checksums became the default.
        off) "$bin/initdb" --help | grep -q -- --no-data-checksums && sums=(--no-data-checksums) ;;
    esac
    as_pg "$bin/initdb" -D "$1" -U postgres -A trust --no-locale -E UTF8 -N "${sums[@]}" >"$2" 2>&1 ||
        { cat "$2" >&2; die "initdb failed"; }
}

server_conf() {
    {
        printf "\n# ---- %s\nlisten_addresses = ''\nunix_socket_directories = '%s'\nport = %s\nmax_connections = 20\n" \
            "$bench_script" "$sock" "$port"
        cat
    } | as_pg tee -a "$1/postgresql.conf" >/dev/null
}

server_start() {
    local dd=$1 log=$2 what=$3
    shift 3
    running_dd=$dd
    as_pg "$bin/pg_ctl" -D "$dd" -l "$log" -w -t "$pg_ctl_timeout" "$@" start >/dev/null ||
        { tail -n 30 "$log" >&2; die "$what did not start"; }
}

server_stop() {
    local dd=$1 pid
    if [ -f "$dd/postmaster.pid" ]; then
        pid=$(head -n 1 "$dd/postmaster.pid")
        if ! as_pg "$bin/pg_ctl" -D "$dd" -w -t "$pg_ctl_timeout" -m fast stop >/dev/null 2>&1; then
            # pg_ctl failed: end that postmaster by its own PID, nothing broader.
            if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
                kill -QUIT "$pid" 2>/dev/null || true
                sleep 2
                kill -KILL "$pid" 2>/dev/null || true
            fi
        fi
    fi
    running_dd=''
}

load_pgbench() {
    as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -i -q -s "$1" postgres >"$2" 2>&1 ||
        { cat "$2" >&2; die "pgbench -i failed"; }
}

psql_q() {
    local args=() s
    for s in "$@"; do args+=(-c "$s"); done
    as_pg "$bin/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres -d postgres \
        -c "SET client_min_messages = warning" "${args[@]}"
}

# create_small_tables FROM TO: tables w_FROM..w_TO, each with one row and a primary key, 500 per statement.
create_small_tables() {
    local made=$(($1 - 1)) to
    while [ "$made" -lt "$2" ]; do
        to=$((made + 500 < $2 ? made + 500 : $2))
        psql_q "DO \$\$ BEGIN FOR i IN $((made + 1))..$to LOOP
                  EXECUTE format('CREATE TABLE w_%s (id int PRIMARY KEY, v int)', i);
                  EXECUTE format('INSERT INTO w_%s VALUES (1, 1)', i);
                END LOOP; END \$\$" >/dev/null
        made=$to
    done
}

# process_cpu_ms PID: its utime + stime, in ms.
process_cpu_ms() {
    awk -v t="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.0f\n", ($12 + $13) * 1000 / t }' "/proc/$1/stat"
}

# process_cpu_ns PID: the first field of /proc/PID/schedstat, ns on a CPU.
process_cpu_ns() { cut -d' ' -f1 "/proc/$1/schedstat"; }

# command_cpu_ns CMD...: runs CMD (output discarded) and prints the CPU time
# it used (user + system, ns, from wait4()'s rusage: the kernel's exact sum,
# not ticks); fails if CMD does.
command_cpu_ns() {
    python3 -c '
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, ru = os.wait4(p.pid, 0)
print(round((ru.ru_utime + ru.ru_stime) * 1e9))
sys.exit(0 if os.waitstatus_to_exitcode(status) == 0 else 1)' "$@"
}

median() { tr ' ' '\n' | awk 'NF' | sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) printf "%.1f\n", v[(NR+1)/2]; else printf "%.1f\n", (v[NR/2]+v[NR/2+1])/2}'; }
kv() { sed -n "s/.*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$2"; }
md5_of() { md5sum "$1" | cut -d' ' -f1; }
tree_rev() { git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown; }

report_header() {
    echo "# $bench_script: $1"
    echo "command:    $cmdline"
    echo "date:       $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "machine:    $(nproc) CPUs, $(awk '/^MemTotal/ {printf "%.1f GB", $2/1048576}' /proc/meminfo) RAM," \
         "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), kernel $(uname -r)"
}
# shellcheck disable=SC2120  # the note is optional
report_load() { echo "load avg:   $(cut -d' ' -f1-3 /proc/loadavg) (at start${1:+; $1})"; }
report_postgres() {
    local version
    version=$("$bin/postgres" --version)
    echo "postgres:   $version ($prefix)"
    echo "checksums:  data checksums $checksums (--checksums; default: the version's initdb default)"
}

warn_if_reinstalled() {
    local now
    now=$(md5_of "$pkglib/ptrack.so")
    if [ "$now" != "$so_md5" ]; then
        echo "WARNING: ptrack.so was reinstalled during the run (md5 now $now):"
        echo "WARNING: servers started after that loaded another build"
    fi
}

oracle_psql_env() {
    export ORACLE_PSQL
    ORACLE_PSQL=$(printf '%s\x1f' "$bin/psql" -X -A -t -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres)
    ORACLE_PSQL=${ORACLE_PSQL%$'\x1f'}
}

bench_node_pl() {
    cat <<'EOF'
use strict;
use warnings;

# What PtrackOracle needs of a test cluster, for a server this script runs.
package BenchNode;
sub new { my ($class, %a) = @_; return bless {%a}, $class; }
sub data_dir { return $_[0]{pgdata}; }
sub safe_psql
{
	my ($self, $db, $sql) = @_;
	open(my $fh, '-|', @{ $self->{psql} }, '-d', $db, '-c', $sql) or die "psql: $!";
	local $/;
	my $out = <$fh> // '';
	close($fh) or die "psql failed on: $sql\n";
	chomp $out;
	return $out;
}

package main;
EOF
}

# --- the WAL workloads (bench/vs_summarizer.sh, bench/replay_callgrind.sh) ----

workload_check() {
    case $1 in
        tpcb|copy|update) ;;
        *) die "unknown workload: '$1' (tpcb, copy or update)" ;;
    esac
}

follower_conf() {
    echo "shared_preload_libraries = 'ptrack'"
    echo "ptrack.capture = wal"
    echo "ptrack.map_size = 64MB"
    if [ "${summarizer:-0}" = 1 ]; then echo "summarize_wal = on"; fi
}

workload_start() {
    server_start "$1" "$2" "the server"
    [ "$(psql_q 'SHOW ptrack.capture')" = wal ] || die "ptrack does not capture from the WAL on $prefix"
    psql_q 'CREATE EXTENSION ptrack' >/dev/null
    workload_setup "$3" "$4"
}

checkpoint_redo() {
    local redo i
    psql_q 'CHECKPOINT' >/dev/null
    redo=$(psql_q 'SELECT redo_lsn FROM pg_control_checkpoint()')
    if [ "${summarizer:-0}" = 1 ]; then
        for i in $(seq 1 240); do
            [ "$(psql_q "SELECT summarized_lsn >= '$redo' FROM pg_get_wal_summarizer_state()")" = t ] && break
            [ "$i" = 240 ] && die "the summarizer did not reach $redo in 120 s"
            sleep 0.5
        done
    fi
    echo "$redo"
}

workload_amount() {
    if [ "${duration:-0}" -gt 0 ]; then echo "${duration} s"; else echo "${transactions:-5000} transactions per client"; fi
}

workload_describe() {
    case $1 in
        tpcb) echo "pgbench tpcb-like -M prepared, scale 10, ${clients:-4} clients, $(workload_amount)" ;;
        copy) echo "bulk load: pgbench -i -s ${copy_scale:-10} (COPY, CREATE INDEX, VACUUM)" ;;
        update) echo "single-row UPDATEs of pgbench_accounts, scale 20, shared_buffers = 32MB, ${clients:-4} clients, $(workload_amount)" ;;
    esac
}

workload_conf() {
    case $1 in
        update) echo "shared_buffers = 32MB" ;;
        *) echo "shared_buffers = 256MB" ;;
    esac
}

workload_setup() {
    case $1 in
        tpcb) load_pgbench 10 "$2/setup.log" ;;
        copy) load_pgbench 1 "$2/setup.log" ;;
        update)
            load_pgbench 20 "$2/setup.log"
            echo "\\set aid random(1, 2000000)
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid = :aid;" | as_pg tee "$2/update.sql" >/dev/null
            ;;
    esac
}

workload_run() {
    local amount=(-t "${transactions:-5000}") c=${clients:-4}
    [ "${duration:-0}" -gt 0 ] && amount=(-T "$duration")
    case $1 in
        tpcb)
            as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -n -M prepared -c "$c" -j "$c" "${amount[@]}" \
                postgres >"$2/run.log" 2>&1 || die "pgbench failed: $(tail -3 "$2/run.log")"
            ;;
        copy)
            as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -i -q -s "${copy_scale:-10}" postgres \
                >"$2/run.log" 2>&1 || die "pgbench -i failed: $(tail -3 "$2/run.log")"
            ;;
        update)
            as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -n -M prepared -c "$c" -j "$c" "${amount[@]}" \
                -f "$2/update.sql" postgres >"$2/run.log" 2>&1 || die "pgbench failed: $(tail -3 "$2/run.log")"
            ;;
    esac
}
