#!/usr/bin/env bash
#
# vs_summarizer.sh -- the WAL follower (wal capture) against PostgreSQL's own
# WAL summarizer (summarize_wal = on, PostgreSQL 17 and later), on the same
# server reading the same WAL: CPU per MB of WAL, and what each lists.
#
# Why: PostgreSQL 17's summarizer is the peer of the follower.  Both read the
# same WAL and work out which blocks changed; the summarizer's answer
# (pg_wal_summary_contents) is exact.  Any block it lists that ptrack does
# not is a false negative of ptrack, i.e. a bug; the reverse (ptrack listing a
# block the summarizer does not) is a false positive, counted.
#
# How: per workload and run, a fresh cluster with ptrack preloaded
# (ptrack.capture = wal) and summarize_wal = on.  The workload's setup,
# CHECKPOINT; L = that checkpoint's redo LSN (the summarizer cuts its
# summaries at redo pointers, so L is a summary boundary, like a backup's
# start LSN).  The workload (bench/lib.sh, workload_run) writes its WAL; the
# CPU of both processes over it (user + system in ns, /proc/<pid>/schedstat,
# from before the workload until each has read all of its WAL), per MB of
# WAL written.  The reading floor: pg_waldump --stats over the same WAL
# (PostgreSQL's xlogreader: page reads, CRC-32C, decoding, as both
# processes do; CPU from wait4()'s rusage), per MB.  Then changes of kinds the workloads do not make (VACUUM
# FREEZE, VM bits cleared, a vacuum truncation, CREATE TABLE AS, TRUNCATE,
# CLUSTER), CHECKPOINT, E = its redo LSN; once the summarizer has summarized
# up to E, the blocks of every summary within [L, E)
# (pg_available_wal_summaries, pg_wal_summary_contents) are compared with
# ptrack_get_pagemapset(L), which covers [L, now) and so must contain them
# all.  A summarizer block whose file or block no longer exists is counted as
# gone, not checked.  A "limit block" N of the summarizer (truncation or
# creation) stands for every block >= N that exists now.  On PostgreSQL 15
# (no summarizer) the follower's CPU alone is measured.
#
# Output: a line per run, then one line per workload ("result ...": medians
# and ranges over the runs, the load average during them), to paste.
#
# Workloads (bench/lib.sh): tpcb (pgbench tpcb-like, 4 clients), copy (a bulk
# load, pgbench -i -s --copy-scale), update (single-row UPDATEs with
# shared_buffers = 32MB, 4 clients).
#
# Usage: bench/vs_summarizer.sh --prefix DIR [options]
#   --workloads LIST  comma-separated, of tpcb, copy, update (default all three)
#   --runs N          runs of each workload, each on a fresh cluster (default 3)
#   --duration S      seconds of tpcb and update (default 60)
#   --copy-scale N    pgbench scale of the copy workload (default 50)
#   --clients N       pgbench clients (default 4)
#   --no-compare      skip the comparison of the blocks listed
#   --wal-scan        also run bench/wal_scan's in-place reader in --follow
#                     mode over the same WAL while it is written (built here
#                     against the prefix), and report its CPU per MB: what
#                     reading costs a follower without xlogreader's copies
#   --conf LINE       a line appended to every server's postgresql.conf, after
#                     the script's own (repeatable), e.g. --conf
#                     'ptrack.wal_reader = inplace'
#   --port N          port number of the server's socket (default 55470)
#   --keep            keep the temp dir at the end
#   --prefix DIR      PostgreSQL prefix (17 or later for the summarizer; 15: the follower alone)
# The extension must be installed into that prefix (make PG_CONFIG=DIR/bin/pg_config install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

workloads=tpcb,copy,update runs=3 duration=60 copy_scale=50 clients=4 compare=1 port=55470 keep=0 wal_scan=0
extra_conf=()
prefix=${PG_PREFIX:-}
cmdline=$(printf '%q ' "$0" "$@")
while [ $# -gt 0 ]; do
    case $1 in
        --workloads) workloads=${2:?}; shift ;;
        --runs) runs=${2:?}; shift ;;
        --duration) duration=${2:?}; shift ;;
        --copy-scale) copy_scale=${2:?}; shift ;;
        --clients) clients=${2:?}; shift ;;
        --no-compare) compare=0 ;;
        --wal-scan) wal_scan=1 ;;
        --conf) extra_conf+=("${2:?}"); shift ;;
        *) common_option "$@" && shift ;;
    esac
    shift
done
for v in "$runs" "$duration" "$copy_scale" "$clients" "$port"; do
    is_int "$v" || die "not a non-negative integer: $v"
done
IFS=, read -r -a workload_list <<<"$workloads"
for w in "${workload_list[@]}"; do workload_check "$w"; done
[ -n "$prefix" ] || die "--prefix DIR is required"

find_postgres postgres pg_ctl initdb pgbench psql pg_config pg_waldump
major=$("$bin/pg_config" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
summarizer=0
[ "${major:-0}" -ge 17 ] && summarizer=1
pg_user_setup
make_work ptrack-vs-summarizer 755
cd "$work"
so_md5=$(md5_of "$pkglib/ptrack.so")
if [ "$wal_scan" = 1 ]; then
    "$repo/bench/wal_scan/build.sh" "$bin/pg_config" "$work/wal_scan" ||
        die "could not build bench/wal_scan/wal_scan.cpp"
fi

pid_of() { psql_q "SELECT pid FROM pg_stat_activity WHERE backend_type = '$1'"; }

# wait_summarizer LSN: until the summarizer has read every record ending at or before LSN.
wait_summarizer() {
    local i
    for i in $(seq 1 600); do
        [ "$(psql_q "SELECT pending_lsn >= '$1' OR summarized_lsn >= '$1' FROM pg_get_wal_summarizer_state()")" = t ] &&
            return
        sleep 0.2
    done
    die "the summarizer did not read up to $1 in 120 s"
}

# compare_blocks DATADIR L E: the summarizer's blocks in [L, E) against ptrack_get_pagemapset(L).
compare_blocks() {
    local dd=$1 lsn_l=$2 lsn_e=$3 first
    psql_q "SELECT s.start_lsn, s.end_lsn FROM pg_available_wal_summaries() s
            WHERE s.start_lsn >= '$lsn_l' AND s.start_lsn < '$lsn_e' ORDER BY 1" >"$work/summaries.txt"
    psql_q "SELECT c.reltablespace, c.reldatabase, c.relfilenode, c.relforknumber, c.relblocknumber, c.is_limit_block
            FROM pg_available_wal_summaries() s,
                 LATERAL pg_wal_summary_contents(s.tli, s.start_lsn, s.end_lsn) c
            WHERE s.start_lsn >= '$lsn_l' AND s.start_lsn < '$lsn_e'" >"$work/summarizer.txt"
    psql_q "SELECT p.path, b FROM ptrack_get_pagemapset('$lsn_l') p,
                 generate_series(0, length(p.pagemap) * 8 - 1) b
            WHERE get_bit(p.pagemap, b) = 1" >"$work/ptrack.txt"
    first=$(head -1 "$work/summaries.txt" | cut -d'|' -f1)
    echo "range:      L = $lsn_l .. E = $lsn_e; $(wc -l <"$work/summaries.txt") summaries, the first from ${first:-none}"
    [ "$first" = "$lsn_l" ] || echo "WARNING: no summary starts at L: the comparison does not cover [L, ${first:-E})"
    PGDATA_DIR="$dd" perl - "$work/summarizer.txt" "$work/ptrack.txt" <<'EOF'
use strict;
use warnings;

# Compares the summarizer's blocks with ptrack's; see the script's header.
my ($summ_file, $ptrack_file) = @ARGV;
my $pgdata = $ENV{PGDATA_DIR};
my $seg_blocks = 131072;    # RELSEG_SIZE of a default build: 1 GB of 8 KB blocks
my %fork_suffix = (0 => '', 1 => '_fsm', 2 => '_vm', 3 => '_init');

my %listed;                 # "path:block within segment" ptrack listed
open(my $pf, '<', $ptrack_file) or die "$ptrack_file: $!";
while (<$pf>) { chomp; my ($path, $b) = split /\|/; $listed{"$path:$b"} = 1; }
close $pf;

sub rel_path
{
	my ($spc, $db, $rfn, $fork) = @_;
	my $base = $spc == 1664 ? "global/$rfn" : $spc == 1663 ? "base/$db/$rfn" : undef;
	return defined $base ? $base . $fork_suffix{$fork} : undef;
}

# Blocks of the fork at `path` now (all segments).
sub fork_blocks
{
	my ($path) = @_;
	my $n = 0;
	for (my $seg = 0;; $seg++) {
		my $f = "$pgdata/$path" . ($seg ? ".$seg" : '');
		last unless -e $f;
		$n += int((-s $f) / 8192);
	}
	return $n;
}

my ($total, $both, $gone, $other_spc) = (0, 0, 0, 0);
my @missed;
my %summ_seen;
my %nblocks;
my $check = sub {
	my ($path, $blk) = @_;
	$nblocks{$path} //= fork_blocks($path);
	if ($blk >= $nblocks{$path}) { $gone++; return; }
	my $segno = int($blk / $seg_blocks);
	my $key = ($segno ? "$path.$segno" : $path) . ':' . ($blk % $seg_blocks);
	return if $summ_seen{$key}++;
	$total++;
	if ($listed{$key}) { $both++; } else { push @missed, "$path block $blk"; }
};
open(my $sf, '<', $summ_file) or die "$summ_file: $!";
while (<$sf>) {
	chomp;
	my ($spc, $db, $rfn, $fork, $blk, $is_limit) = split /\|/;
	my $path = rel_path($spc, $db, $rfn, $fork);
	if (!defined $path) { $other_spc++; next; }
	if ($is_limit eq 't') {
		$nblocks{$path} //= fork_blocks($path);
		$check->($path, $_) for $blk .. $nblocks{$path} - 1;
	} else {
		$check->($path, $blk);
	}
}
close $sf;
my $ptrack_total = scalar keys %listed;
my $fp = $ptrack_total - $both;
printf "summarizer: %d blocks listed (existing now; %d gone since, %d in other tablespaces not checked)\n",
  $total, $gone, $other_spc;
printf "ptrack:     %d blocks listed; %d of the summarizer's blocks MISSED (false negatives)\n",
  $ptrack_total, scalar @missed;
my %extra_by_fork;
for my $key (keys %listed) {
	next if $summ_seen{$key};
	my ($file) = split /:/, $key;
	$extra_by_fork{ $file =~ /_(fsm|vm|init)(\.\d+)?$/ ? $1 : 'main' }++;
}
printf "extra:      %d blocks listed by ptrack only (false positives: %.2f%% of ptrack's list; by fork: %s)\n",
  $fp, $ptrack_total ? 100.0 * $fp / $ptrack_total : 0,
  join(', ', map { "$_ $extra_by_fork{$_}" } sort keys %extra_by_fork) || 'none';
if (@missed) {
	print "MISSED:     $_\n" for @missed[0 .. ($#missed < 19 ? $#missed : 19)];
	exit 1;
}
EOF
}

report_header "the WAL follower against PostgreSQL's WAL summarizer, same server, same WAL"
report_load
report_postgres
if [ "$summarizer" = 0 ]; then
    echo "note:       PostgreSQL $major has no WAL summarizer: the follower's CPU alone"
fi

missed_any=0
for w in "${workload_list[@]}"; do
    echo "workload:   $w: $(workload_describe "$w")"
    : >"$work/runs-$w.txt"
    for run in $(seq 1 "$runs"); do
        dd="$work/data-$w-$run"
        server_initdb "$dd" "$work/initdb.log"
        {
            follower_conf
            echo "max_wal_size = 4GB"
            echo "synchronous_commit = off"
            workload_conf "$w"
            for line in "${extra_conf[@]}"; do echo "$line"; done
        } | server_conf "$dd"
        workload_start "$dd" "$work/server-$w-$run.log" "$w" "$work"
        lsn_l=$(checkpoint_redo)
        psql_q 'SELECT ptrack_init_lsn()' >/dev/null
        follower=$(pid_of 'ptrack WAL follower')
        is_int "$follower" || die "no WAL follower found"
        if [ "$summarizer" = 1 ]; then
            summ=$(pid_of 'walsummarizer')
            is_int "$summ" || die "no WAL summarizer found (summarize_wal = on?)"
        fi
        load0=$(cut -d' ' -f1 /proc/loadavg)
        lsn0=$(psql_q 'SELECT pg_current_wal_lsn()')
        f0=$(process_cpu_ns "$follower")
        [ "$summarizer" = 1 ] && s0=$(process_cpu_ns "$summ")
        if [ "$wal_scan" = 1 ]; then
            rm -f "$work/stop-lsn"
            as_pg "$work/wal_scan" --follow "$lsn0" "$work/stop-lsn" "$dd/pg_wal" >"$work/wal-scan.out" 2>&1 &
            scan_pid=$!
        fi
        workload_run "$w" "$work"
        lsn1=$(psql_q 'SELECT pg_current_wal_lsn()')
        # Each has read everything written: ptrack_init_lsn() waits for the follower.
        psql_q 'SELECT ptrack_init_lsn()' >/dev/null
        f1=$(process_cpu_ns "$follower")
        s_ns=0
        if [ "$summarizer" = 1 ]; then
            wait_summarizer "$lsn1"
            s1=$(process_cpu_ns "$summ")
            s_ns=$((s1 - s0))
        fi
        scan_ms=-
        if [ "$wal_scan" = 1 ]; then
            # The follower has read up to lsn1: it is flushed, a record's end.
            echo "$lsn1" >"$work/stop-lsn"
            wait "$scan_pid" || die "wal_scan --follow failed: $(cat "$work/wal-scan.out")"
            scan_ms=$(awk '/^cpu_ms_per_mb/ {print $2}' "$work/wal-scan.out")
        fi
        load1=$(cut -d' ' -f1 /proc/loadavg)
        # The reading floor, while the WAL is still there (no checkpoint has run since lsn0).
        w_ns=$(command_cpu_ns "$bin/pg_waldump" --stats -p "$dd/pg_wal" -s "$lsn0" -e "$lsn1") ||
            die "pg_waldump could not read $lsn0 .. $lsn1 in $dd/pg_wal"
        f_ns=$((f1 - f0))
        wal_mb=$(psql_q "SELECT round((pg_wal_lsn_diff('$lsn1', '$lsn0') / 1048576)::numeric, 1)")
        f_ms=$(awk -v n="$f_ns" -v w="$wal_mb" 'BEGIN { printf "%.3f", n / 1e6 / w }')
        s_ms=$(awk -v n="$s_ns" -v w="$wal_mb" 'BEGIN { printf "%.3f", n / 1e6 / w }')
        w_ms=$(awk -v n="$w_ns" -v w="$wal_mb" 'BEGIN { printf "%.3f", n / 1e6 / w }')
        ratio=$(awk -v f="$f_ns" -v s="$s_ns" 'BEGIN { if (s > 0) printf "%.3f", f / s; else print "-" }')
        w_ratio=$(awk -v f="$w_ns" -v s="$s_ns" 'BEGIN { if (s > 0) printf "%.3f", f / s; else print "-" }')
        line="run:        $w $run: $wal_mb MB of WAL; follower $f_ms ms/MB ($((f_ns / 1000000)) ms)"
        [ "$summarizer" = 1 ] && line+="; summarizer $s_ms ms/MB ($((s_ns / 1000000)) ms); ratio $ratio"
        line+="; pg_waldump --stats $w_ms ms/MB"
        [ "$summarizer" = 1 ] && line+=" (of the summarizer: $w_ratio)"
        [ "$wal_scan" = 1 ] && line+="; wal_scan --follow $scan_ms ms/MB ($(head -1 "$work/wal-scan.out"))"
        echo "$line; load $load0 -> $load1"
        missed=-
        if [ "$summarizer" = 1 ] && [ "$compare" = 1 ]; then
            # Outside the CPU figures, changes of the kinds the workloads do
            # not make, so that the comparison also covers them: visibility-map
            # bits set by VACUUM and cleared by a DELETE, freezing, a vacuum
            # truncation, a new relation, a TRUNCATE (new relfilenode), a
            # rewrite (CLUSTER).
            psql_q 'VACUUM (FREEZE) pgbench_accounts' \
                'DELETE FROM pgbench_accounts WHERE aid % 5000 = 0' \
                'CREATE TABLE vs_extra AS SELECT g AS id, repeat(md5(g::text), 4) AS pad FROM generate_series(1, 20000) g' \
                'DELETE FROM vs_extra WHERE id > 10000' 'VACUUM vs_extra' \
                'TRUNCATE pgbench_history' 'CLUSTER pgbench_branches USING pgbench_branches_pkey' >/dev/null
            lsn_e=$(checkpoint_redo)
            if compare_blocks "$dd" "$lsn_l" "$lsn_e" >"$work/compare.txt"; then missed=0; else missed=1; missed_any=1; fi
            sed 's/^/            /' "$work/compare.txt"
            [ "$missed" = 0 ] || missed=$(grep -c '^MISSED' "$work/compare.txt" || true)
        fi
        server_stop "$dd"
        rm -rf "$dd"
        echo "$wal_mb $f_ms $s_ms $ratio $load0 $load1 $missed $w_ms $w_ratio" >>"$work/runs-$w.txt"
    done
done

# The lines to paste: medians [min-max] over the runs.
for w in "${workload_list[@]}"; do
    awk -v w="$w" -v major="$major" -v summ="$summarizer" -v rev="$(tree_rev)" '
        function med(a, n,   i, j, t) {
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        function rng(a, n, fmt,   i, lo, hi) {
            if (fmt == "") fmt = "%.3f-%.3f"
            lo = a[1]; hi = a[1]
            for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
            return sprintf(fmt, lo, hi)
        }
        { n++; mb[n] = $1; f[n] = $2; s[n] = $3; r[n] = $4; l[n] = $5; l[n + 1000] = $6
          if ($7 != "-") missed += $7; else missed = "-"
          wd[n] = $8; wr[n] = $9 }
        END {
            for (i = 1; i <= n; i++) { ll[i] = l[i]; ll[n + i] = l[i + 1000] }
            line = sprintf("result:     PG%s %s, %d runs, %.0f MB of WAL each (median): follower %.3f ms/MB [%s]",
                           major, w, n, med(mb, n), med(f, n), rng(f, n))
            if (summ == 1)
                line = line sprintf(", summarizer %.3f ms/MB [%s], ratio %.3f [%s], missed %s",
                                    med(s, n), rng(s, n), med(r, n), rng(r, n), missed)
            line = line sprintf(", pg_waldump --stats %.3f ms/MB [%s]", med(wd, n), rng(wd, n))
            if (summ == 1)
                line = line sprintf(" = %.3f [%s] of the summarizer", med(wr, n), rng(wr, n))
            line = line sprintf("; load %.2f [%s] (1-min avg at each run'"'"'s start and end); tree %s", med(ll, 2 * n), rng(ll, 2 * n, "%.2f-%.2f"), rev)
            print line
        }' "$work/runs-$w.txt"
done
warn_if_reinstalled
echo "tree:       $(tree_rev)"
[ "$missed_any" = 0 ] || exit 1
