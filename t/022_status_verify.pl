# Copyright (c) the ptrack authors
#
# 022_status_verify.pl -- what a DBA runs to see that ptrack works
# (ptrack_status(), docs/design.md section 6.1) and to prove that it misses
# nothing (ptrack_verify(), section 6.2), and the messages of a failed save.
#
#   1. after pgbench and a CHECKPOINT the status is sane: the capture source
#      of this suite, the map holds marks (hooks; wal: a few KB, no fill),
#      saves > 0, the WAL follower's lag
#      is small (wal) or its columns are NULL (hooks);
#   2. a save that fails on every attempt (ptrack.map.tmp and
#      ptrack.map.delta are directories) logs one WARNING naming ptrack, the
#      consequence for the next backup and the fix, however often it is
#      retried (the WAL follower retried on every loop, ~20 a second); the
#      status counts the failures, and saves resume once the cause is gone;
#   3. ptrack_verify() on the healthy cluster returns no row, also throttled
#      (with a progress NOTICE) and while pgbench writes (the re-check of
#      candidates, verify.cpp);
#   4. a real miss: with the server stopped, block 1 of a table nothing
#      changed since L gets a page LSN >= L written by hand; after the start
#      ptrack_verify(L) returns exactly that (path, block);
#   4b. wal: with the answers from the change summaries, a summary that
#      misses a block: the summaries holding an UPDATE are replaced by files
#      every check passes (an older summary's body, the header rewritten to
#      their range); ptrack_verify(L) judges the summaries' own answer and
#      returns the updated block, its NOTICE says the answer came from the
#      summaries; with the files restored it returns nothing;
#   5. a misspelt ptrack.* setting gets ptrack's WARNING, and with
#      ptrack.map_size = 0 the status says why tracking is off.
#
# Runs with either capture source (PTRACK_CAPTURE, PtrackCluster::capture_mode).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node ptrack_file ptrack_path log_position log_since count_matches);
use PtrackOracle qw(lsn_to_int int_to_lsn);
use PtrackSummaries qw(summaries copy_summary_as);
use PtrackUnits qw(BLCKSZ);

my $mode = capture_mode();
note "capture mode: $mode";

my $node = ptrack_node('status_verify',
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\nmax_wal_size = 1GB\nlog_checkpoints = on\n");
$node->start;
my $pgdata = $node->data_dir;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->command_ok([ 'pgbench', '-i', '-s', '5', '-q', 'postgres' ], 'pgbench -i -s 5');
$node->safe_psql('postgres', 'CHECKPOINT');
my $L = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');

# ---- 1. status after a workload ------------------------------------------------

$node->command_ok([ 'pgbench', '-n', '-c', '2', '-j', '2', '-t', '2000', 'postgres' ], 'pgbench run');
$node->safe_psql('postgres', 'CHECKPOINT');
# wal: ptrack_init_lsn() waits until the follower has applied the WAL so far;
# the save follows the checkpoint record it read.
$node->safe_psql('postgres', 'SELECT ptrack_init_lsn()');
$node->poll_query_until('postgres', 'SELECT saves > 0 FROM ptrack_status')
  or die 'no map save after a CHECKPOINT';

my $status = $node->safe_psql('postgres', q{SELECT * FROM ptrack_status},
	extra_params => [ '-x' ]);
note "ptrack_status after pgbench ($mode):\n$status";

my @names = qw(capture off_reason_null map_size fill_positive rate_ok init_lsn_ok saved
  last_save_recent failed_saves restarts follower_cols);
my @values = split /\|/, $node->safe_psql('postgres', q{
SELECT capture, off_reason IS NULL, map_size, map_fill > 0 AND map_fill < 1,
       abs(false_positive_rate - map_fill ^ 2) < 1e-12,
       init_lsn IS NOT NULL AND init_lsn <= pg_current_wal_insert_lsn(),
       saves > 0 AND last_save_lsn IS NOT NULL AND last_save_time IS NOT NULL
         AND last_save_bytes > 0 AND last_save_ms >= 0,
       last_save_time > now() - interval '10 minutes',
       failed_saves, restarts,
       coalesce(follower_pid::text, 'null') || ',' || coalesce(follower_lag_bytes::text, 'null') || ',' ||
         coalesce(follower_lag_seconds::text, 'null') || ',' || coalesce(follower_tli::text, 'null')
  FROM ptrack_status
}), -1;
my %s;
@s{@names} = map { $_ eq 't' ? 'true' : $_ eq 'f' ? 'false' : $_ } @values;
is($s{capture}, $mode, 'status: capture is the suite\'s capture source');
is($s{off_reason_null}, 'true', 'status: off_reason is NULL while tracking is on');
if ($mode eq 'wal')
{
	# The follower marks no map: it keeps its resume point in a few KB of
	# shared memory, whatever ptrack.map_size says (docs/design.md section 4.6).
	cmp_ok($s{map_size}, '<', 16384, 'status: map_size is the few KB of the unmarked map');
	is($s{fill_positive}, '', 'status: no map fill (NULL): the exact summaries answer');
	is($s{rate_ok}, '', 'status: no false positive rate (NULL)');
}
else
{
	is($s{map_size}, 64 * 1024 * 1024, 'status: map_size is ptrack.map_size in bytes');
	is($s{fill_positive}, 'true', 'status: the map holds marks after pgbench');
	is($s{rate_ok}, 'true', 'status: false_positive_rate is map_fill squared');
}
is($s{init_lsn_ok}, 'true', 'status: init_lsn set, not in the future');
is($s{saved}, 'true', 'status: a save after the CHECKPOINT, with its LSN, time, bytes and duration');
is($s{last_save_recent}, 'true', 'status: the last save is recent');
is($s{failed_saves}, '0', 'status: no failed save');
is($s{restarts}, '0', 'status: tracking never restarted');
my ($pid, $lag_bytes, $lag_seconds, $tli) = split /,/, $s{follower_cols};
if ($mode eq 'wal')
{
	ok($pid ne 'null' && $pid > 0, 'status: the WAL follower\'s PID');
	is($tli, '1', 'status: the follower reads timeline 1');
	# Just after ptrack_init_lsn() waited for it: a few records at most (a loaded machine may add some).
	ok($lag_bytes ne 'null' && $lag_bytes < 16 * 1024 * 1024, "status: follower lag small ($lag_bytes bytes)");
	ok($lag_seconds ne 'null' && $lag_seconds >= 0, "status: follower lag in seconds ($lag_seconds)");
}
else
{
	is($s{follower_cols}, 'null,null,null,null', 'status: no follower columns under hooks');
}

# ---- 2. a save that keeps failing -----------------------------------------------

my ($saves_before, $failed_before) =
  split /\|/, $node->safe_psql('postgres', 'SELECT saves, failed_saves FROM ptrack_status');
my $offset = log_position($node);
unlink ptrack_file($pgdata, 'ptrack.map.delta');
mkdir ptrack_file($pgdata, 'ptrack.map.delta') or die "mkdir: $!";
mkdir ptrack_file($pgdata, 'ptrack.map.tmp') or die "mkdir: $!";
# Three checkpoints (hooks: three saves), and time for the follower to retry (wal).
for (1 .. 3)
{
	$node->safe_psql('postgres', 'CREATE TABLE IF NOT EXISTS churn (i int); INSERT INTO churn VALUES (1); CHECKPOINT');
	sleep 1;
}
$node->poll_query_until('postgres', "SELECT failed_saves >= $failed_before + 3 FROM ptrack_status")
  or diag 'failed_saves did not reach 3 more: ' . $node->safe_psql('postgres', 'SELECT failed_saves FROM ptrack_status');
sleep 2;
my $log = log_since($node, $offset);
my $map_re = quotemeta(ptrack_path('ptrack.map'));
my $warnings = count_matches($log, qr/WARNING:  ptrack could not save its map: could not \w+ file "$map_re\.(?:tmp|delta)"/);
is($warnings, 1, 'failing saves: one WARNING, however often they are retried')
  or diag "log since the failures began:\n$log";
like($log, qr/WARNING:  ptrack could not save its map: .*\n.*DETAIL:  Backups are not affected.*\n.*HINT:  Make (?:the data directory|pg_wal\/ptrack) and ptrack's files in it .* writable/,
	'failing saves: the WARNING names ptrack, says what it means for backups and how to fix it');
my $failed_now = $node->safe_psql('postgres', 'SELECT failed_saves FROM ptrack_status');
cmp_ok($failed_now, '>=', $failed_before + 3, "failing saves: ptrack_status counts them ($failed_now)");
if ($mode eq 'wal')
{
	# Without the pause the follower retried every loop: hundreds in these seconds.
	cmp_ok($failed_now, '<', $failed_before + 20, 'failing saves: the WAL follower retries with a pause');
}

rmdir ptrack_file($pgdata, 'ptrack.map.delta') or die "rmdir: $!";
rmdir ptrack_file($pgdata, 'ptrack.map.tmp') or die "rmdir: $!";
$node->safe_psql('postgres', 'INSERT INTO churn VALUES (2); CHECKPOINT');
ok($node->poll_query_until('postgres', "SELECT saves > $saves_before FROM ptrack_status"),
	'failing saves: saves resume once the files can be written');
ok(-f ptrack_file($pgdata, 'ptrack.map'), 'failing saves: ptrack.map was written again');

# ---- 3. verify on a healthy cluster ------------------------------------------------

my ($ret, $out, $err) = $node->psql('postgres', "SELECT path, block, page_lsn FROM public.ptrack_verify('$L'::pg_lsn)");
is($ret, 0, 'verify: runs');
is($out, '', 'verify: no block changed since L is missing from ptrack_get_pagemapset(L)')
  or diag "public.ptrack_verify('$L'::pg_lsn) returned:\n$out";
like($err, qr/NOTICE:  ptrack_verify: \d+ files, [\d.]+ MB, \d+ pages checked in [\d.]+ s: \d+ changed at or after \Q$L\E, 0 of them not listed/,
	'verify: the summary NOTICE');
note "ptrack_verify summary on the healthy cluster:\n$err";

# Throttled: about 95 MB at 6 MB/s cannot take less than 15 s, so at least one progress NOTICE.
($ret, $out, $err) = $node->psql('postgres',
	"SET ptrack.verify_max_rate = '6MB'; SELECT count(*) FROM public.ptrack_verify('$L'::pg_lsn)");
is($out, '0', 'verify throttled: no block reported');
like($err, qr/NOTICE:  ptrack_verify: \d+ files, \d+ MB, \d+ pages checked in \d+ s; 0 blocks not listed so far/,
	'verify throttled: a progress NOTICE every ~10 s')
  or diag $err;
like($err, qr/pages checked in (\d+)\.\d s: /, 'verify throttled: the summary follows');
my ($secs) = $err =~ /pages checked in (\d+)\.\d s: /;
cmp_ok($secs // 0, '>=', 12, 'verify throttled: ptrack.verify_max_rate holds it back');

# While pgbench writes: a start LSN taken during the run, and a verify slow
# enough (~5 s) to read pages evicted after it computed a file's list.  Such
# candidates must be re-checked, not reported.
my $bench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-j', '2', '-T', '20', $node->connstr('postgres') ],
	'>', \my $bench_out, '2>', \my $bench_err);
sleep 2;
my $L_load = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
sleep 1;
($ret, $out, $err) = $node->psql('postgres',
	"SET ptrack.verify_max_rate = '20MB'; SELECT path, block, page_lsn FROM public.ptrack_verify('$L_load'::pg_lsn)");
$bench->finish;
is($ret, 0, 'verify under load: runs');
is($out, '', 'verify under load: no block reported')
  or diag "public.ptrack_verify('$L_load'::pg_lsn) under pgbench returned:\n$out\n$err";
note "ptrack_verify under pgbench:\n$err";

# Errors like the other functions.
($ret, $out, $err) = $node->psql('postgres', 'SELECT * FROM public.ptrack_verify(NULL::pg_lsn)');
like($err, qr/ERROR:  start_lsn must not be NULL/, 'verify: NULL start_lsn is an error');
($ret, $out, $err) = $node->psql('postgres', q{SELECT * FROM public.ptrack_verify('0/1'::pg_lsn)});
like($err, qr/ERROR:  start_lsn 0\/1 is older than ptrack_init_lsn\(\).*\n(?:.*\n)*HINT:  Take a full backup/,
	'verify: a start_lsn older than ptrack_init_lsn() is an error with a hint');

# ---- 4. a planted miss ---------------------------------------------------------------

$node->safe_psql('postgres',
	"CREATE TABLE planted AS SELECT g AS id, repeat('p', 100) AS pad FROM generate_series(1, 2000) g;"
	  . 'VACUUM (FREEZE) planted; CHECKPOINT');
# Past the 64 kB granule of every mark made so far (docs/design.md section 3.3).
$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
$node->safe_psql('postgres', 'INSERT INTO churn VALUES (3)');
my $L2 = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
my $relpath = $node->safe_psql('postgres', q{SELECT pg_relation_filepath('planted')});
($ret, $out, $err) = $node->psql('postgres', "SELECT path, block FROM public.ptrack_verify('$L2'::pg_lsn)");
is($out, '', 'planted: nothing missing before the page is planted');
my $listed = $node->safe_psql('postgres',
	"SELECT count(*) FROM public.ptrack_get_pagemapset('$L2'::pg_lsn) WHERE path = '$relpath' AND get_byte(pagemap, 0) & 2 <> 0");
is($listed, '0', 'planted: block 1 of the table is not listed since L2 (else the test proves nothing)');

$node->stop;
{
	my $file = "$pgdata/$relpath";
	open(my $fh, '+<:raw', $file) or die "open $file: $!";
	seek($fh, BLCKSZ, 0) or die "seek: $!";
	read($fh, my $page, BLCKSZ) == BLCKSZ or die "read: $!";
	my $lsn = lsn_to_int($L2);
	substr($page, 0, 8) = pack('L L', $lsn >> 32, $lsn & 0xFFFFFFFF);
	# A byte of the first tuple's pad (tuples fill the page from its end).
	my $pos = rindex($page, 'p');
	$pos > 24 or die 'planted: unexpected page layout';
	substr($page, $pos, 1) = 'q';
	seek($fh, BLCKSZ, 0) or die "seek: $!";
	print $fh $page or die "write: $!";
	close $fh or die "close: $!";
}
$node->start;
($ret, $out, $err) = $node->psql('postgres', "SELECT path, block, page_lsn FROM public.ptrack_verify('$L2'::pg_lsn)");
is($out, "$relpath|1|$L2", 'planted: ptrack_verify returns exactly the planted block')
  or diag "public.ptrack_verify('$L2'::pg_lsn) returned:\n$out\n$err";
like($err, qr/, 1 of them not listed by ptrack_get_pagemapset\(\)/, 'planted: the summary counts one miss');
note "ptrack_verify on the planted miss:\n$out\n$err";

# ---- 4b. wal: a change summary that misses a block -----------------------------------

SKIP:
{
	skip 'change summaries are written by the WAL follower (wal capture only)', 7 unless $mode eq 'wal';
	my $sumdir = "$pgdata/pg_wal/ptrack";
	my $now = sub { return $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()'); };
	# A cut: the summaries hold every change made so far.
	my $cut = sub { $node->safe_psql('postgres', "SELECT count(*) FROM public.ptrack_get_pagemapset('$L2'::pg_lsn)"); };
	$node->safe_psql('postgres', 'CHECKPOINT');
	$cut->();
	my $before = lsn_to_int($now->());
	$node->safe_psql('postgres',
		"CREATE TABLE shorted AS SELECT g AS id, repeat('s', 100) AS pad FROM generate_series(1, 2000) g");
	my $shorted = $node->safe_psql('postgres', q{SELECT pg_relation_filepath('shorted')});
	$cut->();
	my $L3 = $now->();
	$node->safe_psql('postgres', q{UPDATE shorted SET pad = 'changed' WHERE id = 1000});
	my $block = $node->safe_psql('postgres', q{SELECT (ctid::text::point)[0]::int FROM shorted WHERE id = 1000});
	my $L4 = lsn_to_int($now->());
	# ptrack_verify reads the files: the page must be on disk.
	$node->safe_psql('postgres', 'CHECKPOINT');
	$cut->();
	# Retention combines the files up to the checkpoint's redo LSN after the save: let it settle.
	my $holding = sub { return grep { $_->{end} > lsn_to_int($L3) && $_->{start} <= $L4 } summaries($pgdata); };
	my ($seen, $same) = ('', 0);
	for (1 .. 300)
	{
		my $names = join(' ', map { $_->{name} } $holding->());
		$same = $names eq $seen ? $same + 1 : 0;
		$seen = $names;
		last if $same >= 20;    # unchanged for 2 s
		usleep(100_000);
	}
	my @holding = $holding->();
	# What an older summary holds cannot name a table created after it.
	my ($source) = grep { $_->{valid} && $_->{end} <= $before } summaries($pgdata);
	ok($source && @holding, 'shorted: an older summary (' . ($source ? $source->{name} : 'none')
		  . ') and the ones holding the UPDATE: ' . join(' ', map { $_->{name} } @holding));
	my %saved;
	foreach my $f (@holding)
	{
		open(my $fh, '<:raw', "$sumdir/$f->{name}") or die "$f->{name}: $!";
		local $/;
		$saved{ $f->{name} } = <$fh>;
		close $fh;
		copy_summary_as($pgdata, $source->{name}, $f->{start}, $f->{end}, $f->{flags});
	}
	my $listed_now = $node->safe_psql('postgres',
		"SELECT count(*) FROM public.ptrack_get_pagemapset('$L3'::pg_lsn) WHERE path = '$shorted'");
	is($listed_now, '0', "shorted: the summaries no longer list $shorted since $L3 (else the test proves nothing)");
	($ret, $out, $err) = $node->psql('postgres',
		"SELECT path, block FROM public.ptrack_verify('$L3'::pg_lsn) ORDER BY 1, 2");
	like($out, qr/^\Q$shorted\E\|$block$/m, "shorted: ptrack_verify returns the block the summaries miss ($shorted block $block)")
	  or diag "public.ptrack_verify('$L3'::pg_lsn) returned:\n$out\n$err";
	like($err, qr/of them not listed by ptrack_get_pagemapset\(\) \(answered from the change summaries\)/,
		'shorted: the NOTICE says the summaries answered');
	note "ptrack_verify with a summary missing a block:\n$out\n$err";
	foreach my $name (keys %saved)
	{
		open(my $fh, '>:raw', "$sumdir/$name") or die "$name: $!";
		print $fh $saved{$name};
		close $fh;
	}
	($ret, $out, $err) = $node->psql('postgres',
		"SELECT path, block FROM public.ptrack_verify('$L3'::pg_lsn)");
	is($ret, 0, 'restored: ptrack_verify runs');
	is($out, '', 'restored: no block is missing from the summaries\' answer') or diag $err;
	like($err, qr/, 0 of them not listed by ptrack_get_pagemapset\(\) \(answered from the change summaries\)/,
		'restored: the NOTICE counts no miss');
}

# ---- 5. a misspelt setting, then tracking off ---------------------------------------

$node->append_conf('postgresql.conf', "ptrack.map_sise = 32MB\n");
$offset = log_position($node);
$node->restart;
$log = log_since($node, $offset);
like($log, qr/WARNING:  ptrack has no parameter "ptrack.map_sise": the setting is ignored\n(?:.*\n)*?.*HINT:  Correct the name in the configuration/,
	'misspelt setting: ptrack\'s WARNING with a hint');
$node->append_conf('postgresql.conf', "ptrack.map_size = 0\n");
$node->restart;
is($node->safe_psql('postgres', 'SELECT capture, off_reason, map_size FROM ptrack_status'),
	'off|ptrack.map_size is 0 (the configuration names an unknown parameter "ptrack.map_sise": misspelt?)|0',
	'tracking off: ptrack_status says why, naming the misspelt parameter');
($ret, $out, $err) = $node->psql('postgres', "SELECT * FROM public.ptrack_verify('$L2'::pg_lsn)");
like($err, qr/ERROR:  ptrack change tracking is disabled\n.*HINT:/, 'tracking off: ptrack_verify refuses with a hint');

$node->stop;
done_testing();
