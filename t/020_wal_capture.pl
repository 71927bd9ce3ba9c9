# Copyright (c) the ptrack authors
#
# 020_wal_capture.pl -- WAL capture on a stock server (wal mode only): what
# the hooks mode has no counterpart for (docs/design.md section 4).
#
#   1. the library loads on a server without the core hooks (on 17 and 18,
#      whose suite runs wal mode on the patched build, the prefix's
#      bin/postgres-nohooks: ptrack_node(stock => 1)); SHOW
#      ptrack.capture says "wal"; the follower holds its replication slot;
#      ptrack.capture = hooks refuses to start there, with a hint;
#   2. freshness: right after a burst of writes, with no checkpoint and no
#      wait, ptrack_get_pagemapset() lists every written block (page-LSN
#      oracle), including the zero pages added by extension that never got
#      a WAL record (a hash index's bucket allocation);
#   3. a follower killed in the middle of a pgbench run is restarted and
#      resumes where its last save was complete: ptrack_init_lsn() does not
#      move and the oracle passes from an L taken before the kill;
#   4. WAL the follower needs is gone (pg_resetwal): tracking restarts with
#      the usual WARNING and a later ptrack_init_lsn(); older start LSNs
#      are refused;
#   5. a stalled follower does not keep WAL beyond max_slot_wal_keep_size:
#      its slot is invalidated, and tracking restarts with a WARNING;
#   6. failover: full backup from the primary, the standby (also tracking
#      from the WAL) promoted, an incremental from the promoted server since
#      the full backup's start, restored and compared with it.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackBackup qw(full_backup incremental_backup restore start_restored);
use PtrackVerify qw(compare_clusters);
use PtrackCluster qw(capture_mode new_node ptrack_node log_position log_since init_lsn follower_pid background_pgbench);
use PtrackOracle qw(block_counts lsn_to_int no_misses_ok);

plan skip_all => 'WAL capture runs on servers without the core hooks' unless capture_mode() eq 'wal';

my $slot = 'ptrack_wal_follower';

# ---------------------------------------------------------------------------
# 1. Loading, the capture source, the slot
# ---------------------------------------------------------------------------

my $node = ptrack_node('primary', allows_streaming => 1, stock => 1,
	conf => "autovacuum = off\nlog_checkpoints = on\nmax_wal_size = 64MB\nrestart_after_crash = on\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
is($node->safe_psql('postgres', 'SHOW ptrack.capture'), 'wal', 'SHOW ptrack.capture names the source that runs');
# Accepted now, it would stop the next start with the FATAL below: refused at once.
my ($rc, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET ptrack.capture = 'hooks'");
isnt($rc, 0, 'ALTER SYSTEM SET ptrack.capture = hooks is refused on a stock server');
like($err, qr/ERROR:  invalid value for parameter "ptrack\.capture": "hooks".*\n(?:.*\n)*?DETAIL:  This server has no ptrack core hooks/m,
	'the ERROR says the server has no hooks') or diag("psql said: $err");
unlike(slurp_file($node->data_dir . '/postgresql.auto.conf'), qr/ptrack\.capture/,
	'postgresql.auto.conf does not name ptrack.capture');
my $fpid = follower_pid($node);
is( $node->safe_psql('postgres',
		"SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot' AND slot_type = 'physical'"),
	$fpid,
	"the follower (PID $fpid) holds its physical slot $slot");
my $init0 = init_lsn($node);
ok(lsn_to_int($init0) > 0, "ptrack_init_lsn() is established: $init0");

$node->stop;
my $offset = log_position($node);
$node->append_conf('postgresql.conf', "ptrack.capture = hooks\n");
ok(!$node->start(fail_ok => 1), 'ptrack.capture = hooks: a stock server refuses to start');
like(log_since($node, $offset),
	qr/FATAL:  ptrack\.capture is "hooks" but this server has no ptrack core hooks.*\n(?:.*\n)*?.*HINT:  Set ptrack\.capture = auto or wal/m,
	'the FATAL says why and what to set');
# No background worker slot left for the follower: refuse to start rather
# than run without one (nothing tracked, and the slot keeping WAL).
$node->append_conf('postgresql.conf', "ptrack.capture = auto\nmax_worker_processes = 0\n");
$offset = log_position($node);
ok(!$node->start(fail_ok => 1), 'max_worker_processes = 0: the server refuses to start');
like(log_since($node, $offset),
	qr/FATAL:  ptrack could not register its WAL follower: max_worker_processes \(0\).*\n(?:.*\n)*?.*HINT:  Increase max_worker_processes/m,
	'the FATAL says the follower has no background worker slot, and what to set');
$node->append_conf('postgresql.conf', "max_worker_processes = 8\n");
$offset = log_position($node);
$node->start;
is(init_lsn($node), $init0, 'back on auto: the saved map is trusted (same ptrack_init_lsn())');
like(log_since($node, $offset), qr/LOG:  ptrack WAL follower resumes at/, 'the follower resumed from the saved map');

# ---------------------------------------------------------------------------
# 2. Freshness, extension without WAL
# ---------------------------------------------------------------------------

$node->command_ok([ 'pgbench', '-i', '-s', '3', '-q', 'postgres' ], 'pgbench -i -s 3');
$node->safe_psql('postgres', 'CHECKPOINT');
my $pgdata = $node->data_dir;
my $L1 = $node->lsn('insert');
my $baseline1 = block_counts($pgdata);
# A hash index allocates bucket pages in bulk: the pages between the one it
# WAL-logs and the old end of the file are zeros that no WAL record names.
$node->safe_psql(
	'postgres', q{
CREATE TABLE h (id int);
CREATE INDEX h_hash ON h USING hash (id);
INSERT INTO h SELECT g FROM generate_series(1, 200000) g;
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 40 = 0;
});
my $stats = no_misses_ok($node, $L1, 'right after a burst: every block written or added since L1 is listed',
	baseline => $baseline1, forks => [ 'main', 'vm', 'init' ]);
cmp_ok($stats->{at_or_after}, '>', 500, "the oracle saw the burst ($stats->{at_or_after} pages with LSN >= L1)");
cmp_ok($stats->{extended}, '>', 100, "the oracle saw extensions ($stats->{extended} blocks)");

# ---------------------------------------------------------------------------
# 3. The follower killed during pgbench
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', 'CHECKPOINT');
my $L3 = $node->lsn('insert');
my $baseline3 = block_counts($pgdata);
for my $round (1 .. 3)
{
	my $pgbench = background_pgbench($node, clients => 3, seconds => 6);
	sleep 1;
	$node->safe_psql('postgres', 'CHECKPOINT');
	sleep 1;
	my $pid = follower_pid($node);
	kill 'KILL', $pid;
	note "round $round: killed the follower (PID $pid)";
	$pgbench->finish;
	# SIGKILL of a process attached to shared memory makes the postmaster
	# reinitialize: the map is reloaded from its last save.
	$node->poll_query_until('postgres', 'SELECT true') or die 'server did not come back';
	my $new_pid = follower_pid($node);
	isnt($new_pid, $pid, "round $round: a new follower runs (PID $new_pid)");
	is(init_lsn($node), $init0, "round $round: ptrack_init_lsn() did not move");
	no_misses_ok($node, $L3, "round $round: every block changed since L3 is listed",
		baseline => $baseline3);
}

# ---------------------------------------------------------------------------
# 4. WAL gone: pg_resetwal
# ---------------------------------------------------------------------------

my $before_reset = $node->lsn('insert');
$node->stop;
command_ok([ 'pg_resetwal', '-f', $pgdata ], 'pg_resetwal');
$offset = log_position($node);
$node->start;
follower_pid($node);
$node->poll_query_until('postgres', "SELECT ptrack_init_lsn() > '$before_reset'")
  or diag 'ptrack_init_lsn() did not move past ' . $before_reset;
my $log = log_since($node, $offset);
my ($warned) = $log =~ /WARNING:  ptrack restarted change tracking at (\S+): the WAL follower could not read the WAL from/;
ok(defined $warned, 'missing WAL restarts tracking with a WARNING') or diag(log_since($node, $offset));
my $init4 = init_lsn($node);
is($warned, $init4, "the WARNING names the LSN ptrack_init_lsn() returns ($init4)");
cmp_ok(lsn_to_int($init4), '>', lsn_to_int($before_reset), "ptrack_init_lsn() moved past the reset: $init4");
my ($ret, $stdout, $stderr) = $node->psql('postgres', "SELECT * FROM public.ptrack_get_change_stat('$before_reset'::pg_lsn)");
like($stderr, qr/start_lsn \S+ is older than ptrack_init_lsn\(\)/, 'an LSN before the reset is refused');

# ---------------------------------------------------------------------------
# 5. A stalled follower, max_slot_wal_keep_size
# ---------------------------------------------------------------------------

$node->append_conf('postgresql.conf', "max_slot_wal_keep_size = 32MB\n");
$node->reload;
my $stalled = follower_pid($node);
kill 'STOP', $stalled;
$offset = log_position($node);
# 64 MB of WAL while the follower sleeps; the checkpoint invalidates the slot
# (it asks the follower to let go: the signal waits for SIGCONT).
$node->safe_psql('postgres',
	'CREATE TABLE filler AS SELECT g, repeat(md5(g::text), 20) AS t FROM generate_series(1, 100000) g');
my $checkpoint = $node->background_psql('postgres');
$checkpoint->query_until(qr/started/, "\\echo started\nCHECKPOINT;\n");
sleep 2;
kill 'CONT', $stalled;
$checkpoint->quit;
$node->poll_query_until('postgres', "SELECT wal_status = 'lost' OR restart_lsn > '$before_reset' FROM pg_replication_slots WHERE slot_name = '$slot'");
follower_pid($node);
$node->poll_query_until('postgres',
	"SELECT ptrack_init_lsn() > '$init4'") or diag 'ptrack_init_lsn() did not move';
$log = log_since($node, $offset);
# 15: 'invalidating slot "..." because its restart_lsn ... exceeds max_slot_wal_keep_size';
# 17, 18: 'invalidating obsolete replication slot "..."'.
like($log, qr/invalidating slot "$slot" because its restart_lsn .* exceeds max_slot_wal_keep_size|invalidating obsolete replication slot "$slot"/,
	'the checkpoint invalidated the stalled follower\'s slot');
($warned) = $log =~ /WARNING:  ptrack restarted change tracking at (\S+):/;
ok(defined $warned, 'tracking restarted with a WARNING');
is($warned, init_lsn($node), 'the WARNING names the LSN ptrack_init_lsn() returns');
my $wal_mb = $node->safe_psql('postgres', "SELECT sum(size) / 1048576 FROM pg_ls_waldir()");
cmp_ok($wal_mb, '<=', 32 + 64 + 48, "pg_wal stays bounded ($wal_mb MB)");

# ---------------------------------------------------------------------------
# 6. Failover
# ---------------------------------------------------------------------------

$node->append_conf('postgresql.conf', "max_slot_wal_keep_size = -1\n");
$node->reload;
# A slot of its own keeps the WAL the standby still needs: on a loaded machine
# it fell behind the primary's max_wal_size (64MB) and never caught up
# ("requested WAL segment ... has already been removed").
$node->safe_psql('postgres', "SELECT pg_create_physical_replication_slot('standby_slot', true)");
$node->backup('for_standby');
my $standby = new_node('standby', stock => 1);
$standby->init_from_backup($node, 'for_standby', has_streaming => 1);
$standby->append_conf('postgresql.conf', "primary_slot_name = 'standby_slot'\n");
$standby->start;
follower_pid($standby);
$node->wait_for_catchup($standby);
is($standby->safe_psql('postgres', 'SHOW ptrack.capture'), 'wal', 'the standby captures from the WAL too');

my $backups = PostgreSQL::Test::Utils::tempdir('backups');
my $l0 = full_backup($node, "$backups/full");
note "full backup of the primary at $l0";
$node->command_ok([ 'pgbench', '-n', '-c', '2', '-T', '5', 'postgres' ], 'pgbench on the primary');
$node->safe_psql(
	'postgres', q{
DELETE FROM h WHERE id > 50000;
VACUUM h;
INSERT INTO h SELECT g FROM generate_series(300001, 310000) g;
CREATE DATABASE db2 STRATEGY FILE_COPY;
});
$node->wait_for_catchup($standby);
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';
$standby->command_ok([ 'pgbench', '-n', '-c', '2', '-T', '5', 'postgres' ], 'pgbench on the promoted standby');
$standby->safe_psql('db2', 'CREATE TABLE after_promote AS SELECT g FROM generate_series(1, 10000) g');
$node->stop;

my $st = incremental_backup($standby, "$backups/incr", $l0, "$backups/full");
note "incremental from the promoted standby: $st->{changed_pages} changed pages in $st->{delta_files} files";
is($st->{unmarked_new_blocks}, 0, 'every block added after L0 is listed by the promoted standby')
  or diag "unlisted: @{ $st->{unmarked_examples} }";

my $restored = new_node('restored', stock => 1);
restore("$backups/full", "$backups/incr", $restored->data_dir, tablespace_dir => $restored->basedir . '/tblspc');
start_restored($restored);
my @problems = compare_clusters($standby, $restored);
is_deeply(\@problems, [], 'full (old primary) + incremental (promoted standby) equals the promoted standby');

$restored->stop;
$standby->stop;
done_testing();
