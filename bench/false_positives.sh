#!/usr/bin/env bash
#
# false_positives.sh -- how many blocks does ptrack_get_pagemapset(L) list
# that did not change, at ptrack.map_size 1, 8 and 64 MB?
#
# For each map size, a fresh cluster and the same workload:
#   pgbench -i -s 20 (about 300 MB), CHECKPOINT,
#   L0 = that CHECKPOINT's redo LSN          (a backup's L: pg_backup_start()'s
#                                             checkpoint, which writes what the
#                                             load left dirty after this LSN)
#   L1 = pg_current_wal_insert_lsn()         (the brief's L: right after the CHECKPOINT)
#   SELECT pg_switch_wal(); L2 = pg_current_wal_insert_lsn()
#   copy of the relation files (base/, global/): the data directory at L
#   pgbench -n -M prepared -c 2 -j 2 -t T --random-seed 1, CHECKPOINT
# then one pass of the page-LSN oracle (t/lib/PtrackOracle.pm) over every
# block of every permanent relation file except the free space maps:
#   changed  = page LSN >= L (main, VM and init forks: all are WAL-logged
#              pages that carry an LSN), or beyond the file's length at L
#   listed   = set in the pagemap of ptrack_get_pagemapset(L) (_fsm rows
#              left out: FSM forks are always listed whole, by design)
#   fp       = listed and not changed; fp rate = fp / unchanged blocks
# and each false positive is compared with the copy at L:
#   fp_content = its bytes differ from the copy: it was written after L
#                without a new page LSN (hint bits, which are not WAL-logged
#                here, and visibility map bits cleared by heap updates, which
#                do not set the VM page's LSN).  Not really false positives.
#   fp_same    = its bytes are those of L: hash collisions in the map, and
#                blocks written just before L whose stored LSN was rounded up
#                to the map's 64 KB WAL granule, hence >= L.
# L1 and L2 see the same changes (nothing but the WAL switch happens between
# them); their difference is the granule effect of the blocks that the
# CHECKPOINT before L wrote (all of them sit in L1's granule).  L0 sees the
# same changes too, and the pages that CHECKPOINT wrote after its redo LSN:
# with the hooks, marked with the insert position they are all listed since
# L0, marked with their page LSN (data checksums or wal_log_hints, a core
# patch with mdwritev_hook; docs/design.md section 3.2) they are not.  For
# comparison, the hash-collision rate the map's geometry predicts for the
# number of blocks written after L (n): each written block sets 2 slots,
# a fraction p = 1 - exp(-2n/S) of the S slots is set, and an unchanged
# block is listed when both of its slots are: p^2.
# The same pass counts misses (changed, not listed: must be 0) and blocks
# whose bytes changed since L but that are not listed (every write goes
# through the write hook; with insert-position marks 0 is expected, hint bits
# included; with page-LSN marks a hint-bit-only write of a page whose LSN
# lies between the last redo LSN and L is not listed, which is allowed:
# hint bits may go either way, docs/design.md section 1).
#
# The brief's target is under 1% of the unchanged blocks with a map of 1/1000
# of the database size; ptrack.map_size is whole MB, so 1/1000 of a 300 MB
# database is out of reach: an extra run at scale 66 (about 1 GB) with a
# 1 MB map gives that ratio, same workload.
#
# Run as root (servers run as ptrack_test through runuser) or as a normal
# user.  Unix socket in a private temp dir only; every server is stopped by
# its postmaster PID at the end, also on failure.  That plumbing, the options
# --port, --keep, --prefix and the machine lines of the report are shared
# with the other benchmarks in bench/lib.sh.
#
# Usage: bench/false_positives.sh [options]
#   --map-sizes LIST   comma list of ptrack.map_size in MB (default 1,8,64)
#   --scale N          pgbench scale (default 20)
#   --transactions N   pgbench -t, per client, 2 clients (default 5000)
#   --extra S:M        one more run at scale S with map M MB; "none" for no
#                      extra run (default 66:1)
#   --port N           port of the servers' socket (default 56102)
#   --quick            smoke run: scale 5, -t 1000, maps 1,64, no extra run
#                      (explicit options still win)
#   --keep             keep the temp dir (clusters, copies, logs)
#   --prefix DIR       PostgreSQL prefix (default: PG_PREFIX, else
#                      scripts/build-postgres.sh --print-prefix)
#   --checksums on|off|default
#                      data checksums of the clusters (default: the
#                      version's initdb default, off up to 17, on from 18)
# The extension must be installed into that prefix (make install).
set -euo pipefail
export LC_ALL=C
unset PGOPTIONS PGSERVICE PGSERVICEFILE PGSSLMODE || true
# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

map_sizes='' scale='' transactions='' extra='' port=56102 quick=0 keep=0 prefix=${PG_PREFIX:-}
cmdline=$(printf '%q ' "$0" "$@")
while [ $# -gt 0 ]; do
    case $1 in
        --map-sizes) map_sizes=${2:?}; shift ;;
        --scale) scale=${2:?}; shift ;;
        --transactions) transactions=${2:?}; shift ;;
        --extra) extra=${2:?}; shift ;;
        --quick) quick=1 ;;
        *) common_option "$@" && shift ;;   # --port, --keep, --prefix, --help
    esac
    shift
done
if [ $quick -eq 1 ]; then
    map_sizes=${map_sizes:-1,64} scale=${scale:-5} transactions=${transactions:-1000} extra=${extra:-none}
fi
map_sizes=${map_sizes:-1,8,64} scale=${scale:-20} transactions=${transactions:-5000} extra=${extra:-66:1}

for v in "$scale" "$transactions" "$port"; do is_int "$v" || die "not a non-negative integer: $v"; done
[ "$scale" -ge 1 ] && [ "$transactions" -ge 1 ] || die "--scale and --transactions must be >= 1"
runs=()
IFS=, read -r -a map_list <<<"$map_sizes"
for m in "${map_list[@]}"; do
    is_int "$m" && [ "$m" -ge 1 ] || die "--map-sizes: not a size in MB >= 1: $m"
    runs+=("$scale:$m")
done
if [ "$extra" != none ]; then
    [[ $extra =~ ^[0-9]+:[0-9]+$ ]] || die "--extra must be SCALE:MAP or none"
    runs+=("$extra")
fi

[ -r "$repo/t/lib/PtrackOracle.pm" ] || die "missing $repo/t/lib/PtrackOracle.pm"
find_postgres postgres pg_ctl initdb pgbench psql pg_config

pg_user_setup
make_work ptrack-fp 700   # also the socket directory, $sock

# --------------------------------------------------------------- the oracle
# analyse PGDATA SNAPSHOT MAP_MB L...: one line of key=value counts per L.
{ bench_node_pl; cat <<'EOF'; } >"$work/analyse.pl"
use PtrackOracle qw(BLCKSZ page_lsns relation_files pagemapset lsn_to_int);

my ($pgdata, $snap, $map_mb, @lsn_texts) = @ARGV;

# The data directory at L: file lengths (extension oracle) and bytes.
my %had = map { $_->{path} => $_->{nblocks} } relation_files($snap);

sub read_block
{
	my ($fh, $b) = @_;
	return undef unless $fh;
	seek($fh, $b * BLCKSZ, 0) or return undef;
	my $got = read($fh, my $page, BLCKSZ);
	return defined $got && $got == BLCKSZ ? $page : undef;
}

# 1. The disk first: page LSNs and whether each block's bytes changed since L.
my @files;
foreach my $f (relation_files($pgdata))
{
	next if $f->{temp} || $f->{unlogged} || $f->{fork} eq 'fsm';
	my @lsns = page_lsns($pgdata, $f->{path});
	my (@differs, $now, $then);
	open($now, '<:raw', "$pgdata/$f->{path}") or next;
	open($then, '<:raw', "$snap/$f->{path}") or undef $then;
	my $had = $had{ $f->{path} } // 0;
	for my $b (0 .. $#lsns)
	{
		next if $b >= $had;
		my $cur = read_block($now, $b);
		my $old = read_block($then, $b);
		$differs[$b] = (defined $cur && defined $old && $cur ne $old) ? 1 : 0;
	}
	close $now;
	close $then if $then;
	push @files, { f => $f, lsns => \@lsns, had => $had, differs => \@differs };
}

# 2. The server, once per L.
my $node = BenchNode->new(pgdata => $pgdata, psql => [ split /\x1f/, $ENV{ORACLE_PSQL} ]);
my @maps = map { pagemapset($node, 'postgres', $_) } @lsn_texts;

# The geometry of ptrack/map.h: 1/64 of the bytes for the segment summary,
# the rest in 64-byte lines of 8 slots.
my $bytes = $map_mb * 1024 * 1024;
my $summary_bytes = int($bytes / 64 / 64) * 64;
my $slots = int(($bytes - $summary_bytes) / 64) * 8;

# 3. Compare, per L.
for my $i (0 .. $#lsn_texts)
{
	my $since = lsn_to_int($lsn_texts[$i]);
	my $map = $maps[$i];
	my %s = map { $_ => 0 }
	  qw(blocks changed listed fp fp_content fp_same misses unlisted_content vm_fp listed_fsm rows);
	$s{rows} = scalar keys %$map;
	foreach my $path (keys %$map)
	{
		$s{listed_fsm} += scalar @{ $map->{$path}{blocks} } if $path =~ /_fsm(\.\d+)?$/;
	}
	foreach my $c (@files)
	{
		my $f = $c->{f};
		my %listed = $map->{ $f->{path} } ? map { $_ => 1 } @{ $map->{ $f->{path} }{blocks} } : ();
		my $lsns = $c->{lsns};
		for my $b (0 .. $#$lsns)
		{
			$s{blocks}++;
			my $changed = $lsns->[$b] >= $since || $b >= $c->{had};
			my $is_listed = $listed{$b} ? 1 : 0;
			$s{changed}++ if $changed;
			$s{listed} += $is_listed;
			$s{misses}++ if $changed && !$is_listed;
			next if $changed;
			if ($is_listed)
			{
				$s{fp}++;
				$s{vm_fp}++ if $f->{fork} eq 'vm';
				if ($c->{differs}[$b]) { $s{fp_content}++; } else { $s{fp_same}++; }
			}
			elsif ($c->{differs}[$b])
			{
				$s{unlisted_content}++;
			}
		}
	}
	my $unchanged = $s{blocks} - $s{changed};
	# Blocks written after L (their slots are >= L): changed + rewritten without a new LSN.
	my $written = $s{changed} + $s{fp_content};
	my $p = 1 - exp(-2 * $written / $slots);
	my $expected = ($unchanged - $s{fp_content}) * $p * $p;
	printf "L=%s %s unchanged=%d fp_rate=%.4f fp_same_rate=%.4f slots=%d written=%d expected_hash_fp=%.1f\n",
	  $lsn_texts[$i], join(' ', map { "$_=$s{$_}" } sort keys %s), $unchanged,
	  $unchanged ? $s{fp} / $unchanged : 0, $unchanged ? $s{fp_same} / $unchanged : 0,
	  $slots, $written, $expected;
}
EOF

oracle_psql_env

# ------------------------------------------------------------------ header
so_md5=$(md5_of "$pkglib/ptrack.so")
git_rev=$(tree_rev)
report_header "ptrack_get_pagemapset(L) against the page-LSN oracle"
report_load
report_postgres
echo "ptrack.so:  md5 $so_md5, tree $git_rev"
echo "workload:   pgbench -i -s <scale>; CHECKPOINT (redo LSN: L0); L1; pg_switch_wal(); L2;"
echo "            pgbench -n -M prepared -c 2 -j 2 -t $transactions --random-seed 1; CHECKPOINT"
echo "runs:       ${runs[*]} (scale:map MB); shared_buffers 128MB, autovacuum off"
echo

table="$work/table.txt"
: >"$table"
for run in "${runs[@]}"; do
    s=${run%%:*} m=${run##*:}
    dd="$work/data-$s-$m" snap="$work/snap-$s-$m"
    echo "## scale $s, ptrack.map_size ${m}MB"
    server_initdb "$dd" "$work/initdb.log"
    server_conf "$dd" <<EOF
shared_buffers = 128MB
synchronous_commit = off
max_wal_size = 4GB
checkpoint_timeout = 1h
autovacuum = off
log_checkpoints = on
shared_preload_libraries = 'ptrack'
ptrack.map_size = $m
EOF
    server_start "$dd" "$work/server-$s-$m.log" server
    psql_q "CREATE EXTENSION ptrack" "SELECT ptrack_init_lsn()" >/dev/null
    t0=$(date +%s)
    load_pgbench "$s" "$work/init.log"
    psql_q "CHECKPOINT" >/dev/null
    dirty=$(sed -n 's/.*checkpoint complete: wrote \([0-9]*\) buffers.*/\1/p' "$work/server-$s-$m.log" | tail -n 1)
    l0=$(psql_q "SELECT redo_lsn FROM pg_control_checkpoint()")
    l1=$(psql_q "SELECT pg_current_wal_insert_lsn()")
    psql_q "SELECT pg_switch_wal()" >/dev/null
    l2=$(psql_q "SELECT pg_current_wal_insert_lsn()")
    # The data directory at L: the server is idle and everything is checkpointed.
    as_pg mkdir "$snap"
    as_pg cp -a "$dd/base" "$dd/global" "$dd/PG_VERSION" "$snap/"
    db_bytes=$(psql_q "SELECT pg_database_size('postgres')")
    t1=$(date +%s)
    as_pg "$bin/pgbench" -h "$sock" -p "$port" -U postgres -n -M prepared -c 2 -j 2 -t "$transactions" \
        --random-seed 1 postgres >"$work/run-$s-$m.log" 2>&1 || { cat "$work/run-$s-$m.log" >&2; die "pgbench failed"; }
    psql_q "CHECKPOINT" >/dev/null
    t2=$(date +%s)
    tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$work/run-$s-$m.log" | tail -n 1)
    echo "pgbench -i in $((t1 - t0))s ($((db_bytes / 1048576)) MB; the CHECKPOINT before L1 wrote ${dirty:-?} buffers);" \
         "L0 = $l0, L1 = $l1, L2 = $l2; run of $((2 * transactions)) transactions in $((t2 - t1))s ($tps tps)"
    res=$(perl -I"$repo/t/lib" "$work/analyse.pl" "$dd" "$snap" "$m" "$l0" "$l1" "$l2")
    echo "$res"
    for which in 0 1 2; do
        line=$(sed -n "$((which + 1))p" <<<"$res")
        printf '%-5s %4s %7s %-3s %8s %8s %8s %7s %7s %7s %6s %8s %8s %7s %7s %7s\n' "$s" "$m" \
            "1/$((db_bytes / (m * 1048576)))" "L$which" "$(kv blocks "$line")" "$(kv changed "$line")" \
            "$(kv unchanged "$line")" "$(kv fp "$line")" "$(kv fp_content "$line")" "$(kv fp_same "$line")" \
            "$(kv vm_fp "$line")" "$(awk -v r="$(kv fp_rate "$line")" 'BEGIN {printf "%.3f%%", 100 * r}')" \
            "$(awk -v r="$(kv fp_same_rate "$line")" 'BEGIN {printf "%.3f%%", 100 * r}')" \
            "$(kv expected_hash_fp "$line")" "$(kv misses "$line")" "$(kv unlisted_content "$line")" >>"$table"
    done
    server_stop "$dd"
    [ $keep -eq 1 ] || as_pg rm -rf "$dd" "$snap"
    echo
done

warn_if_reinstalled
echo "## summary (blocks of every permanent relation file except _fsm; rates are of the unchanged blocks)"
printf '%-5s %4s %7s %-3s %8s %8s %8s %7s %7s %7s %6s %8s %8s %7s %7s %7s\n' scale map map/db L blocks changed \
    unchanged fp fp_cont fp_same vm_fp fp_rate same_rt exp_hash misses unl_chg
cat "$table"
exit 0
