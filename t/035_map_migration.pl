# Copyright (c) the ptrack authors
#
# 035_map_migration.pl -- a trusted map that comes without change summaries
# (an upgrade from a version of ptrack that kept only the map, or
# pg_wal/ptrack lost while the server was stopped) becomes the summary of
# [ptrack_init_lsn(), covered + 1) when the WAL follower resumes
# (src/pg/capture/wal/map_migration.cpp, docs/design.md section 9.4), so
# that answering from the summaries neither moves ptrack_init_lsn() forward
# nor forces a full backup.
#
#   1. wal capture, changes since ptrack_init_lsn() L0 and since L1;
#   2. a clean stop, pg_wal/ptrack removed (what a map-only version leaves);
#   3. after the start: the migration is logged, ptrack_init_lsn() is still
#      L0, the chain starts there unbroken, and the page-LSN oracle finds
#      nothing missed since L0 and since L1 (changes before and after the
#      upgrade);
#   4. the same after an immediate stop (the map's covered LSN is then its
#      last save's, and the follower reads the rest of the WAL again).
#
# Without the migration ptrack_init_lsn() would be the map's covered LSN + 1
# and step 3 fails.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Path qw(rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node init_lsn log_position log_since);
use PtrackOracle qw(block_counts lsn_to_int no_misses_ok);
use PtrackSummaries qw(summary_dir summaries chain_break describe_summaries);

plan skip_all => 'summaries are written by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

my $node = ptrack_node('migration', conf => "autovacuum = off\n");
$node->start;
my $pgdata = $node->data_dir;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ], 'pgbench -i -s 2');
$node->safe_psql('postgres', 'CHECKPOINT');

my $l0 = init_lsn($node);
my $baseline0 = block_counts($pgdata);
$node->command_ok([ 'pgbench', '-n', '-t', '300', 'postgres' ], 'pgbench since L0');
$node->safe_psql('postgres',
	q{CREATE TABLE grown AS SELECT g AS id, repeat('g', 200) AS pad FROM generate_series(1, 5000) g;
	  CREATE INDEX ON pgbench_accounts (abalance); TRUNCATE pgbench_history; CHECKPOINT});
my $l1 = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
my $baseline1 = block_counts($pgdata);
$node->safe_psql('postgres', q{UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 20 = 0});
note "L0 = $l0, L1 = $l1";

foreach my $stop ('fast', 'immediate')
{
	$node->stop($stop);
	rmtree(summary_dir($pgdata));
	my $offset = log_position($node);
	$node->start;
	my $init = init_lsn($node);    # waits for the follower
	like(log_since($node, $offset), qr/LOG:  ptrack turned its map into the change summary of \Q$l0\E-/,
		"$stop stop, pg_wal/ptrack removed: the follower turns its map into a summary from L0 $l0");
	is($init, $l0, "$stop stop: ptrack_init_lsn() is still L0");
	my @chain = summaries($pgdata);
	ok(@chain > 0 && $chain[0]{valid} && $chain[0]{start} == lsn_to_int($l0) && chain_break(@chain) eq '',
		"$stop stop: the summaries start at L0, unbroken")
	  or diag 'summaries: ' . describe_summaries(@chain) . '; break: ' . chain_break(@chain);
	no_misses_ok($node, $l0, "$stop stop: nothing missed since L0 (before the removal and after)",
		baseline => $baseline0);
	no_misses_ok($node, $l1, "$stop stop: nothing missed since L1", baseline => $baseline1);
	$node->safe_psql('postgres', q{UPDATE pgbench_branches SET bbalance = bbalance + 1; INSERT INTO grown SELECT g, 'h' FROM generate_series(1, 3000) g});
}

$node->stop;
done_testing();
