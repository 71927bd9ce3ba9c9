# Copyright (c) the ptrack authors
#
# 035_map_migration.pl -- wal capture keeps no map sized by the user, and a
# full-size map of an earlier run still carries tracking over
# (src/pg/persist/map_load.cpp read_map_to_migrate(),
# src/pg/capture/wal/map_migration.cpp, docs/design.md section 4.10).
#
# Each round starts tracking afresh, makes changes since ptrack_init_lsn() L0
# and since L1, stops, and leaves what an earlier version of ptrack, whose
# follower marked a map of ptrack.map_size (64 MB) and saved its limit table
# as ptrack.limits, would have left: t/tools/old_version_map.cpp writes that
# map with a mark for every block changed since L0 (page LSN >= L0, or
# beyond the file sizes at L0 or L1, marked at the covered LSN) and an empty
# ptrack.limits, from the small map's last save (its covered LSN, which
# ptrack.sizes belongs to), at the top of the data directory, where that
# version kept its files (PtrackCluster::to_old_layout()).  Then the server
# starts, moves them into pg_wal/ptrack (src/pg/persist/state_files.h) and:
#
#   1. a clean stop, the summaries removed (what a map-only version leaves):
#      the postmaster reads the 64 MB map privately and writes its answer as
#      the summary of [L0, covered + 1); ptrack_init_lsn() stays L0, the
#      chain starts there unbroken, the page-LSN oracle finds nothing missed
#      since L0 and L1;
#   2. the same after an immediate stop (the map's covered LSN is then its
#      last save's, and the follower reads the rest of the WAL again);
#   3. a clean stop with the summaries kept: they chain to covered + 1, so
#      nothing is migrated and nothing is missed.
#
# After each start: ptrack.map is saved in the small geometry (a few KB),
# ptrack's shared memory (pg_shmem_allocations) is a few KB whatever
# ptrack.map_size says, with no limit table and no mark announcement lines,
# ptrack_status() reports it so, and no map fill; ptrack.limits is removed
# once the map is loaded.  Then:
#
#   4. the small map without summaries (removed while stopped):
#      its marks cannot stand in for them, so tracking restarts with the
#      WARNING and ptrack_get_pagemapset(L0) refuses: never a short answer.
#
#   5. saves made while the summaries' chain ends at a redo LSN the follower
#      has not reached: they wait, so immediate stops right after them resume
#      on a whole chain (no restart, nothing missed).
#
# Without the migration, ptrack_init_lsn() moves past L0 in rounds 1 and 2;
# without the small geometry the size checks fail; reading a small map's
# (empty) marks as a migration would answer short in 4; without the wait of
# the save, 5 restarts tracking.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node ptrack_file ptrack_files_outside to_old_layout init_lsn log_position log_since);
use PtrackOracle qw(block_counts lsn_to_int no_misses_ok page_lsns relation_files);
use PtrackSummaries qw(summaries chain_break describe_summaries remove_summaries);

plan skip_all => 'summaries are written by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

# The writer of the earlier version's files, built from the engine's sources.
my $root = "$FindBin::RealBin/..";
my $old_version_map = PostgreSQL::Test::Utils::tempdir() . '/old_version_map';
my @build = ($ENV{CXX} || 'c++', '-std=c++17', '-O1', "-I$root/include", "$root/t/tools/old_version_map.cpp",
	glob("$root/src/engine/*.cpp"), '-o', $old_version_map);
system(@build) == 0 or die "could not build t/tools/old_version_map.cpp: @build";

my $node = ptrack_node('migration', conf => "autovacuum = off\n");
my $pgdata = $node->data_dir;

sub ptrack_shmem
{
	return $node->safe_psql('postgres', q{SELECT size FROM pg_shmem_allocations WHERE name = 'ptrack'});
}

my %fork_number = (main => 0, fsm => 1, vm => 2, init => 3);

# The marks the earlier version's follower made since $l0 (a stopped server):
# every block whose page LSN is >= $l0, at that LSN; every block beyond a
# file's size in one of @baselines at the covered LSN (0 for the writer).
sub old_version_marks
{
	my ($l0, @baselines) = @_;
	my $since = lsn_to_int($l0);
	my $marks = '';
	foreach my $f (relation_files($pgdata))
	{
		next if $f->{temp} || $f->{unlogged};
		my ($spc, $db) =
		    $f->{dir} eq 'global' ? (1664, 0)
		  : $f->{dir} =~ m{^base/(\d+)$} ? (1663, $1)
		  : $f->{dir} =~ m{^pg_tblspc/(\d+)/[^/]+/(\d+)$} ? ($1, $2)
		  :   die "unexpected directory $f->{dir}";
		my @lsns = page_lsns($pgdata, $f->{path});
		foreach my $b (0 .. $#lsns)
		{
			my $grown = grep { !defined $_->{ $f->{path} } || $b >= $_->{ $f->{path} } } @baselines;
			my $lsn = $lsns[$b] >= $since ? $lsns[$b] : $grown ? 0 : next;
			$marks .= "$spc $db $f->{relfilenode} $fork_number{$f->{fork}} "
			  . ($f->{segno} * 131072 + $b) . " $lsn\n";
		}
	}
	return $marks;
}

$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ], 'pgbench -i -s 2');
my $first = 1;

foreach my $round ([ 'fast', 1 ], [ 'immediate', 1 ], [ 'fast', 0 ])
{
	my ($stop, $remove) = @$round;
	my $what = "$stop stop, " . ($remove ? 'summaries removed' : 'summaries kept');
	if (!$first)
	{
		# Each round starts tracking afresh, as the earlier version's run did.
		unlink ptrack_file($pgdata, 'ptrack.map'), ptrack_file($pgdata, 'ptrack.map.delta');
		$node->start;
	}
	$first = 0;
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $l0 = init_lsn($node);
	my $baseline0 = block_counts($pgdata);
	$node->command_ok([ 'pgbench', '-n', '-t', '300', 'postgres' ], "$what: pgbench since L0");
	$node->safe_psql('postgres',
		q{DROP TABLE IF EXISTS grown; CREATE TABLE grown AS SELECT g AS id, repeat('g', 200) AS pad FROM generate_series(1, 5000) g;
		  CREATE INDEX ON pgbench_accounts (abalance); TRUNCATE pgbench_history; CHECKPOINT});
	my $l1 = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
	my $baseline1 = block_counts($pgdata);
	$node->safe_psql('postgres', q{UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 20 = 0});
	note "$what: L0 = $l0, L1 = $l1";

	$node->stop($stop);
	to_old_layout($pgdata);    # the earlier version's files are at the top of the data directory
	my $marks = old_version_marks($l0, $baseline0, $baseline1);
	my ($out, $err) = ('', '');
	IPC::Run::run([ $old_version_map, $pgdata, 64 ], '<', \$marks, '>', \$out, '2>', \$err)
	  or die "old_version_map failed: $err";
	note "$what: the earlier version's map, complete up to 0x$out";
	my $big = -s "$pgdata/ptrack.map";
	cmp_ok($big, '>', 64 * 1024 * 1024, "$what: the earlier version's map has ptrack.map_size ($big bytes)");
	remove_summaries($pgdata) if $remove;
	my $offset = log_position($node);
	$node->start;
	my $init = init_lsn($node);    # waits for the follower
	my $log = log_since($node, $offset);
	like($log, qr{LOG:  ptrack moved its files from the data directory to pg_wal/ptrack},
		"$what: the earlier version's files are moved into pg_wal/ptrack");
	like($log, qr{LOG:  ptrack read map file "pg_wal/ptrack/ptrack\.map" of \d+ kB, saved when its marks were still kept},
		"$what: the postmaster reads the full-size map to migrate it");
	if ($remove)
	{
		like($log, qr/LOG:  ptrack turned its map into the change summary of \Q$l0\E-/,
			"$what: the old map's answer becomes the summary from L0 $l0");
	}
	else
	{
		unlike($log, qr/ptrack turned its map into the change summary/,
			"$what: the summaries chain to the map's covered LSN: nothing to migrate");
	}
	unlike($log, qr/WARNING/, "$what: no WARNING");
	is($init, $l0, "$what: ptrack_init_lsn() is still L0");
	my @chain = summaries($pgdata);
	ok(@chain > 0 && $chain[0]{valid} && $chain[0]{start} == lsn_to_int($l0) && chain_break(@chain) eq '',
		"$what: the summaries start at L0, unbroken")
	  or diag 'summaries: ' . describe_summaries(@chain) . '; break: ' . chain_break(@chain);
	no_misses_ok($node, $l0, "$what: nothing missed since L0", baseline => $baseline0);
	no_misses_ok($node, $l1, "$what: nothing missed since L1", baseline => $baseline1);

	# The map now: a few KB in shared memory and on disk, whatever ptrack.map_size says.
	cmp_ok(ptrack_shmem(), '<', 16 * 1024, "$what: ptrack's shared memory is a few KB (" . ptrack_shmem() . ' bytes)');
	is($node->safe_psql('postgres', q{SELECT string_agg(name, ', ' ORDER BY name) FROM pg_shmem_allocations WHERE name LIKE 'ptrack%'}),
		'ptrack', "$what: no limit table and no mark announcement lines in shared memory");
	ok(!-e ptrack_file($pgdata, 'ptrack.limits') && !-e "$pgdata/ptrack.limits",
		"$what: the earlier version's ptrack.limits is removed once the map is loaded");
	is(join(' ', ptrack_files_outside($pgdata)), '', "$what: no ptrack file is left at the top of the data directory");
	is($node->safe_psql('postgres',
			q{SELECT map_size < 16384 AND map_fill IS NULL AND false_positive_rate IS NULL FROM ptrack_status()}),
		't', "$what: ptrack_status() shows the small map and no fill");
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->poll_query_until('postgres', 'SELECT last_save_lsn IS NOT NULL FROM ptrack_status()')
	  or die 'no map save';
	my $small = -s ptrack_file($pgdata, 'ptrack.map');
	cmp_ok($small, '<', 8192, "$what: ptrack.map is saved small ($small bytes)");
	$node->stop;
}

# 4. The small map without summaries: tracking restarts, nothing answers for L0.
$node->start;
my $l0 = init_lsn($node);
$node->safe_psql('postgres', q{UPDATE pgbench_branches SET bbalance = bbalance + 1; CHECKPOINT});
$node->stop('immediate');
remove_summaries($pgdata);
my $offset = log_position($node);
$node->start;
my $init = init_lsn($node);
my $log = log_since($node, $offset);
like($log, qr/WARNING:  ptrack restarted change tracking at [0-9A-F\/]+: no change summaries end where the saved map is complete/,
	'small map, summaries removed: tracking restarts with the WARNING');
cmp_ok(lsn_to_int($init), '>', lsn_to_int($l0), "small map: ptrack_init_lsn() $init moves past $l0");
my ($ret, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM ptrack_get_pagemapset('$l0')");
isnt($ret, 0, 'small map: ptrack_get_pagemapset(L0) refuses') or diag "it answered $out";
like($err, qr/full backup/, 'small map: the refusal says to take a full backup');
no_misses_ok($node, $init, 'small map: nothing missed since the new ptrack_init_lsn()');

# 5. A save while the chain already ends ahead of the follower: stopped
#    (SIGSTOP) across CHECKPOINT, a small change and CHECKPOINT, the follower
#    then reads both in one batch; it cuts at the second checkpoint's redo
#    LSN R before the record reaching R is applied, and the save due after
#    the first checkpoint record comes in that same loop.  Claiming the
#    covered LSN C = where the follower stands would leave a chain ending at
#    R, past C + 1; a restart cuts it back and finds it broken, and the
#    unmarked map cannot stand in: tracking would restart.  The save waits
#    instead (cut_for_save()), so an immediate stop right after resumes on a
#    whole chain.  Three rounds: the window needs R more than a byte past the
#    previous record's end, which depends on record lengths.
my $l5 = init_lsn($node);
my $baseline5 = block_counts($pgdata);
my $offset5 = log_position($node);
foreach my $round (1 .. 3)
{
	my $follower = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'});
	die 'no WAL follower' unless $follower =~ /^\d+$/;
	kill 'STOP', $follower;
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', "UPDATE pgbench_branches SET bbalance = bbalance + $round");
	$node->safe_psql('postgres', 'CHECKPOINT');
	usleep(1_200_000);    # past the follower's minimum interval between saves
	kill 'CONT', $follower;
	usleep(300_000);      # it reads both checkpoints, cuts at R and saves once
	$node->stop('immediate');
	$node->start;
	init_lsn($node);      # waits for the follower
}
my $log5 = log_since($node, $offset5);
unlike($log5, qr/restarted change tracking/, 'saves around a cut at a redo LSN ahead: tracking never restarts')
  or diag(join("\n", grep { /ptrack/ } split /\n/, $log5));
is(init_lsn($node), $l5, 'saves around a cut at a redo LSN ahead: ptrack_init_lsn() is unchanged');
no_misses_ok($node, $l5, 'saves around a cut at a redo LSN ahead: nothing missed', baseline => $baseline5);

$node->stop;
done_testing();
