# Copyright (c) the ptrack authors
#
# 018_fresh_standby.pl -- a FULL backup taken on a standby right after it
# starts is a valid parent for incremental backups (docs/design.md
# sections 3.8 and 4.7).
#
# A standby made from a base backup refuses the map that came with the
# backup (backup_label; with wal capture the backup carries none) and starts
# a fresh one.  A backup tool takes as the
# start of a FULL backup made on a standby the redo LSN of the standby's
# latest restartpoint, which right after the start is the redo LSN where
# recovery began (the checkpoint of the base backup); an incremental backup
# since that FULL is accepted only when ptrack_init_lsn() is not after it
# (pg_probackup: "LSN from ptrack_control ... is greater than Start LSN of
# previous backup").  Replay of a base backup rewrites every page changed
# after that redo LSN from its full-page image (full_page_writes is on in
# all the WAL it replays), so tracking is provably complete from there, and
# ptrack_init_lsn() must be no later than it.
#
#   1. a primary under pgbench; a base backup of it taken meanwhile; a
#      standby started from it, pgbench still running;
#   2. at once, a FULL backup on the standby (pg_basebackup against it): its
#      start LSN L0 is not before ptrack_init_lsn();
#   3. more pgbench, a table created and a table rewritten, the standby
#      catches up; the page-LSN oracle on the standby's files since L0;
#   4. an incremental backup on the standby since L0, restored with the FULL
#      into a new node, equals the primary (rows, amcheck).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackBackup qw(full_backup incremental_backup restore start_restored);
use PtrackVerify qw(compare_clusters);
use PtrackCluster qw(ptrack_node log_position log_since map_not_inherited_ok init_lsn);
use PtrackOracle qw(lsn_to_int mismatch_blocks no_misses_ok);
use PtrackProbackup qw(pg_probackup);

my $primary = ptrack_node('primary', allows_streaming => 1,
	conf => "autovacuum = off\nmax_wal_size = 512MB\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$primary->command_ok([ 'pgbench', '-i', '-q', '-s', '3', 'postgres' ], 'pgbench -i -s 3');

# ---- 1. a standby from a base backup of a busy primary -------------------

my ($out, $err) = ('', '');
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-j', '1', '-R', '200', '-T', '15', $primary->connstr('postgres') ],
	'>', \$out, '2>', \$err);
sleep 2;
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
my $sb_off = log_position($standby);
$standby->start;
map_not_inherited_ok($standby, $sb_off, 'the standby refused the map that came with the base backup');
my $recovery_redo = $standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');

# ---- 2. a FULL backup on the standby, right away --------------------------

my $backups = PostgreSQL::Test::Utils::tempdir('backups');
my $l0 = full_backup($standby, "$backups/full");
my $sb_init = init_lsn($standby);
note "standby: recovery began at redo $recovery_redo; FULL backup starts at $l0; ptrack_init_lsn() $sb_init";
ok(lsn_to_int($sb_init) <= lsn_to_int($l0),
	"a FULL backup right after the standby started is a valid parent: ptrack_init_lsn() $sb_init <= its start $l0");

# ---- 3. more changes, replayed ----------------------------------------------

sleep 3;
$primary->safe_psql(
	'postgres', q{
CREATE TABLE after_full AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 20000) g;
CREATE TABLE rewritten AS SELECT g AS id FROM generate_series(1, 20000) g;
VACUUM FULL rewritten;
});
$pgbench->finish;
like($out, qr/number of transactions actually processed: [1-9]/, 'pgbench ran on the primary throughout')
  or diag "pgbench said:\n$out\n$err";
# A restartpoint writes what replay left in shared buffers (marking it with
# the hooks source).  Until then the standby's disk holds pages as the base
# backup copied them, some with LSNs after L0, which this server has not
# written: the oracle would count them, though a backup tool copies them as
# they are on disk and replay from its start fixes them.  The standby makes a
# restartpoint only at a checkpoint record it has replayed.
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);
$standby->safe_psql('postgres', 'CHECKPOINT');
my $os = no_misses_ok($standby, $l0, "the oracle on the standby: every page changed since $l0 is listed",
	forks => [ 'main', 'vm' ]);
cmp_ok($os->{at_or_after}, '>', 100, "the oracle saw pages replayed after L0 ($os->{at_or_after})");

# ---- 4. an incremental on the standby, restored, compared -------------------

my $st = incremental_backup($standby, "$backups/incr", $l0, "$backups/full");
note sprintf('incremental %s..%s: %d changed pages, %d whole files, %d bytes copied of %d',
	@$st{qw(start_lsn stop_lsn changed_pages whole_files bytes_copied db_bytes)});
is($st->{unmarked_new_blocks}, 0, 'incremental: every block added since the FULL is listed')
  or diag "unlisted: @{ $st->{unmarked_examples} }";
cmp_ok($st->{changed_pages}, '>', 0, 'incremental: carries changed pages');

my $restored = PostgreSQL::Test::Cluster->new('restored');
restore("$backups/full", "$backups/incr", $restored->data_dir,
	tablespace_dir => $restored->basedir . '/tblspc');
unlink($restored->data_dir . '/standby.signal')
  or die "no standby.signal in the restored standby backup: $!";
start_restored($restored);
my %report;
my @problems = compare_clusters($primary, $restored, report => \%report);
is_deeply(\@problems, [], 'FULL + incremental taken on the fresh standby equal the primary, amcheck clean')
  or diag join "\n", @problems,
  map { mismatch_blocks($primary, $restored, $_->[0], $_->[1], tracked => $standby, since => $l0) }
  grep { $_->[3] eq 'MISMATCH' } @{ $report{tables} };
cmp_ok(scalar @{ $report{tables} }, '>=', 6, 'tables were compared');

$restored->stop;
$standby->stop;

# ---- 5. the same with pg_probackup, when it is installed --------------------
#
# pg_probackup refuses a PTRACK backup whose parent started before
# ptrack_init_lsn() ("LSN from ptrack_control ... is greater than Start LSN
# of previous backup"): a second standby, fresh from a base backup of the
# busy primary, a FULL taken on it at once, a PTRACK after more changes,
# restored and compared with the primary.

SKIP:
{
	my $pgpro = pg_probackup('section 5 (FULL + PTRACK with pg_probackup on a fresh standby)');
	skip 'no pg_probackup', 4 unless $pgpro;

	my $catalog = PostgreSQL::Test::Utils::tempdir('pgpro');

	($out, $err) = ('', '');
	$pgbench = IPC::Run::start(
		[ 'pgbench', '-n', '-c', '2', '-j', '1', '-R', '200', '-T', '15', $primary->connstr('postgres') ],
		'>', \$out, '2>', \$err);
	sleep 2;
	$primary->backup('base2');
	my $standby2 = PostgreSQL::Test::Cluster->new('standby2');
	$standby2->init_from_backup($primary, 'base2', has_streaming => 1);
	$standby2->start;
	my @conn = ('-h', $standby2->host, '-p', $standby2->port, '-d', 'postgres');
	my ($prc, $pout) = $pgpro->run('init', '-B', $catalog);
	($prc, $pout) = $pgpro->run('add-instance', '-B', $catalog, '-D', $standby2->data_dir, '--instance', 'sb')
	  if $prc == 0;
	($prc, $pout) = $pgpro->run('backup', '-B', $catalog, '--instance', 'sb', '-b', 'FULL', '--stream', '--no-sync', @conn)
	  if $prc == 0;
	is($prc, 0, 'pg_probackup: a FULL backup on the standby right after it started') or diag $pout;

	$pgbench->finish;
	$primary->safe_psql('postgres', 'CREATE TABLE after_pgpro_full AS SELECT g AS id FROM generate_series(1, 20000) g');
	$primary->safe_psql('postgres', 'CHECKPOINT');
	$primary->wait_for_catchup($standby2);
	($prc, $pout) = $pgpro->run('backup', '-B', $catalog, '--instance', 'sb', '-b', 'PTRACK', '--stream', '--no-sync', @conn);
	is($prc, 0, 'pg_probackup: a PTRACK backup on the standby, the FULL as its parent') or diag $pout;

	my $pgpro_restored = PostgreSQL::Test::Cluster->new('pgpro_restored');
	($prc, $pout) = $pgpro->run('restore', '-B', $catalog, '--instance', 'sb', '-D', $pgpro_restored->data_dir,
		'--no-sync');
	is($prc, 0, 'pg_probackup: FULL + PTRACK restored') or diag $pout;
	unlink($pgpro_restored->data_dir . '/standby.signal');
	chmod 0700, $pgpro_restored->data_dir;    # pg_probackup keeps the test harness's 0755
	start_restored($pgpro_restored);
	@problems = compare_clusters($primary, $pgpro_restored);
	is_deeply(\@problems, [], 'pg_probackup: FULL + PTRACK taken on the fresh standby equal the primary, amcheck clean')
	  or diag join "\n", @problems;
	$pgpro_restored->stop;
	$standby2->stop;
}

$primary->stop;
done_testing();
