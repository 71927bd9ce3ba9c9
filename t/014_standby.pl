# Copyright (c) the ptrack authors
#
# 014_standby.pl -- ptrack on a hot standby: incremental backups taken from
# a streaming standby, whose map is filled only by WAL replay (the startup
# process's writes and extensions, CREATE DATABASE's copydir, and the
# checkpointer's writes at restartpoints, all marked with the replay LSN,
# see current_mark_lsn() in src/pg/core/shared_state.h), and a standby crash.
#
#   1. primary with ptrack, pgbench -i -s 3, a template database and a table
#      to shrink; a streaming standby from a backup of it, also with ptrack;
#      every SQL function works on the standby;
#   2. full backup FROM THE STANDBY (pg_basebackup against it), L0 = the
#      START WAL LOCATION of its backup_label (the redo LSN of the standby's
#      restartpoint);
#   3. on the primary: pgbench, CREATE DATABASE db2 TEMPLATE tmpl STRATEGY
#      FILE_COPY (tmpl filled before L0, so db2's files reach the standby
#      only through the replayed copydir), changes in db2, a table whose
#      tail is deleted, truncated by VACUUM and extended again; the standby
#      replays it all and makes a restartpoint;
#   4. the page-LSN oracle (t/lib/PtrackOracle.pm) on the standby's own
#      files: every page on its disk with an LSN >= L0 is listed;
#   5. incremental 1 from the standby since L0; full + incr1 restored into a
#      new node equals the PRIMARY (rows, amcheck);
#   6. more changes on the primary (pgbench, an UPDATE touching every page of
#      pgbench_accounts, another truncate + re-extension), replayed by the
#      standby, which writes many of those pages out, and then crashes
#      (stop immediate) with no restartpoint since incremental 1: its map on
#      disk is the one flushed at incr1's restartpoint, and the marks of
#      everything it wrote since were only in shared memory;
#   7. after the restart: the map is trusted (full_page_writes was on in the
#      WAL the standby replays), ptrack_init_lsn() is unchanged, and the
#      oracle finds every page written since incr1's start listed again
#      (replay restored them from full-page images and wrote them again);
#   8. incremental 2 since incr1's start; full + incr1 + incr2 restored
#      equals the primary;
#   9. the primary turns full_page_writes off after the standby's last
#      restartpoint, the standby crashes: the map stays trusted and nothing
#      is missed (the WAL after the saved map is read again at startup).
#
# What a missed replay mark would do: the block would come back from the
# older backup with its old contents (WAL replay of the restored node only
# covers changes after the last incremental's start), a digest mismatch or
# an amcheck error in compare_clusters, and a miss in the oracle.  Checked
# once by hand with PtrackBackup's filter_pagemap clearing the bits of
# pgbench_accounts in incr2: compare_clusters reported the mismatch.
#
# How PtrackBackup copes with a standby (pg_backup_start makes a
# restartpoint; pg_backup_stop writes no WAL and its stop LSN is the
# standby's minRecoveryPoint; pg_walfile_name() is refused during recovery;
# pg_control goes last) is described in its header comment.  The WAL of an
# incremental is copied from the standby's own pg_wal, held by a temporary
# slot on the standby: the backup then needs nothing from the primary.
# A restored standby backup carries standby.signal (pg_basebackup copies
# it): the test deletes it, restoring the standby's backup as a new primary.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes ();

use PtrackBackup qw(full_backup incremental_backup restore start_restored);
use PtrackVerify qw(compare_clusters);
use PtrackCluster
  qw(capture_mode ptrack_node ptrack_path log_position log_since not_trusted_re map_not_inherited_ok init_lsn);
use PtrackOracle qw(listed_ok mismatch_blocks missed_blocks no_misses_ok lsn_to_int);

my $t0 = Time::HiRes::time();

# Autovacuum off: the oracle (step 4, 7) reads the standby's files and then
# asks ptrack, which is exact only without concurrent writes.
my $primary = ptrack_node(
	'primary',
	allows_streaming => 1,
	conf => "max_wal_size = 512MB\ncheckpoint_timeout = 1h\nautovacuum = off\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION ptrack');

# ---- 1. data before L0, the standby -----------------------------------------

$primary->command_ok([ 'pgbench', '-i', '-s', '3', '-q', 'postgres' ],
	'pgbench -i -s 3');
$primary->safe_psql('postgres', 'CREATE DATABASE tmpl');
$primary->safe_psql(
	'tmpl', q{
CREATE TABLE tmpl_t (id int PRIMARY KEY, v int, t text);
INSERT INTO tmpl_t SELECT i, i, md5(i::text) FROM generate_series(1, 30000) i;
});
$primary->safe_psql(
	'postgres', q{
CREATE TABLE shrink (id int PRIMARY KEY, t text) WITH (autovacuum_enabled = off);
INSERT INTO shrink SELECT i, md5(i::text) FROM generate_series(1, 50000) i;
});

$primary->backup('for_standby');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'for_standby', has_streaming => 1);
# Restartpoints only when asked for (CHECKPOINT, pg_backup_start): step 6
# needs a crash with no restartpoint since incremental 1.
$standby->append_conf('postgresql.conf',
	"checkpoint_timeout = 1h\nmax_wal_size = 2GB\n");
my $sb_offset = log_position($standby);
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SELECT pg_is_in_recovery()'),
	't', 'the standby is in recovery');
map_not_inherited_ok($standby, $sb_offset, 'the standby started a fresh map: the primary\'s came with the backup');

# Every SQL function works on the standby.
is( $standby->safe_psql('postgres', 'SELECT ptrack_version()'),
	$primary->safe_psql('postgres', 'SELECT ptrack_version()'),
	'ptrack_version() on the standby');
my $sb_init = init_lsn($standby);
isnt($sb_init, '0/0', "ptrack_init_lsn() on the standby is not 0/0 ($sb_init)");
my ($ok, $out, $err) = $standby->psql('postgres',
	"SELECT count(*) FROM public.ptrack_get_pagemapset('$sb_init'::pg_lsn)");
is($ok, 0, 'ptrack_get_pagemapset() on the standby') or diag $err;
($ok, $out, $err) = $standby->psql('postgres',
	"SELECT files >= 0 FROM public.ptrack_get_change_stat('$sb_init'::pg_lsn)");
is("$ok $out", '0 t', 'ptrack_get_change_stat() on the standby') or diag $err;

# A checkpoint record after the standby's init_lsn, so that the full
# backup's restartpoint (hence L0) comes after it.
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);

# ---- 2. full backup from the standby ----------------------------------------

my $backups = PostgreSQL::Test::Utils::tempdir('backups');
my $l0 = full_backup($standby, "$backups/full");
note "full backup from the standby at $l0";
like(slurp_file("$backups/full/data/backup_label"),
	qr/^BACKUP FROM: standby$/m, 'the full backup was taken from the standby');
my $sb_init_now = init_lsn($standby);
ok(lsn_to_int($sb_init_now) <= lsn_to_int($l0),
	"the standby's ptrack_init_lsn() ($sb_init_now) is not after L0 ($l0)");

# ---- 3. the workload on the primary -----------------------------------------

$primary->command_ok(
	[ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '10', 'postgres' ],
	'pgbench on the primary after L0');

$primary->safe_psql('postgres',
	'CREATE DATABASE db2 TEMPLATE tmpl STRATEGY FILE_COPY');
$primary->safe_psql(
	'db2', q{
UPDATE tmpl_t SET v = v + 1 WHERE id % 7 = 0;
INSERT INTO tmpl_t SELECT i, i, md5(i::text) FROM generate_series(30001, 32000) i;
});

# Shrinks shrink's file by deleting its tail and vacuuming, then extends it
# again; returns the sizes before and after the truncation.
sub shrink_and_regrow
{
	my ($from, $to, $tag) = @_;
	my $before =
	  $primary->safe_psql('postgres', "SELECT pg_relation_size('shrink')");
	$primary->safe_psql('postgres', "DELETE FROM shrink WHERE id > $from");
	$primary->safe_psql('postgres', 'VACUUM shrink');
	my $after =
	  $primary->safe_psql('postgres', "SELECT pg_relation_size('shrink')");
	$primary->safe_psql('postgres',
		"INSERT INTO shrink SELECT i, md5(i::text) || '$tag' "
		  . "FROM generate_series($from + 1, $to) i");
	return ($before, $after);
}
my ($shrink_before, $shrink_after) = shrink_and_regrow(10000, 40000, 'one');
cmp_ok($shrink_after, '<', $shrink_before / 2,
	"VACUUM truncated shrink ($shrink_before -> $shrink_after bytes)");

my $db2_oid = $primary->safe_psql('postgres',
	"SELECT oid FROM pg_database WHERE datname = 'db2'");
my %path = map {
	$_ => $primary->safe_psql('postgres', "SELECT pg_relation_filepath('$_')")
} qw(shrink pgbench_accounts);

# Replayed, written out by a restartpoint.
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);
$standby->safe_psql('postgres', 'CHECKPOINT');
my $rp1 = $standby->safe_psql('postgres',
	'SELECT redo_lsn FROM pg_control_checkpoint()');
ok(lsn_to_int($rp1) > lsn_to_int($l0),
	"the standby made a restartpoint ($rp1) after L0 ($l0)");

# ---- 4. the oracle on the standby -------------------------------------------

my $os = no_misses_ok($standby, $l0,
	'every page on the standby\'s disk with an LSN >= L0 is listed',
	forks => [ 'main', 'vm' ]);
cmp_ok($os->{at_or_after}, '>', 100,
	"the oracle saw pages replayed after L0 ($os->{at_or_after})");

# ---- 5. incremental 1 from the standby, restore, compare --------------------

sub check_incremental
{
	my ($st, $name) = @_;
	note sprintf(
		"$name %s..%s: %d files, %d delta files, %d changed pages, "
		  . "%d whole files (%d bytes), %d bytes copied of %d, "
		  . "%d WAL segments, %d copied pages with an LSN older than since",
		$st->{start_lsn}, $st->{stop_lsn}, $st->{files}, $st->{delta_files},
		$st->{changed_pages}, $st->{whole_files}, $st->{whole_bytes},
		$st->{bytes_copied}, $st->{db_bytes}, $st->{wal_segments},
		$st->{old_lsn_pages});
	is($st->{pagecount_mismatch}, 0, "$name: every pagecount matches its pagemap")
	  or diag join "\n", @{ $st->{pagecount_examples} };
	is($st->{unknown_pagemap_paths}, 0,
		"$name: every pagemapset row names a permanent relation file")
	  or diag join "\n", @{ $st->{unknown_examples} };
	is($st->{unmarked_new_blocks}, 0,
		"$name: every block added since the previous backup is listed")
	  or diag "unlisted: @{ $st->{unmarked_examples} }";
	cmp_ok($st->{unchanged_files}, '>', 0,
		"$name: some relation files were left to the previous backup");
	cmp_ok($st->{wal_segments}, '>', 0, "$name: carries WAL");
	return;
}

# Restores the full backup and $incr (one incremental, or an array ref of a
# chain) into a new node, starts it as a new primary (without the standby's
# standby.signal) and compares it with the primary.
sub restore_and_compare
{
	my ($name, $incr) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	restore("$backups/full", $incr, $node->data_dir,
		tablespace_dir => $node->basedir . '/tblspc');
	unlink($node->data_dir . '/standby.signal')
	  or die "no standby.signal in the restored standby backup: $!";
	start_restored($node);
	my %report;
	my @problems = compare_clusters($primary, $node, report => \%report);
	is_deeply(\@problems, [],
		"$name equals the primary, amcheck clean")
	  or diag join "\n", @problems,
	  map {
		mismatch_blocks($primary, $node, $_->[0], $_->[1],
			tracked => $standby, since => $l0)
	  } grep { $_->[3] eq 'MISMATCH' } @{ $report{tables} };
	note join "\n", map { "@$_" } @{ $report{tables} };
	cmp_ok(scalar @{ $report{tables} }, '>=', 6, "$name: tables were compared");
	$node->stop;
	return;
}

my $st1 = incremental_backup($standby, "$backups/incr1", $l0, "$backups/full");
my $l1 = $st1->{start_lsn};
check_incremental($st1, 'incr1');
is($l1, $rp1, 'incr1 starts at the standby\'s restartpoint');
my $sb_pgdata = $standby->data_dir;
listed_ok($st1->{pagemap}, qr{^base/$db2_oid/},
	'incr1: pagemapset lists files of db2 (replayed FILE_COPY)', pgdata => $sb_pgdata);
listed_ok($st1->{pagemap}, qr{^\Q$path{shrink}\E$},
	"incr1: pagemapset lists the truncated and re-extended $path{shrink}",
	pgdata => $sb_pgdata);
listed_ok($st1->{pagemap}, qr{^\Q$path{pgbench_accounts}\E$},
	'incr1: pagemapset lists pgbench_accounts', pgdata => $sb_pgdata);
restore_and_compare('restored1', "$backups/incr1");

# ---- 6. more changes, replayed, then a standby crash ------------------------

$primary->command_ok(
	[ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '5', 'postgres' ],
	'pgbench on the primary after incr1');
$primary->safe_psql('postgres',
	'UPDATE pgbench_accounts SET filler = md5(aid::text) WHERE aid % 20 = 0');
$primary->safe_psql('db2', 'DELETE FROM tmpl_t WHERE id % 11 = 0');
my ($shrink_before2, $shrink_after2) = shrink_and_regrow(5000, 45000, 'two');
cmp_ok($shrink_after2, '<', $shrink_before2 / 2,
	"VACUUM truncated shrink again ($shrink_before2 -> $shrink_after2 bytes)");
$primary->wait_for_catchup($standby);

is($standby->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'),
	$l1, 'no restartpoint on the standby since incr1');
# Pages the standby wrote after its last restartpoint: their marks are in
# shared memory only.  (Reading the files, then asking ptrack: also checks
# that they are listed now.)
$os = no_misses_ok($standby, $l1, 'before the crash: the standby\'s new pages are listed');
my $written_before_crash = $os->{at_or_after};
cmp_ok($written_before_crash, '>', 100,
	"the standby wrote $written_before_crash pages changed after its last restartpoint");
my $init_before = init_lsn($standby);

$sb_offset = log_position($standby);
$standby->stop('immediate');
$standby->start;
$primary->wait_for_catchup($standby);

# ---- 7. after the crash -----------------------------------------------------

my $log = log_since($standby, $sb_offset);
unlike($log, not_trusted_re(), 'the standby kept its map after the crash');
like($log,
	qr/LOG:  ptrack loaded map file "\Q${\ ptrack_path('ptrack.map')}\E", ptrack_init_lsn\(\) is \Q$init_before\E$/m,
	'the map flushed at the last restartpoint was loaded');
is(init_lsn($standby), $init_before,
	"ptrack_init_lsn() is unchanged by the crash ($init_before)");

# Replay wrote the pages again (from their full-page images) into buffers;
# a restartpoint writes them, marking them.
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);
$standby->safe_psql('postgres', 'CHECKPOINT');
$os = no_misses_ok($standby, $l1,
	'after the crash: every page with an LSN >= incr1\'s start is listed',
	forks => [ 'main', 'vm' ]);
cmp_ok($os->{at_or_after}, '>=', $written_before_crash,
	"the oracle saw the pages written before the crash ($os->{at_or_after})");

# ---- 8. incremental 2 since incr1, restore the chain, compare ---------------

my $st2 =
  incremental_backup($standby, "$backups/incr2", $l1, "$backups/incr1");
check_incremental($st2, 'incr2');
ok(lsn_to_int($st2->{start_lsn}) > lsn_to_int($l1),
	"incr2 starts ($st2->{start_lsn}) after incr1 ($l1)");
listed_ok($st2->{pagemap}, qr{^\Q$path{shrink}\E$},
	"incr2: pagemapset lists the truncated and re-extended $path{shrink}",
	pgdata => $sb_pgdata);
listed_ok($st2->{pagemap}, qr{^\Q$path{pgbench_accounts}\E$},
	'incr2: pagemapset lists pgbench_accounts', pgdata => $sb_pgdata);
restore_and_compare('restored2', [ "$backups/incr1", "$backups/incr2" ]);

# ---- 9. full_page_writes off on the primary, standby crash -----------------
#
# Replay skips a page whose on-disk LSN is past the record when the record
# has no full-page image, so it neither writes nor marks the pages the
# crashed run had already written.  The hooks source reads the standby's WAL
# after the saved map at startup (startup_scan.h), the wal source re-reads it
# with its follower: the map stays trusted, and nothing is missed.

$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);
$standby->safe_psql('postgres', 'CHECKPOINT');
my $r2 = $standby->safe_psql('postgres',
	'SELECT redo_lsn FROM pg_control_checkpoint()');
$primary->safe_psql('postgres', 'ALTER SYSTEM SET full_page_writes = off');
$primary->reload;
$primary->safe_psql('postgres',
	'UPDATE pgbench_accounts SET filler = md5(aid::text) WHERE aid % 20 = 1');
$primary->wait_for_catchup($standby);
$sb_offset = log_position($standby);
$standby->stop('immediate');
$standby->start;
$primary->wait_for_catchup($standby);
my $fpw_log = log_since($standby, $sb_offset);
unlike($fpw_log, not_trusted_re(), 'standby crash after WAL without full-page images: the map is trusted');
$primary->safe_psql('postgres', 'ALTER SYSTEM RESET full_page_writes');
$primary->reload;
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);
$standby->safe_psql('postgres', 'CHECKPOINT');
no_misses_ok($standby, $r2, "standby crash after WAL without full-page images: every page changed since $r2 is listed");

$standby->stop;
$primary->stop;
note sprintf('014_standby took %.0f s', Time::HiRes::time() - $t0);
done_testing();
