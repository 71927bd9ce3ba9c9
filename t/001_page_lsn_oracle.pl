# Copyright (c) the ptrack authors
#
# 001_page_lsn_oracle.pl -- ptrack's one promise, checked against the disk.
#
# For a start LSN L, ptrack_get_pagemapset(L) must list every block of every
# permanent relation file that was written or extended after L (docs/design.md
# section 1).  Two oracles that do not depend on ptrack (t/lib/PtrackOracle.pm):
#
#   - a page found on disk whose header LSN is >= L was written after L;
#   - a block beyond a file's length at L (or in a file that did not exist at
#     L) was extended after L.
#
# The workload: pgbench -i -s 10 with its indexes in a tablespace, more index
# builds (btree, hash, GiST, BRIN), deletes, updates, VACUUM, ALTER TABLE SET
# TABLESPACE, CREATE DATABASE with both strategies, a pgbench run, all with a
# small shared_buffers (backends and the bgwriter write pages, not only the
# checkpointer), WAL-size checkpoints and autovacuum running.  Then the oracle
# runs on a quiet server, once from ptrack_init_lsn() and once from an L2
# taken before a second, shorter pgbench run (false positives are reported).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode tablespace_version_re);
use PtrackOracle qw(block_counts listed_ok lsn_to_int no_misses_ok relation_files);

my $node = PostgreSQL::Test::Cluster->new('page_lsn_oracle');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'ptrack'
ptrack.map_size = 64MB
wal_level = replica
shared_buffers = 16MB
max_wal_size = 64MB
autovacuum_naptime = 1s
});
$node->start;

my $tsdir = PostgreSQL::Test::Utils::tempdir_short();
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql('postgres', "CREATE TABLESPACE ts1 LOCATION '$tsdir'");

# Stop autovacuum, wait until no worker is left, then CHECKPOINT: after this
# nothing writes relation pages except hint-bit flushes (LSN unchanged).
sub quiesce
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET autovacuum = off;\nSELECT pg_reload_conf();");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity "
		  . "WHERE backend_type IN ('autovacuum launcher', 'autovacuum worker')")
	  or die 'autovacuum did not stop';
	$node->safe_psql('postgres', 'CHECKPOINT');
}

sub resume_autovacuum
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM RESET autovacuum;\nSELECT pg_reload_conf();");
}

# Checks that hold for any pagemapset on a quiet server; $label names the L.
sub check_rows
{
	my ($map, $label) = @_;
	my $pgdata = $node->data_dir;
	my %files = map { $_->{path} => $_ } relation_files($pgdata);

	my (@bad_count, @bad_rows, @bad_path, @beyond_eof);
	foreach my $path (sort keys %$map)
	{
		my $row = $map->{$path};
		push @bad_count, "$path pagecount $row->{pagecount} bits " . scalar @{ $row->{blocks} }
		  if $row->{pagecount} != scalar @{ $row->{blocks} };
		push @bad_rows, "$path: $row->{rows} rows" if $row->{rows} != 1;
		my $f = $files{$path};
		if (!$f || $f->{temp} || $f->{unlogged})
		{
			push @bad_path, $path;
			next;
		}
		my @past = grep { $_ >= $f->{nblocks} } @{ $row->{blocks} };
		push @beyond_eof, "$path: blocks @past[0 .. ($#past < 4 ? $#past : 4)] >= $f->{nblocks}"
		  if @past;
	}
	is(scalar @bad_count, 0, "$label: pagecount equals the number of set bits in every row")
	  or diag(join("\n", @bad_count[ 0 .. ($#bad_count < 19 ? $#bad_count : 19) ]));
	is(scalar @bad_rows, 0, "$label: one row per path") or diag(join("\n", @bad_rows));
	is(scalar @bad_path, 0,
		"$label: every listed path is an existing permanent relation file of the data directory")
	  or diag(join("\n", @bad_path));
	is(scalar @beyond_eof, 0, "$label: no bit is set beyond the end of its file")
	  or diag(join("\n", @beyond_eof));

	# FSM forks are never WAL-logged: every block of every FSM file is listed,
	# always; with wal capture answering from its summaries, every FSM file of
	# a relation whose main fork is listed (docs/design.md section 4.8: no walk
	# of the whole data directory).  (Bits past the end are the business of
	# the check above.)
	my $from_summaries =
	  $node->safe_psql('postgres', "SELECT current_setting('ptrack.capture') = 'wal'") eq 't';
	my %main_listed;
	foreach my $path (keys %$map)
	{
		$main_listed{$1} = 1 if $path =~ /^(.*\/\d+)(?:\.\d+)?$/;
	}
	my @fsm = grep {
		     $_->{fork} eq 'fsm'
		  && !$_->{temp}
		  && !$_->{unlogged}
		  && $_->{nblocks} > 0
		  && (!$from_summaries || $main_listed{ $_->{path} =~ s/_fsm(?:\.\d+)?$//r })
	} values %files;
	my @fsm_not_whole;
	foreach my $f (@fsm)
	{
		my $row = $map->{ $f->{path} };
		my %listed = $row ? (map { $_ => 1 } @{ $row->{blocks} }) : ();
		my $listed = grep { $listed{$_} } 0 .. $f->{nblocks} - 1;
		push @fsm_not_whole, "$f->{path}: $listed of $f->{nblocks} blocks listed"
		  unless $listed == $f->{nblocks};
	}
	# (From summaries only the FSM files of changed relations are due: a few at L2.)
	cmp_ok(scalar @fsm, '>', $from_summaries ? 0 : 10, "$label: the cluster has FSM files (" . scalar(@fsm) . ')');
	is(scalar @fsm_not_whole, 0,
		"$label: every FSM file " . ($from_summaries ? 'of a relation with a listed main fork ' : '') . 'is listed whole')
	  or diag(join("\n", @fsm_not_whole[ 0 .. ($#fsm_not_whole < 19 ? $#fsm_not_whole : 19) ]));
}

# ---------------------------------------------------------------------------
# Phase 1: from ptrack_init_lsn()
# ---------------------------------------------------------------------------

my $init_lsn = $node->safe_psql('postgres', 'SELECT ptrack_init_lsn()');
my $insert_lsn = $node->lsn('insert');
ok(lsn_to_int($init_lsn) > 0 && lsn_to_int($init_lsn) <= lsn_to_int($insert_lsn),
	"ptrack_init_lsn() $init_lsn is set and not ahead of the insert position $insert_lsn");
my $L = $init_lsn;
my $baseline = block_counts($node->data_dir);

$node->command_ok(
	[ 'pgbench', '-i', '-q', '-s', '10', '--index-tablespace=ts1', 'postgres' ],
	'pgbench -i -s 10 (indexes in tablespace ts1)');

$node->safe_psql(
	'postgres', q{
CREATE INDEX accounts_abalance ON pgbench_accounts (abalance);
CREATE INDEX accounts_bid_hash ON pgbench_accounts USING hash (bid);
CREATE INDEX accounts_aid_brin ON pgbench_accounts USING brin (aid);
CREATE TABLE points AS SELECT point(g % 1000, g / 1000) AS p FROM generate_series(1, 100000) g;
CREATE INDEX points_gist ON points USING gist (p);
DELETE FROM pgbench_accounts WHERE aid % 50 = 0;
UPDATE pgbench_accounts SET abalance = abalance + 1, filler = 'changed' WHERE aid % 97 = 0;
VACUUM pgbench_accounts;
CREATE TABLE moved AS SELECT g AS id, repeat('m', 100) AS pad FROM generate_series(1, 100000) g;
ALTER TABLE moved SET TABLESPACE ts1;
CREATE DATABASE db_wal_log STRATEGY = WAL_LOG;
CREATE DATABASE db_file_copy STRATEGY = FILE_COPY;
});

$node->command_ok([ 'pgbench', '-c', '4', '-j', '2', '-T', '20', 'postgres' ],
	'pgbench -c 4 -j 2 -T 20');

quiesce();

my $stats = no_misses_ok($node, $L,
	"L = ptrack_init_lsn(): every block with page LSN >= L or extended after L is listed",
	forks => [ 'main', 'vm', 'init' ],
	baseline => $baseline);
cmp_ok($stats->{at_or_after}, '>', 1000,
	"L = ptrack_init_lsn(): the oracle saw many blocks with page LSN >= L ($stats->{at_or_after})");
cmp_ok($stats->{extended}, '>', 1000,
	"L = ptrack_init_lsn(): the oracle saw many blocks extended after L ($stats->{extended})");
my $map = $stats->{pagemapset};
listed_ok($map, qr{^pg_tblspc/\d+/@{[tablespace_version_re()]}/\d+/\d+},
	'L = ptrack_init_lsn(): files in tablespace ts1 are listed',
	pgdata => $node->data_dir);
my ($file_copy_db) = $node->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'db_file_copy'");
listed_ok($map, qr{^base/$file_copy_db/},
	'L = ptrack_init_lsn(): files of the FILE_COPY database are listed',
	pgdata => $node->data_dir);
check_rows($map, 'L = ptrack_init_lsn()');

# ---------------------------------------------------------------------------
# Phase 2: from an L2 taken after a checkpoint on a quiet server
# ---------------------------------------------------------------------------

my $L2 = $node->lsn('insert');
my $baseline2 = block_counts($node->data_dir);
resume_autovacuum();

$node->command_ok([ 'pgbench', '-c', '4', '-j', '2', '-T', '10', 'postgres' ],
	'second run: pgbench -c 4 -j 2 -T 10');

quiesce();

my $stats2 = no_misses_ok($node, $L2,
	"L2 = $L2: every block with page LSN >= L2 or extended after L2 is listed",
	forks => [ 'main', 'vm', 'init' ],
	baseline => $baseline2);
cmp_ok($stats2->{at_or_after}, '>', 100,
	"L2: the oracle saw many blocks with page LSN >= L2 ($stats2->{at_or_after})");
check_rows($stats2->{pagemapset}, 'L2');

my $needed = $stats2->{at_or_after} + $stats2->{extended};
note(
	sprintf(
		'false positives from L2: %d listed blocks of the checked files had page LSN < L2 '
		  . 'and were not extended after L2 (%d blocks checked, %d needed, %.1f%% extra); '
		  . 'whole pagemapset: %d rows, %d blocks',
		$stats2->{listed_below}, $stats2->{blocks}, $needed,
		$needed ? 100.0 * $stats2->{listed_below} / $needed : 0,
		$stats2->{rows}, $stats2->{listed_total}));

# The first L still holds after the second run.
no_misses_ok($node, $L, 'L = ptrack_init_lsn() again after the second run: nothing missed',
	forks => [ 'main', 'vm', 'init' ],
	baseline => $baseline);

# With wal capture the answers above came from the exact summaries
# (docs/design.md section 4.6); the follower marks no map (it keeps only its
# resume point, in a few KB), and no map fill is shown.
if (capture_mode() eq 'wal')
{
	is($node->safe_psql('postgres', 'SELECT map_fill IS NULL AND map_size < 16384 FROM ptrack_status()'), 't',
		'wal capture: the map is a few KB and holds no marks');
}

$node->stop;
done_testing();
