# Copyright (c) the ptrack authors
#
# 021_wal_limits.pl -- wal capture only: the changes a WAL record makes
# without a block reference (src/pg/capture/wal_records.cpp) reach pagemapset
# through the change summaries (a limit or a whole database in the change
# set, include/ptrack/change_set.h), across restarts and crashes.
#
#   1. after L: CREATE DATABASE with FILE_COPY (files copied without a block
#      reference) and WAL_LOG, ALTER DATABASE SET TABLESPACE (copied again),
#      relations dropped by COMMIT PREPARED, ROLLBACK PREPARED, ROLLBACK and
#      a rolled back subtransaction, a VACUUM truncation,
#      pg_truncate_visibility_map(), TRUNCATE and DROP DATABASE: every block of
#      every file of the copied databases is listed, the page-LSN oracle
#      passes, and none of these records restarts tracking;
#   2. after a clean restart and after a crash the follower resumes past
#      those records, and every block of the copied database is still listed
#      (the copied files have no block reference a re-read could mark again).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster
  qw(capture_mode tablespace_version_re ptrack_node ptrack_file log_position log_since not_trusted_re count_matches init_lsn);
use PtrackOracle qw(lsn_to_int no_misses_ok pagemapset relation_files);

plan skip_all => 'the limit table is fed by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

my $node = ptrack_node(
	'wal_limits',
	conf => q{
autovacuum = off
max_prepared_transactions = 5
});
$node->start;
my $pgdata = $node->data_dir;
my $restart_re = qr/ptrack restarted change tracking/;

$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_visibility');
$node->safe_psql('postgres',
	q{CREATE TABLE t (id int, pad text) WITH (fillfactor = 50);
	  INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 30000) g});
$node->safe_psql('postgres', 'VACUUM t');
$node->safe_psql('postgres', 'CHECKPOINT');
my $L = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
my $init = init_lsn($node);
my $log_offset = log_position($node);

# Every relation file of database directory $dir whose blocks are not all listed by pagemapset($L).
sub not_whole
{
	my ($dir) = @_;
	my $listed = pagemapset($node, 'postgres', $L);
	my @bad;
	my $files = 0;
	foreach my $f (relation_files($pgdata))
	{
		next unless $f->{dir} eq $dir && $f->{nblocks} > 0;
		$files++;
		my $count = $listed->{ $f->{path} } ? $listed->{ $f->{path} }{pagecount} : 0;
		push @bad, "$f->{path} $count/$f->{nblocks}" if $count != $f->{nblocks};
	}
	return ($files, @bad);
}

sub whole_ok
{
	my ($dir, $name) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my ($files, @bad) = not_whole($dir);
	cmp_ok($files, '>', 100, "$name: $dir holds the files of a database ($files)");
	is(scalar @bad, 0, "$name: every block of every file of $dir is listed")
	  or diag(scalar(@bad) . ' files not whole, first ones: ' . join(', ', @bad[ 0 .. ($#bad < 9 ? $#bad : 9) ]));
}

# 1. The records.
$node->safe_psql('postgres', 'CREATE DATABASE d_copy STRATEGY FILE_COPY TEMPLATE template0');
$node->safe_psql('postgres', 'CREATE DATABASE d_wal STRATEGY WAL_LOG TEMPLATE template0');
my $oid_copy = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'd_copy'});
my $oid_wal = $node->safe_psql('postgres', q{SELECT oid FROM pg_database WHERE datname = 'd_wal'});
whole_ok("base/$oid_copy", 'CREATE DATABASE FILE_COPY');
whole_ok("base/$oid_wal", 'CREATE DATABASE WAL_LOG');

$node->safe_psql('postgres', 'DELETE FROM t WHERE id > 10000');
$node->safe_psql('postgres', 'VACUUM t');
$node->safe_psql('postgres', q{SELECT pg_truncate_visibility_map('t')});
$node->safe_psql('postgres', 'CREATE TABLE dropme (a int); INSERT INTO dropme SELECT generate_series(1, 1000)');
$node->safe_psql('postgres', q{BEGIN; DROP TABLE dropme; PREPARE TRANSACTION 'p1'});
$node->safe_psql('postgres', q{COMMIT PREPARED 'p1'});
$node->safe_psql('postgres', q{BEGIN; CREATE TABLE ab (a int); INSERT INTO ab VALUES (1); PREPARE TRANSACTION 'p2'});
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'p2'});
$node->safe_psql('postgres', 'BEGIN; CREATE TABLE ab (a int); INSERT INTO ab VALUES (1); ROLLBACK');
$node->safe_psql('postgres',
	'BEGIN; CREATE TABLE sx (a int); SAVEPOINT s; CREATE TABLE sy (a int); ROLLBACK TO s; COMMIT');
$node->safe_psql('postgres', 'TRUNCATE t');
$node->safe_psql('postgres', 'DROP DATABASE d_wal');

my $ts_dir = PostgreSQL::Test::Utils::tempdir_short();
$node->safe_psql('postgres', "CREATE TABLESPACE ts LOCATION '$ts_dir'");
$node->safe_psql('postgres', 'ALTER DATABASE d_copy SET TABLESPACE ts');
my $ts_oid = $node->safe_psql('postgres', q{SELECT oid FROM pg_tablespace WHERE spcname = 'ts'});
my ($version_dir) = grep { /^@{[tablespace_version_re()]}$/ } do { opendir(my $d, "$pgdata/pg_tblspc/$ts_oid") or die $!; readdir($d) };
my $moved = "pg_tblspc/$ts_oid/$version_dir/$oid_copy";
whole_ok($moved, 'ALTER DATABASE SET TABLESPACE');

no_misses_ok($node, $L, 'page-LSN oracle after the records', forks => [ 'main', 'vm', 'init' ]);
is(count_matches(log_since($node, $log_offset), $restart_re), 0, 'none of these records restarted tracking')
  or diag(log_since($node, $log_offset));
is(init_lsn($node), $init, 'ptrack_init_lsn() unchanged');

# 2. Restarts: the follower resumes past the CREATE DATABASE records.
$node->restart;    # the follower saves when it stops
ok(!-e ptrack_file($pgdata, 'ptrack.limits') && !-e "$pgdata/ptrack.limits",
	'no ptrack.limits: the summaries hold the limits, the map keeps none');
is(init_lsn($node), $init, 'clean restart: the map is trusted (ptrack_init_lsn() unchanged)');
whole_ok($moved, 'after a clean restart');

$node->safe_psql('postgres', 'CHECKPOINT');
$node->stop('immediate');
$node->start;
is(init_lsn($node), $init, 'crash: the map is trusted (ptrack_init_lsn() unchanged)');
whole_ok($moved, 'after a crash');

$node->stop;
done_testing();
