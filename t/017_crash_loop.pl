# Copyright (c) the ptrack authors
#
# 017_crash_loop.pl -- crashes in the middle of a busy server lose no mark
# and force no full backup (docs/design.md sections 3.5, 3.6 and 4).
#
# t/015 and t/016 each build one crash window by hand; this test crashes a
# server at arbitrary moments of a mixed workload, to catch the windows no
# one thought of.  Each round:
#
#   1. takes L (the insert LSN) and the file lengths (for the oracle's
#      "extended after L" check);
#   2. starts pgbench (2 clients, shared_buffers = 1MB so that pages are
#      evicted and written all the time), a session that loops over the bulk
#      writers that bypass shared buffers (a btree CREATE INDEX, VACUUM FULL,
#      ALTER TABLE ... SET TABLESPACE back and forth, CLUSTER), and a session
#      that takes a CHECKPOINT every 0.4 s, so that checkpoints (hence map
#      saves) fall between the WAL record and the write of bypass pages;
#   3. stops the server with -m immediate after a few seconds, at whatever
#      point the workload has reached;
#   4. after the restart: the server went through crash recovery, the map is
#      trusted (no WARNING), ptrack_init_lsn() is unchanged, and the page-LSN
#      oracle (t/lib/PtrackOracle.pm) finds no block with a page LSN >= L, or
#      added since L, that ptrack_get_pagemapset(L) does not list.
#
# Files that belong to no relation are left out of the oracle: a bulk writer
# killed by the crash leaves its new file behind (PostgreSQL never removes
# such orphans), and it may hold pages whose WAL records never reached the
# disk, so no WAL reader can know of them.  No relation refers to such a
# file and no restore reads it, so it cannot lose data; the test says how
# many it left out.  Every file of every relation of every database is
# checked.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node log_position log_since not_trusted_re init_lsn);
use PtrackOracle qw(block_counts missed_blocks show_misses);

my $mode = capture_mode();
my $rounds = 3;

my $node = ptrack_node('crash_loop',
	conf => "autovacuum = off\nshared_buffers = 1MB\nmax_connections = 20\n"
	  . "max_parallel_maintenance_workers = 0\ncheckpoint_timeout = 1h\nmax_wal_size = 1GB\n");
$node->start;
my $tsdir = PostgreSQL::Test::Utils::tempdir_short();
$node->safe_psql('postgres', "CREATE TABLESPACE ts1 LOCATION '$tsdir'");
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ], 'pgbench -i -s 2');
$node->safe_psql(
	'postgres', q{
CREATE TABLE side_idx AS SELECT g AS id, md5(g::text) AS key FROM generate_series(1, 40000) g;
CREATE TABLE side_vf AS SELECT g AS id, repeat('v', 150) AS pad FROM generate_series(1, 20000) g;
CREATE TABLE side_ts AS SELECT g AS id, repeat('t', 150) AS pad FROM generate_series(1, 20000) g;
CREATE TABLE side_cl (id int PRIMARY KEY, pad text);
INSERT INTO side_cl SELECT g, repeat('c', 150) FROM generate_series(1, 20000) g;
});

my $work = $node->basedir . '/crash_loop';
mkdir $work or die "mkdir $work: $!";

# The bulk writers, over and over; each statement commits on its own.  With
# the crash, one of them is usually cut off in the middle.
my $ddl_file = "$work/bulk.sql";
open(my $fh, '>', $ddl_file) or die "open $ddl_file: $!";
for my $i (1 .. 40)
{
	print $fh "CREATE INDEX side_idx_key ON side_idx (key);\n";
	print $fh "UPDATE side_vf SET pad = pad WHERE id % 10 = $i % 10;\n";
	print $fh "VACUUM FULL side_vf;\n";
	print $fh "ALTER TABLE side_ts SET TABLESPACE ts1;\n";
	print $fh "DROP INDEX side_idx_key;\n";
	print $fh "CLUSTER side_cl USING side_cl_pkey;\n";
	print $fh "ALTER TABLE side_ts SET TABLESPACE pg_default;\n";
}
close $fh;

my $ckpt_file = "$work/checkpoints.sql";
open($fh, '>', $ckpt_file) or die "open $ckpt_file: $!";
print $fh "SELECT pg_sleep(0.4);\nCHECKPOINT;\n" for 1 .. 200;
close $fh;

# The relation files of every database as "dir/relfilenode" (segments and
# forks stripped), from pg_relation_filepath() of every relation that has
# storage: mapped catalogs included.
sub live_relation_files
{
	my %live;
	my @dbs = split /\n/,
	  $node->safe_psql('postgres', 'SELECT datname FROM pg_database WHERE datallowconn');
	foreach my $db (@dbs)
	{
		my $paths = $node->safe_psql($db,
			"SELECT pg_relation_filepath(oid) FROM pg_class WHERE pg_relation_filepath(oid) IS NOT NULL");
		$live{$_} = 1 foreach split /\n/, $paths;
	}
	return \%live;
}

# A miss line of missed_blocks() is "path block N ..."; its relation file is
# the path without the segment number and fork suffix.
sub miss_relation
{
	my ($miss) = @_;
	my ($path) = $miss =~ /^(\S+) block /;
	$path =~ s/(?:_(?:fsm|vm|init))?(?:\.\d+)?$//;
	return $path;
}

my $init = init_lsn($node);
my $libpq = $node->connstr('postgres');
for my $round (1 .. $rounds)
{
	my $work_off = log_position($node);
	my $L = $node->lsn('insert');
	my $baseline = block_counts($node->data_dir);

	my ($out, $err) = ('', '');
	my @runs = (
		IPC::Run::start(
			[ 'pgbench', '-n', '-c', '2', '-j', '1', '-T', '120', $libpq ],
			'>', \$out, '2>', \$err),
		IPC::Run::start([ 'psql', '-X', '-q', '-d', $libpq, '-f', $ddl_file ],
			'>', \$out, '2>', \$err),
		IPC::Run::start([ 'psql', '-X', '-q', '-d', $libpq, '-f', $ckpt_file ],
			'>', \$out, '2>', \$err));
	sleep(3 + 2 * $round);

	my $off = log_position($node);
	my $bulk = () = log_since($node, $work_off) =~
	  /statement: (?:CREATE INDEX|VACUUM FULL|ALTER TABLE side_ts|CLUSTER)/g;
	$node->stop('immediate');
	foreach my $run (@runs)
	{
		$run->kill_kill;
		eval { $run->finish };
	}
	$node->start;

	my $log = log_since($node, $off);
	cmp_ok($bulk, '>=', 4, "round $round: bulk writers ran before the crash ($bulk statements)");
	like($log, qr/database system was interrupted/, "round $round: the server went through crash recovery");
	unlike($log, not_trusted_re(), "round $round: the map is trusted after the crash")
	  or diag(join("\n", grep { /ptrack/ } split /\n/, $log));
	is(init_lsn($node), $init, "round $round: ptrack_init_lsn() is unchanged");

	# What the crash interrupted must show in the files, or the round
	# proves little: blocks changed since L, bulk writes among them.
	$node->safe_psql('postgres', 'CHECKPOINT');
	my %stats;
	my @misses = missed_blocks($node, $L, baseline => $baseline, stats => \%stats);
	my $live = live_relation_files();
	my @orphan = grep { !$live->{ miss_relation($_) } } @misses;
	my @real = grep { $live->{ miss_relation($_) } } @misses;
	note "round $round: left out " . scalar(@orphan) . " unlisted blocks of files of no relation: "
	  . join(', ', map { miss_relation($_) } @orphan[ 0 .. ($#orphan < 4 ? $#orphan : 4) ])
	  if @orphan;
	my @added = grep { / extended after L / } @real;
	my @changed = grep { !/ extended after L / } @real;
	is(scalar @changed, 0, "round $round: every block of a relation changed since $L is listed")
	  or diag(show_misses(@changed));
	# Zero pages relation extension added after the last save have no WAL
	# until used: the sizes saved with the map find them (design.md 3.7).
	is(scalar @added, 0, "round $round: every block of a relation added since $L is listed")
	  or diag(show_misses(@added));
	cmp_ok($stats{at_or_after} // 0, '>', 200,
		"round $round: the oracle saw the workload ($stats{at_or_after} blocks changed since $L, "
		  . "$stats{extended} added)");
}

$node->stop;
done_testing();
