# Copyright (c) the ptrack authors
#
# 010_restart_crash.pl -- the map survives restarts and crashes (docs/design.md
# section 5): after a clean restart, after immediate stops in the middle of a
# pgbench run, and after a server that died while it wrote the map file, the
# stored map is trusted (same ptrack_init_lsn()) and still lists every block
# changed since an L taken before the restart or crash.
#
# The outcome is checked by the page-LSN oracle (t/lib/PtrackOracle.pm), which
# reads the data files themselves: every page on disk with page LSN >= L, and
# every block a file gained after L, must be listed by
# ptrack_get_pagemapset(L).  Autovacuum is off so that the oracle runs on a
# quiet server after a CHECKPOINT.
#
# A checkpointer's first flush writes the whole map (ptrack.map.tmp renamed
# over ptrack.map); its later flushes append batches to ptrack.map.delta.
# The restarts below load both.
#
#   1. clean restart: init_lsn unchanged, the delta batches applied, the
#      blocks listed before the restart are still listed after it, the
#      oracle passes;
#   2. three immediate stops in a row during pgbench (with a checkpoint in the
#      middle of each run): init_lsn unchanged, the oracle passes from an L
#      taken before the first crash;
#   3. flushes that never completed:
#      a. a garbage ptrack.map.tmp next to a valid map (server stopped): the
#         leftover is removed and logged;
#      b. a torn batch (garbage) after the last whole batch of
#         ptrack.map.delta (server stopped): the whole batches are applied,
#         the torn one ignored;
#      c. the process that saves the map (the checkpointer with hooks, the
#         WAL follower with wal capture) killed with SIGKILL while
#         ptrack.map.tmp exists
#         (restart_after_crash = on: the postmaster reinitialises shared
#         memory and loads the map again): the leftover is removed and
#         logged;
#      each time: no rejection, init_lsn unchanged, the oracle passes;
#   4. CREATE DATABASE ... STRATEGY FILE_COPY (x4, from a template of ~2000
#      files) while CHECKPOINTs run back to back and another session writes
#      WAL: every block of the new databases is listed before a clean
#      restart, and must still be listed after it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster
  qw(capture_mode ptrack_node ptrack_file ptrack_path map_header delta_batches log_position log_since not_trusted_re init_lsn);
use PtrackOracle qw(block_counts lsn_to_int missed_blocks pagemapset show_misses);
use PtrackUnits qw(BLCKSZ);

my $node = ptrack_node(
	'restart_crash',
	conf => q{
autovacuum = off
max_wal_size = 256MB
checkpoint_timeout = 1h
});
$node->start;
my $pgdata = $node->data_dir;
# ptrack's files as the server names them (the data directory, or pg_wal/ptrack with wal capture), for the log.
my ($map_re, $delta_re, $tmp_re) = map { quotemeta(ptrack_path($_)) } qw(ptrack.map ptrack.map.delta ptrack.map.tmp);

$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->command_ok([ 'pgbench', '-i', '-q', '-s', '3', 'postgres' ], 'pgbench -i -s 3');
$node->safe_psql('postgres', 'CHECKPOINT');

my $init0 = init_lsn($node);
ok(lsn_to_int($init0) > 0, "ptrack_init_lsn() is set: $init0");
my $header0 = map_header($pgdata);
ok($header0 && $header0->{crc_ok} && $header0->{magic} eq 'PTRACKMP',
	'a checkpoint wrote a valid ptrack.map')
  or diag explain($header0 // 'no ptrack.map');
is($header0->{init_lsn}, $init0, 'the map file carries ptrack_init_lsn()');

# True if block $block of $path is all zeroes on disk.
sub zero_page
{
	my ($path, $block) = @_;
	open(my $fh, '<:raw', "$pgdata/$path") or return 0;
	seek($fh, $block * BLCKSZ, 0) or return 0;
	my $page;
	my $got = read($fh, $page, BLCKSZ);
	close $fh;
	return defined $got && $got == BLCKSZ && $page !~ /[^\0]/;
}

# The oracle, on a quiet server after a CHECKPOINT.  $min is the least number
# of blocks with page LSN >= L the oracle must have seen, so that a pass means
# something.
#
# After a crash, one kind of miss is tolerated and counted: a block extended
# after L that is still all zeroes.  Such a block was extended (heap files
# are extended ahead of use under contention, RelationAddExtraBlocks) but
# never written with content, so no WAL record describes it and recovery
# cannot re-mark it when the crash lost its mark; a backup tool that leaves
# it out restores the file to its length with zeroes, the same content.
sub oracle_passes
{
	my ($lsn, $baseline, $label, $min, %opts) = @_;
	$node->safe_psql('postgres', 'CHECKPOINT');
	my %stats;
	my @all = missed_blocks(
		$node, $lsn,
		forks => [ 'main', 'vm', 'init' ],
		baseline => $baseline,
		stats => \%stats);
	my @misses;
	my $zero_extended = 0;
	foreach my $miss (@all)
	{
		if ($opts{after_crash} && $miss =~ /^(\S+) block (\d+) extended after L/ && zero_page($1, $2))
		{
			$zero_extended++;
			next;
		}
		push @misses, $miss;
	}
	note "$label: $zero_extended all-zero blocks extended after L are not listed"
	  if $zero_extended;
	is(scalar @misses, 0,
		"$label: every block with page LSN >= $lsn or extended after it is listed")
	  or diag(show_misses(@misses));
	cmp_ok($stats{at_or_after}, '>=', $min,
		"$label: the oracle saw enough blocks with page LSN >= L ($stats{at_or_after})");
	return \%stats;
}

# The server's startup after $offset loaded the map, rejected nothing, and kept
# ptrack_init_lsn().
sub map_kept
{
	my ($offset, $label) = @_;
	my $log = log_since($node, $offset);
	like(
		$log,
		qr/LOG:  ptrack loaded map file "$map_re", ptrack_init_lsn\(\) is \Q$init0\E$/m,
		"$label: the map file was loaded");
	unlike($log, not_trusted_re(undef), "$label: no map was rejected");
	is(init_lsn($node), $init0, "$label: ptrack_init_lsn() is unchanged");
	return $log;
}

# ---------------------------------------------------------------------------
# 1. Clean restart
# ---------------------------------------------------------------------------

my $L1 = $node->lsn('insert');
my $baseline1 = block_counts($pgdata);

$node->safe_psql(
	'postgres', q{
UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid % 20 = 0;
CREATE TABLE before_restart AS SELECT g AS id, repeat('r', 200) AS pad FROM generate_series(1, 20000) g;
CREATE INDEX ON before_restart (id);
CHECKPOINT;
DELETE FROM pgbench_accounts WHERE aid % 200 = 1;
INSERT INTO before_restart SELECT g, 'after the checkpoint' FROM generate_series(20001, 30000) g;
});

# What the server lists just before the restart (the last changes reach the
# map only through the shutdown checkpoint).
my $before = pagemapset($node, 'postgres', $L1);
my $listed_before = 0;
$listed_before += scalar @{ $_->{blocks} } foreach values %$before;
cmp_ok($listed_before, '>', 100, "before the restart, $listed_before blocks are listed since L1");

my $offset = log_position($node);
$node->restart;
my $restart_log = map_kept($offset, 'clean restart');
like($restart_log, qr/LOG:  ptrack applied \d+ incremental flushes from "$delta_re"$/m,
	'clean restart: the incremental flushes were applied on top of ptrack.map');

my $after = pagemapset($node, 'postgres', $L1);
my @lost;
foreach my $path (sort keys %$before)
{
	my %now = map { $_ => 1 } @{ ($after->{$path} // { blocks => [] })->{blocks} };
	push @lost, map { "$path block $_" } grep { !$now{$_} } @{ $before->{$path}{blocks} };
}
is(scalar @lost, 0, 'clean restart: every block listed before the restart is still listed')
  or diag(show_misses(@lost));
oracle_passes($L1, $baseline1, 'clean restart, L1', 100);

# ---------------------------------------------------------------------------
# 2. Immediate stops during pgbench, three times in a row
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', 'CHECKPOINT');
my $L2 = $node->lsn('insert');
my $baseline2 = block_counts($pgdata);

for my $round (1 .. 3)
{
	my ($out, $err) = ('', '');
	my $pgbench = IPC::Run::start(
		[
			'pgbench', '-n', '-c', '4', '-j', '2', '-T', '60',
			'-h', $node->host, '-p', $node->port, 'postgres'
		],
		'>', \$out, '2>', \$err);
	# Let it run, with a checkpoint (hence a map flush) in the middle, so that
	# the crash loses both writes marked after the flush and dirty buffers.
	sleep 2;
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres',
		"INSERT INTO before_restart SELECT g, 'round $round' FROM generate_series(1, 5000) g");
	sleep 2;
	$node->stop('immediate');
	eval { $pgbench->finish; };
	$pgbench->kill_kill if $@;
	# pgbench says "server closed the connection", or, for a client whose
	# connection broke between two messages, "perhaps the backend died".
	like($err, qr/server closed the connection|terminat|connection to server|backend died/i,
		"crash $round: pgbench was running when the server stopped");

	$offset = log_position($node);
	$node->start;
	my $log = map_kept($offset, "crash $round");
	like($log, qr/database system was (?:interrupted|not properly shut down)/,
		"crash $round: the server went through crash recovery");
	# The load runs for a time, not a count: on a loaded machine the first
	# round changes fewer blocks (870 seen at a load of 16), later ones add up.
	oracle_passes($L2, $baseline2, "crash $round, L2", 300 * $round, after_crash => 1);
}
oracle_passes($L1, $baseline1, 'after three crashes, L1', 1000, after_crash => 1);

# True when `path` still holds the garbage planted below: its first 4096 bytes
# are a single byte repeated.
sub planted_tmp_left
{
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or return 0;
	my $got = read($fh, my $page, 4096);
	close $fh;
	return 0 unless defined $got && $got == 4096;
	my $first = substr($page, 0, 1);
	return $page eq ($first x 4096);
}

# ---------------------------------------------------------------------------
# 3a. A garbage ptrack.map.tmp next to a valid map, server stopped
# ---------------------------------------------------------------------------

$node->safe_psql('postgres',
	'UPDATE pgbench_branches SET bbalance = bbalance + 1; CHECKPOINT;');
my $L3 = $node->lsn('insert');
my $baseline3 = block_counts($pgdata);
$node->safe_psql('postgres',
	"UPDATE pgbench_accounts SET abalance = abalance - 1 WHERE aid % 30 = 0");
$node->stop;

my $map_size = -s ptrack_file($pgdata, 'ptrack.map');
open(my $tmp, '>:raw', ptrack_file($pgdata, 'ptrack.map.tmp')) or die "ptrack.map.tmp: $!";
# Half a map of garbage, like a flush cut short.
print $tmp pack('C', int(rand(256))) x 4096 foreach 1 .. (int($map_size / 2 / 4096) || 1);
close $tmp;

$offset = log_position($node);
$node->start;
my $log = map_kept($offset, 'leftover ptrack.map.tmp');
like(
	$log,
	qr/LOG:  ptrack removed leftover temporary file "$tmp_re"$/m,
	'leftover ptrack.map.tmp: its removal is logged');
# With wal capture the follower may already be writing its next save, under
# the same name: what must be gone is the planted file (its first page is one
# byte repeated; a map's starts with its magic).
ok(!planted_tmp_left(ptrack_file($pgdata, 'ptrack.map.tmp')),
	'leftover ptrack.map.tmp: the planted file is gone');
oracle_passes($L3, $baseline3, 'leftover ptrack.map.tmp, L3', 100);
oracle_passes($L2, $baseline2, 'leftover ptrack.map.tmp, L2', 1000, after_crash => 1);

# ---------------------------------------------------------------------------
# 3b. A torn batch at the end of ptrack.map.delta, server stopped: an
#     incremental flush that never completed (its checkpoint did not either)
# ---------------------------------------------------------------------------

# Each checkpoint's save written before the next (the WAL follower saves at
# most once a second: wait for its flush, not just for the checkpoint).
sub checkpoint_flushed
{
	my ($sql) = @_;
	my $from = log_position($node);
	$node->safe_psql('postgres', "$sql; CHECKPOINT;");
	$node->wait_for_log(qr/LOG:  ptrack map flush: /, $from);
}
checkpoint_flushed("UPDATE pgbench_tellers SET tbalance = tbalance + 1");
my $L5 = $node->lsn('insert');
my $baseline5 = block_counts($pgdata);
checkpoint_flushed("UPDATE pgbench_accounts SET abalance = abalance + 2 WHERE aid % 25 = 0");
$node->safe_psql('postgres',
	"UPDATE pgbench_accounts SET abalance = abalance + 3 WHERE aid % 35 = 0");
$node->stop;
my @batches = delta_batches($pgdata);
my $base_id = map_header($pgdata)->{base_id};
cmp_ok(scalar @batches, '>=', 2, 'torn delta: ptrack.map.delta holds ' . scalar(@batches) . ' batches');
is(scalar(grep { $_->{base_id} == $base_id } @batches), scalar @batches,
	'torn delta: every batch belongs to the current ptrack.map');
is(-s ptrack_file($pgdata, 'ptrack.map.delta'), $batches[-1]{offset} + $batches[-1]{bytes},
	'torn delta: the batches fill the file');
open(my $delta, '>>:raw', ptrack_file($pgdata, 'ptrack.map.delta')) or die "ptrack.map.delta: $!";
print $delta join('', map { chr(int(rand(256))) } 1 .. 1000);
close $delta;

$offset = log_position($node);
$node->start;
$log = map_kept($offset, 'torn delta batch');
my $applied = scalar @batches;
like($log, qr/LOG:  ptrack applied \Q$applied\E incremental flushes from "$delta_re"$/m,
	"torn delta batch: the $applied whole batches were applied");
oracle_passes($L5, $baseline5, 'torn delta batch, L5', 100);
oracle_passes($L2, $baseline2, 'torn delta batch, L2', 1000, after_crash => 1);

# ---------------------------------------------------------------------------
# 3c. The process that saves the map killed while it writes ptrack.map.tmp
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', "ALTER SYSTEM SET restart_after_crash = on; SELECT pg_reload_conf();");
$node->poll_query_until('postgres', 'SELECT current_setting(\'restart_after_crash\')::bool')
  or die 'restart_after_crash did not change';

# Hooks: the checkpointer saves the map; wal capture: the WAL follower does.
my $saver = capture_mode() eq 'wal' ? 'ptrack WAL follower' : 'checkpointer';
my $saver_died =
  capture_mode() eq 'wal'
  ? qr/background worker "ptrack WAL follower" \(PID \d+\) was terminated by signal 9/
  : qr/checkpointer process \(PID \d+\) was terminated by signal 9/;
my $L4 = $node->lsn('insert');
my $baseline4 = block_counts($pgdata);
my $caught = 0;
for my $attempt (1 .. 10)
{
	# The first flush of a checkpointer writes the whole map through
	# ptrack.map.tmp (later ones append to ptrack.map.delta): restart, so that
	# the CHECKPOINT below is that first flush.
	# With WAL capture, a restarted follower process (not server: after a
	# restart it saves at once, on reading the shutdown checkpoint) makes
	# that first, whole save at the next checkpoint record.
	if ($saver eq 'checkpointer')
	{
		$node->restart;
	}
	else
	{
		my $old = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE backend_type = '$saver'");
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
		$node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = '$saver' AND pid <> $old")
		  or die "the $saver did not restart";
	}
	$node->safe_psql('postgres',
		"UPDATE pgbench_accounts SET abalance = abalance + $attempt WHERE aid % 7 = $attempt % 7");
	my $checkpointer = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = '$saver'");
	$offset = log_position($node);
	# No pipes: pumpable() then only tells whether psql still runs.
	my $psql = IPC::Run::start(
		[ 'psql', '-X', '-h', $node->host, '-p', $node->port, '-d', 'postgres', '-c', 'CHECKPOINT' ],
		'>', '/dev/null', '2>', '/dev/null');

	# With WAL capture the map the follower saves is a few KB (it keeps only
	# its resume point, docs/design.md section 4.6): the write takes
	# microseconds, too short to catch.  A ptrack.map.tmp planted now stands
	# for the one it was writing, and the kill comes at once.
	if ($saver ne 'checkpointer')
	{
		open(my $fh, '>:raw', ptrack_file($pgdata, 'ptrack.map.tmp')) or die "ptrack.map.tmp: $!";
		print $fh pack('C', 0x5a) x 4096;
		close $fh;
	}
	# Spin until the flush creates ptrack.map.tmp, then kill at once.
	my $seen = 0;
	my $deadline = time() + 20;
	while (time() < $deadline)
	{
		if (-e ptrack_file($pgdata, 'ptrack.map.tmp'))
		{
			kill 'KILL', $checkpointer;
			$seen = 1;
			last;
		}
		# The checkpointer saves before CHECKPOINT returns; the follower after it.
		last unless $psql->pumpable || $saver ne 'checkpointer';
	}
	my $left = -e ptrack_file($pgdata, 'ptrack.map.tmp') ? 1 : 0;
	eval { $psql->finish; };
	if (!$seen)
	{
		note "attempt $attempt: the checkpoint ended before ptrack.map.tmp was seen";
		next;
	}
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	# Polling with psql while recovery refuses connections can die on a broken
	# pipe under load: wait for the server to say it is ready first.
	$node->wait_for_log(qr/database system is ready to accept connections/, $offset);
	$node->poll_query_until('postgres', 'SELECT 1', '1')
	  or die 'the server did not come back after the checkpointer was killed';
	my $crash_log = log_since($node, $offset);
	note "attempt $attempt: ptrack.map.tmp "
	  . ($left ? 'was still there' : 'was already renamed') . ' right after the kill';
	if ($crash_log =~ /ptrack removed leftover temporary file "$tmp_re"/)
	{
		$caught = 1;
		last;
	}
}
ok($caught, "$saver killed during the map write: the leftover ptrack.map.tmp was removed")
  or diag("server log of the last attempt:\n" . log_since($node, $offset));
$log = log_since($node, $offset);
like($log, $saver_died,
	"$saver killed: the postmaster saw it die");
like(
	$log,
	qr/LOG:  ptrack loaded map file "$map_re", ptrack_init_lsn\(\) is \Q$init0\E$/m,
	"$saver killed: the map file was loaded again");
unlike($log, not_trusted_re(undef), "$saver killed: no map was rejected");
is(init_lsn($node), $init0, "$saver killed: ptrack_init_lsn() is unchanged");
# The restarted saver may be writing a new ptrack.map.tmp right now (with wal
# capture the new follower saves soon after the restart): a live save renames
# it within milliseconds, a leftover stays.
my $tmp_deadline = time() + 10;
usleep(50_000) while -e ptrack_file($pgdata, 'ptrack.map.tmp') && time() < $tmp_deadline;
ok(!-e ptrack_file($pgdata, 'ptrack.map.tmp'), "$saver killed: no ptrack.map.tmp is left");
is($node->safe_psql('postgres', 'SELECT pg_backend_pid() <> 0'), 't',
	"$saver killed: the server is up");
oracle_passes($L4, $baseline4, "$saver killed, L4", 100, after_crash => 1);
oracle_passes($L2, $baseline2, "$saver killed, L2", 1000, after_crash => 1);

# ---------------------------------------------------------------------------
# 4. CREATE DATABASE ... STRATEGY FILE_COPY while checkpoints run, then a
#    clean restart
# ---------------------------------------------------------------------------
#
# The copied files are marked by the copydir hook, which reads the mark LSN
# once and then walks the new database directory.  Checkpoints (map flushes)
# run meanwhile, and WAL keeps being written, as on any busy server.  Every
# block of the new databases was created after L, so all must be listed, and
# must stay listed across a restart.

$node->safe_psql('postgres', "ALTER SYSTEM RESET restart_after_crash; SELECT pg_reload_conf();");
$node->safe_psql('postgres', 'CREATE DATABASE many_files');
$node->safe_psql('many_files',
	join('', map { "CREATE TABLE t$_ (id int PRIMARY KEY, v text);\n" } 1 .. 500)
	  . "INSERT INTO t1 SELECT g, 'x' FROM generate_series(1, 20000) g;");
$node->safe_psql('postgres', 'CREATE TABLE wal_filler (v text); CHECKPOINT;');
my $L6 = $node->lsn('insert');
my $baseline6 = block_counts($pgdata);

my $checkpoint_sql = "CHECKPOINT;\n" x 5000;
my $filler_sql =
  "INSERT INTO wal_filler SELECT repeat('f', 500) FROM generate_series(1, 2000); TRUNCATE wal_filler;\n"
  x 5000;
my @conn = ('psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', 'postgres');
my $checkpoints = IPC::Run::start([@conn], '<', \$checkpoint_sql, '>', '/dev/null', '2>', '/dev/null');
my $filler = IPC::Run::start([@conn], '<', \$filler_sql, '>', '/dev/null', '2>', '/dev/null');
for my $i (1 .. 4)
{
	$node->safe_psql('postgres', "CREATE DATABASE copy_$i TEMPLATE many_files STRATEGY FILE_COPY");
	$checkpoints->pump_nb;
	$filler->pump_nb;
}
$checkpoints->kill_kill;
$filler->kill_kill;

my $stats6 = oracle_passes($L6, $baseline6, 'FILE_COPY during checkpoints, before the restart', 0);
cmp_ok($stats6->{extended}, '>', 4 * 2000,
	"FILE_COPY during checkpoints: the new databases' blocks were checked ($stats6->{extended})");
my $before6 = pagemapset($node, 'postgres', $L6);
$offset = log_position($node);
$node->restart;
map_kept($offset, 'FILE_COPY during checkpoints, clean restart');
my $after6 = pagemapset($node, 'postgres', $L6);
my @lost6;
foreach my $path (sort keys %$before6)
{
	my %now = map { $_ => 1 } @{ ($after6->{$path} // { blocks => [] })->{blocks} };
	push @lost6, map { "$path block $_" } grep { !$now{$_} } @{ $before6->{$path}{blocks} };
}
is(scalar @lost6, 0,
	'FILE_COPY during checkpoints, clean restart: every block listed before the restart is still listed')
  or diag(show_misses(@lost6));
oracle_passes($L6, $baseline6, 'FILE_COPY during checkpoints, after a clean restart', 0);

my $header = map_header($pgdata);
ok($header && $header->{crc_ok} && $header->{init_lsn} eq $init0,
	"at the end, ptrack.map is valid and carries the same init_lsn ($init0)")
  or diag explain($header // 'no ptrack.map');

$node->stop;
done_testing();
