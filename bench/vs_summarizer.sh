#!/usr/bin/env bash
#
# vs_summarizer.sh -- the WAL follower (wal capture) against PostgreSQL's own
# WAL summarizer (summarize_wal = on, PostgreSQL 17 and later), on the same
# pgbench run of the same cluster: CPU per MB of WAL, and what each lists.
#
# Why: PostgreSQL 17's summarizer is the peer of the follower.  Both read the
# same WAL and work out which blocks changed; the summarizer's answer
# (pg_wal_summary_contents) is exact.  Any block it lists that ptrack does
# not is a false negative of ptrack, i.e. a bug; the reverse (ptrack listing a
# block the summarizer does not) is a false positive, counted.
#
# How: one cluster with ptrack preloaded (ptrack.capture = wal) and
# summarize_wal = on.  pgbench -i, CHECKPOINT; L = that checkpoint's redo LSN
# (the summarizer cuts its summaries at redo pointers, so L is a summary
# boundary, like a backup's start LSN).  pgbench tpcb-like at full speed for
# --duration seconds; the CPU of both processes (user + system, from
# /proc/<pid>/stat) over the run, per MB of WAL written.  Then changes of
# kinds pgbench does not make (VACUUM FREEZE, VM bits cleared, a vacuum
# truncation, CREATE TABLE AS, TRUNCATE, CLUSTER), CHECKPOINT,
# E = its redo LSN; once the summarizer has summarized up to E, the blocks of
# every summary within [L, E) (pg_available_wal_summaries,
# pg_wal_summary_contents) are compared with ptrack_get_pagemapset(L), which
# covers [L, now) and so must contain them all.  A summarizer block whose file
# or block no longer exists is counted as gone, not checked.  A "limit block"
# N of the summarizer (truncation or creation) stands for every block >= N
# that exists now.
#
# Usage: bench/vs_summarizer.sh --prefix DIR [options]
#   --duration S    seconds of pgbench (default 60)
#   --clients N     pgbench clients (default 4)
#   --scale N       pgbench scale (default 10)
#   --port N        port number of the server's socket (default 55470)
#   --keep          keep the temp dir at the end
#   --prefix DIR    PostgreSQL 17 or later prefix (scripts/build-postgres.sh --pg-version N)
# The extension must be installed into that prefix (make PG_CONFIG=DIR/bin/pg_config install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

duration=60 clients=4 scale=10 port=55470 keep=0 prefix=${PG_PREFIX:-}
cmdline=$(printf '%q ' "$0" "$@")
while [ $# -gt 0 ]; do
    case $1 in
        --duration) duration=${2:?}; shift ;;
        --clients) clients=${2:?}; shift ;;
        --scale) scale=${2:?}; shift ;;
        *) common_option "$@" && shift ;;
    esac
    shift
done
for v in "$duration" "$clients" "$scale" "$port"; do
    is_int "$v" || die "not a non-negative integer: $v"
done
[ -n "$prefix" ] || die "--prefix DIR is required (a PostgreSQL 17 or later prefix)"

find_postgres postgres pg_ctl initdb pgbench psql pg_config
major=$("$bin/pg_config" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
[ "${major:-0}" -ge 17 ] || die "$prefix is PostgreSQL ${major:-?}: the WAL summarizer needs 17 or later"
pg_user_setup
make_work ptrack-vs-summarizer 755
cd "$work"

dd="$work/data"
server_initdb "$dd" "$work/initdb.log"
server_conf "$dd" <<EOF
shared_preload_libraries = 'ptrack'
ptrack.capture = wal
ptrack.map_size = 64MB
summarize_wal = on
shared_buffers = 256MB
max_wal_size = 2GB
synchronous_commit = off
EOF
server_start "$dd" "$work/server.log" "the server"
[ "$(psql_q 'SHOW ptrack.capture')" = wal ] || die "ptrack does not capture from the WAL on $prefix"
psql_q 'CREATE EXTENSION ptrack' >/dev/null
load_pgbench "$scale" "$work/pgbench-init.log"

pid_of() { psql_q "SELECT pid FROM pg_stat_activity WHERE backend_type = '$1'"; }
follower=$(pid_of 'ptrack WAL follower')
summarizer=$(pid_of 'walsummarizer')
is_int "$follower" || die "no WAL follower found"
is_int "$summarizer" || die "no WAL summarizer found (summarize_wal = on?)"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks_per_s=$(getconf CLK_TCK)

# checkpoint_redo: CHECKPOINT, then waits (up to 120 s) until the summarizer
# has summarized up to its redo LSN; prints that LSN.
checkpoint_redo() {
    local redo i
    psql_q 'CHECKPOINT' >/dev/null
    redo=$(psql_q 'SELECT redo_lsn FROM pg_control_checkpoint()')
    for i in $(seq 1 240); do
        [ "$(psql_q "SELECT summarized_lsn >= '$redo' FROM pg_get_wal_summarizer_state()")" = t ] && break
        [ "$i" = 240 ] && die "the summarizer did not reach $redo in 120 s"
        sleep 0.5
    done
    echo "$redo"
}

report_header "the WAL follower against PostgreSQL's WAL summarizer, same run"
report_load
report_postgres
map_note="the follower marks no map (its map: $(psql_q 'SELECT map_size FROM ptrack_status()') bytes)"
echo "workload:   pgbench tpcb-like -M prepared, scale $scale, $clients clients, ${duration} s; $map_note"

lsn_l=$(checkpoint_redo)
lsn0=$(psql_q 'SELECT pg_current_wal_lsn()')
f0=$(cpu_ticks "$follower") s0=$(cpu_ticks "$summarizer")
as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -n -M prepared -c "$clients" -j "$clients" \
    -T "$duration" postgres >"$work/pgbench.log" 2>&1 || die "pgbench failed: $(tail -3 "$work/pgbench.log")"
lsn1=$(psql_q 'SELECT pg_current_wal_lsn()')
# Both have read everything written: ptrack_init_lsn() waits for the follower.
psql_q 'SELECT ptrack_init_lsn()' >/dev/null
f1=$(cpu_ticks "$follower") s1=$(cpu_ticks "$summarizer")
# Outside the CPU figures, changes of the kinds pgbench does not make, so
# that the comparison also covers them: visibility-map bits set by VACUUM and
# cleared by a DELETE, freezing, a vacuum truncation, a new relation, a
# TRUNCATE (new relfilenode), a rewrite (CLUSTER).
psql_q 'VACUUM (FREEZE) pgbench_accounts' \
    'DELETE FROM pgbench_accounts WHERE aid % 5000 = 0' \
    'CREATE TABLE vs_extra AS SELECT g AS id, repeat(md5(g::text), 4) AS pad FROM generate_series(1, 20000) g' \
    'DELETE FROM vs_extra WHERE id > 10000' 'VACUUM vs_extra' \
    'TRUNCATE pgbench_history' 'CLUSTER pgbench_branches USING pgbench_branches_pkey' >/dev/null
lsn_e=$(checkpoint_redo)
wal_mb=$(psql_q "SELECT round((pg_wal_lsn_diff('$lsn1', '$lsn0') / 1048576)::numeric, 1)")
tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/pgbench.log" | head -1)
per_mb() { awk -v t="$1" -v hz="$ticks_per_s" -v w="$wal_mb" 'BEGIN { printf "%d ms of CPU = %.2f ms per MB of WAL", t * 1000 / hz, t * 1000 / hz / w }'; }
echo "pgbench:    $tps TPS; $wal_mb MB of WAL"
echo "follower:   $(per_mb $((f1 - f0))) (PID $follower)"
echo "summarizer: $(per_mb $((s1 - s0))) (PID $summarizer)"
echo "ratio:      follower / summarizer CPU = $(awk -v f=$((f1 - f0)) -v s=$((s1 - s0)) 'BEGIN { if (s > 0) printf "%.2f", f / s; else print "-" }')"

# What each lists for [L, E).
# Summaries are cut at redo pointers: those from L on cover exactly [L, E)
# when the first starts at L (checked below); one that began before L would
# bring blocks changed before L, which ptrack rightly leaves out.
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
echo "tree:       $(tree_rev)"
