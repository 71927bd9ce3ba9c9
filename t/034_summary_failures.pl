# Copyright (c) the ptrack authors
#
# 034_summary_failures.pl -- wal capture only: the WAL follower's change
# summaries (pg_wal/ptrack, src/pg/persist/summary_io.h) when their
# directory cannot be used, and what ptrack_status() says about them
# (src/pg/capture/wal/capture_wal.cpp, src/pg/sql/status.cpp):
#
#   1. pg_wal/ptrack read-only (chmod 500) when the follower resumes from a
#      saved map (the postmaster reads the map there; a directory it cannot
#      read at all refuses the map, like an unreadable map file: t/029):
#      the follower does not run with the summaries off, it says why (a
#      WARNING whose hint names pg_wal/ptrack, ptrack_status().off_reason,
#      the SQL functions' error), saves no map meanwhile (the map never gets
#      ahead of the summaries), and once the directory is usable again the
#      chain is kept whole: ptrack_init_lsn() unchanged, no file removed, the
#      changes made meanwhile listed; the same after one more restart;
#   2. a regular file in place of pg_wal/ptrack (so no map, which lives
#      there) at a fresh start: the same refusal, no map saved anywhere;
#      with the file gone the follower starts and answers;
#   3. the directory made unwritable while the follower runs: the summary it
#      cannot write counts in ptrack_status().failed_saves and its WARNING's
#      hint names pg_wal/ptrack; a call that times out says the follower
#      cannot write its summaries, with the failure and that hint, and so
#      does ptrack_status().off_reason; once writable again, nothing is lost
#      and off_reason is NULL;
#   4. ptrack_status().init_lsn is what ptrack_init_lsn() answers when the
#      summaries answer (the oldest summaries removed, as retention would),
#      and the error for start_lsn 0/0 names that LSN in its detail too;
#   5. the parameters: ptrack.wal_summary_keep_time below a minute is a
#      minute (not 0, "forever"); ptrack.wal_summary_memory has bounds;
#   6. one WAL record whose changes do not fit in ptrack.wal_summary_memory
#      (a DROP SCHEMA of 20,000 tables in 4 MB): recorded as its database,
#      whole (LOG), no restart of tracking, the start LSN before it answered
#      with every block of the database.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Path qw(rmtree);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node ptrack_file ptrack_files_outside log_position log_since init_lsn map_header);
use PtrackOracle qw(lsn_to_int pagemapset);
use PtrackSummaries qw(summaries chain_break describe_summaries lsn_text);

plan skip_all => 'change summaries are written by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

my $node = ptrack_node('summary_failures',
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\n");
$node->start;
my $pgdata = $node->data_dir;
my $sumdir = "$pgdata/pg_wal/ptrack";

# Whatever happens, the directory is left removable for the framework.
END { chmod(0700, $sumdir) if defined $sumdir && -d $sumdir; }

$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql('postgres',
	q{CREATE TABLE t (id int, pad text);
	  INSERT INTO t SELECT g, repeat('x', 500) FROM generate_series(1, 3000) g;
	  CHECKPOINT});

sub lsn { return $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()'); }

# Updates row $id of t; returns [path, block] of its new version.
sub change
{
	my ($id, $what) = @_;
	$node->safe_psql('postgres', "UPDATE t SET pad = '$what' WHERE id = $id");
	my $path = $node->safe_psql('postgres', "SELECT pg_relation_filepath('t')");
	my $block = $node->safe_psql('postgres', "SELECT (ctid::text::point)[0]::int FROM t WHERE id = $id");
	return [ $path, $block ];
}

# The changes of @$want (each [path, block]) not listed by pagemapset($since), as text.
sub not_listed
{
	my ($since, @want) = @_;
	my $map = pagemapset($node, 'postgres', $since);
	my @missing;
	foreach my $w (@want)
	{
		my ($path, $block) = @$w;
		push @missing, "$path block $block"
		  unless $map->{$path} && grep { $_ == $block } @{ $map->{$path}{blocks} };
	}
	return join(', ', @missing);
}

# A call: (ok, stderr).
sub call
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql);
	return ($ret == 0, $err);
}

sub status { my ($col) = @_; return $node->safe_psql('postgres', "SELECT $col FROM ptrack_status()"); }

# Polls ptrack_status().off_reason until it matches $re (1) or 30 s pass (0).
sub off_reason_matches
{
	my ($re) = @_;
	foreach (1 .. 300)
	{
		return 1 if status('off_reason') =~ $re;
		usleep(100_000);
	}
	return 0;
}

sub usleep { select(undef, undef, undef, $_[0] / 1e6); return; }

# Checkpoints and a pause: the follower would save its map now if it ran.
sub give_a_chance_to_save
{
	$node->safe_psql('postgres', 'CHECKPOINT') for 1 .. 2;
	usleep(1_500_000);
	return;
}

# --- 1. read-only at a resume ---------------------------------------------------
my $L0 = lsn();
my $a = change(10, 'A');
is(not_listed($L0, $a), '', "before: pagemapset(L0 $L0) lists change A");
my $init0 = init_lsn($node);
$node->stop('fast');
my @before = summaries($pgdata);
ok(@before > 0, 'before: summaries on disk: ' . describe_summaries(@before));
my $covered0 = map_header($pgdata)->{covered_lsn};

chmod(0500, $sumdir) or die "chmod: $!";
my $offset = log_position($node);
$node->start;
ok(off_reason_matches(qr{pg_wal/ptrack}), 'read-only: ptrack_status().off_reason names pg_wal/ptrack')
  or diag('off_reason: ' . status('off_reason'));
my $log = log_since($node, $offset);
like($log, qr{WARNING:[^\n]*pg_wal/ptrack}, 'read-only: a WARNING names the directory');
like($log, qr{HINT:[^\n]*pg_wal/ptrack}, 'read-only: its hint names the directory');
{
	my ($ok, $err) = call('SELECT ptrack_init_lsn()');
	ok(!$ok, 'read-only: ptrack_init_lsn() fails at once');
	like($err, qr{pg_wal/ptrack}, 'read-only: its error names the directory') or diag($err);
}
my $L1 = lsn();
my $b = change(20, 'B');
give_a_chance_to_save();
is(map_header($pgdata)->{covered_lsn}, $covered0, 'read-only: no map is saved (it would get ahead of the summaries)');
is(status('saves'), '0', 'read-only: ptrack_status() counts no save');
ok(status('off_reason') ne '', 'read-only: the follower is still held');

chmod(0700, $sumdir) or die "chmod: $!";
ok($node->poll_query_until('postgres', 'SELECT off_reason IS NULL FROM ptrack_status()'),
	'usable again: the follower runs');
is(init_lsn($node), $init0, 'usable again: ptrack_init_lsn() is unchanged (the chain was kept)');
is(not_listed($L0, $a, $b), '', "usable again: pagemapset(L0 $L0) lists change A and the change B made meanwhile");
is(not_listed($L1, $b), '', "usable again: pagemapset(L1 $L1) lists change B");
{
	my @now = summaries($pgdata);
	# (retention may have combined them meanwhile: the range counts, not the names)
	is(lsn_text($now[0]{start}), lsn_text($before[0]{start}), 'usable again: the chain still starts where it did')
	  or diag('before: ' . describe_summaries(@before) . '; now: ' . describe_summaries(@now));
	is(chain_break(@now), '', 'usable again: the chain has no hole') or diag(describe_summaries(@now));
}
unlike(log_since($node, $offset), qr/ptrack removed its \d+ change summaries|restarted change tracking/,
	'usable again: neither the summaries nor tracking restarted');

# The map saved since then does not claim more than the summaries hold: a restart keeps the chain.
$node->restart;
is(init_lsn($node), $init0, 'restarted: ptrack_init_lsn() is still unchanged');
is(not_listed($L0, $a, $b), '', "restarted: pagemapset(L0 $L0) still lists changes A and B");
unlike(log_since($node, $offset), qr/ptrack removed its \d+ change summaries/, 'restarted: no summary was removed');

# --- 2. a file in place of the directory at a fresh start --------------------------
$node->stop('fast');
rmtree($sumdir);
{
	open(my $fh, '>', $sumdir) or die "create $sumdir: $!";
	print $fh "not a directory\n";
	close $fh;
}
$offset = log_position($node);
$node->start;
ok(off_reason_matches(qr{pg_wal/ptrack}), 'a file in its place: ptrack_status().off_reason names pg_wal/ptrack')
  or diag('off_reason: ' . status('off_reason'));
like(log_since($node, $offset), qr{HINT:[^\n]*pg_wal/ptrack}, 'a file in its place: the hint names the directory');
give_a_chance_to_save();
is(status('saves'), '0', 'a file in its place: no map is saved');
is(join(' ', ptrack_files_outside($pgdata)), '', 'a file in its place: nor any file of ptrack\'s in the data directory');
unlink($sumdir) or die "unlink: $!";
ok($node->poll_query_until('postgres', 'SELECT off_reason IS NULL FROM ptrack_status()'),
	'directory gone: the follower runs');
my $init2 = init_lsn($node);
my $L2 = lsn();
my $c = change(30, 'C');
is(not_listed($init2, $c), '', "directory gone: pagemapset(ptrack_init_lsn() $init2) answers and lists change C");
is(not_listed($L2, $c), '', "directory gone: pagemapset(L2 $L2) lists change C");
ok(-d $sumdir, 'directory gone: the follower made it again');

# --- 3. unwritable while the follower runs ------------------------------------------
my $failed = status('failed_saves');
my $L3 = lsn();
my $d = change(40, 'D');
$offset = log_position($node);
chmod(0500, $sumdir) or die "chmod: $!";
{
	my ($ok, $err) = call(
		"SET ptrack.wal_wait_timeout = '3s'; SELECT count(*) FROM ptrack_get_pagemapset('$L3'::pg_lsn)");
	ok(!$ok, 'unwritable: pagemapset() cannot answer') or diag($err);
	like($err,
		qr{ERROR:  ptrack's WAL follower cannot write its change summaries: could not create file "pg_wal/ptrack/[^"]+": Permission denied},
		'unwritable: the error says why, not just that the wait timed out') or diag($err);
	like($err, qr{HINT:[^\n]*pg_wal/ptrack}, 'unwritable: its hint names pg_wal/ptrack') or diag($err);
}
like(status('off_reason'), qr{^the WAL follower cannot write its change summaries \(retrying; last failure at .*\): could not create file "pg_wal/ptrack/},
	'unwritable: ptrack_status().off_reason says so');
cmp_ok(status('failed_saves'), '>', $failed, 'unwritable: ptrack_status().failed_saves counts the summary not written');
$log = log_since($node, $offset);
like($log, qr/WARNING:  ptrack could not save its change summar/, 'unwritable: a WARNING says so');
like($log, qr{HINT:[^\n]*pg_wal/ptrack}, 'unwritable: its hint names pg_wal/ptrack');
chmod(0700, $sumdir) or die "chmod: $!";
is(not_listed($L3, $d), '', "writable again: pagemapset(L3 $L3) lists change D");
is(status("coalesce(off_reason, 'none')"), 'none', 'writable again: ptrack_status().off_reason is NULL');
is(not_listed($init2, $c, $d), '', 'writable again: pagemapset(ptrack_init_lsn()) lists changes C and D');
{
	my @now = summaries($pgdata);
	is(chain_break(@now), '', 'writable again: the chain has no hole') or diag(describe_summaries(@now));
}

# --- 4. ptrack_status().init_lsn is ptrack_init_lsn() -------------------------------
# A listing retention no longer changes (it combines files cut at calls, once a second at most).
my @files = summaries($pgdata);
foreach (1 .. 30)
{
	usleep(1_500_000);
	my @again = summaries($pgdata);
	last if describe_summaries(@again) eq describe_summaries(@files);
	@files = @again;
}
ok(@files >= 2, 'status: several summaries: ' . describe_summaries(@files));
unlink("$sumdir/$files[0]{name}") or die "unlink: $!";
my $answer = init_lsn($node);
is($answer, lsn_text($files[1]{start}), 'status: ptrack_init_lsn() is the oldest summary kept');
is(status('init_lsn'), $answer, 'status: ptrack_status().init_lsn is what ptrack_init_lsn() answers');
{
	my ($ok, $err) = call("SELECT count(*) FROM ptrack_get_pagemapset('0/0'::pg_lsn)");
	ok(!$ok, 'status: pagemapset(0/0) refuses');
	like($err, qr{ERROR:  start_lsn 0/0 is older than ptrack_init_lsn\(\) \Q$answer\E}, 'status: its message names it')
	  or diag($err);
	like($err, qr{DETAIL:[^\n]*\Q$answer\E}, 'status: its detail names the same LSN') or diag($err);
}

# --- 5. the parameters ----------------------------------------------------------------
$node->safe_psql('postgres', "ALTER SYSTEM SET ptrack.wal_summary_keep_time = '1s'; SELECT pg_reload_conf()");
$node->poll_query_until('postgres', "SELECT setting <> '14400' FROM pg_settings WHERE name = 'ptrack.wal_summary_keep_time'");
is($node->safe_psql('postgres', 'SHOW ptrack.wal_summary_keep_time'), '1min',
	'keep_time: 1s is a minute, not 0 (which keeps the summaries forever)');
$node->safe_psql('postgres', "ALTER SYSTEM SET ptrack.wal_summary_keep_time = '90s'; SELECT pg_reload_conf()");
$node->poll_query_until('postgres', "SELECT setting <> '1' FROM pg_settings WHERE name = 'ptrack.wal_summary_keep_time'");
is($node->safe_psql('postgres', 'SHOW ptrack.wal_summary_keep_time'), '2min', 'keep_time: 90s rounds up to 2 minutes');
$node->safe_psql('postgres', "ALTER SYSTEM RESET ptrack.wal_summary_keep_time; SELECT pg_reload_conf()");
is(
	$node->safe_psql('postgres',
		"SELECT min_val || ' ' || max_val FROM pg_settings WHERE name = 'ptrack.wal_summary_memory'"),
	'4 1048576', 'wal_summary_memory: from 4 MB to 1 TB');
{
	my ($ok, $err) = call("ALTER SYSTEM SET ptrack.wal_summary_memory = '2TB'");
	ok(!$ok, 'wal_summary_memory: 2TB is refused');
	like($err, qr/is outside the valid range/, 'wal_summary_memory: with the range') or diag($err);
}

# --- 6. one WAL record larger than ptrack.wal_summary_memory ---------------------------
# DROP SCHEMA ... CASCADE of 20,000 tables with a primary key: one commit
# record drops 40,000 relations, four forks each, more than 4 MB of change
# set.  The record goes in as its database, whole: no restart, the start
# LSN before it is still answered, every block of the database listed.
$node->append_conf('postgresql.conf', "max_locks_per_transaction = 4096\nptrack.wal_summary_memory = 4MB\n");
$node->restart;
$node->safe_psql('postgres', q{CREATE SCHEMA many;
	DO $$ BEGIN FOR i IN 1 .. 20000 LOOP
	  EXECUTE format('CREATE TABLE many.t%s (a int PRIMARY KEY)', i);
	END LOOP; END $$});
$node->safe_psql('postgres', 'CHECKPOINT');
my $init_big = init_lsn($node);
my $L_big = lsn();
my @want_big = (change(11, 'before the drop'));
my $offset_big = log_position($node);
my $restarts = status('restarts');
$node->safe_psql('postgres', 'DROP SCHEMA many CASCADE');
push @want_big, change(12, 'after the drop');
is(not_listed($L_big, @want_big), '', 'big record: the changes around it are listed from ' . $L_big);
is(init_lsn($node), $init_big, "big record: ptrack_init_lsn() is unchanged ($init_big)");
my $log_big = log_since($node, $offset_big);
like($log_big, qr/LOG:  ptrack recorded the WAL record ending at \S+ as whole databases: its changes do not fit in ptrack.wal_summary_memory \(4 MB\)/,
	'big record: recorded as whole databases (LOG)');
unlike($log_big, qr/ptrack (?:restarted change tracking|change summaries restart)/, 'big record: tracking did not restart');
is(status('restarts'), $restarts, 'big record: ptrack_status().restarts unchanged');
{
	my $map = pagemapset($node, 'postgres', $L_big);
	my $path = $node->safe_psql('postgres', "SELECT pg_relation_filepath('t')");
	my $blocks = $node->safe_psql('postgres', "SELECT pg_relation_size('t') / current_setting('block_size')::int");
	is(scalar(@{ $map->{$path}{blocks} // [] }), $blocks, "big record: all $blocks blocks of $path are listed (its database, whole)");
}
$node->append_conf('postgresql.conf', "ptrack.wal_summary_memory = 64MB\n");
$node->reload;

$node->stop;
done_testing();
