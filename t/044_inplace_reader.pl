# Copyright (c) the ptrack authors
#
# 044_inplace_reader.pl -- wal capture only: the WAL follower's in-place
# reader (src/pg/capture/wal/inplace_reader.h) reads every record of a
# varied workload as xlogreader does, and the follower fed by it lists
# every block changed.
#
# The cluster has 1 MB WAL segments, so that records cross segment
# boundaries often.  The workload makes the record kinds t/030 makes
# (on-access pruning, freezing, a visibility map bit cleared), full page
# images (first changes after checkpoints, compressed with pglz in the first
# phase: images with and without holes), COPY (multi-insert), TOAST rows
# larger than a page, index builds (records with many block references),
# a truncation by VACUUM, TRUNCATE and DROP (relations dropped at commit),
# a two-phase commit, subtransactions, sequences, CREATE and DROP DATABASE,
# a logical message of 3 MB (main data over many pages and four segments),
# pg_switch_wal(), and last a row moved off a full page to a page that only
# the UPDATE's block id 0 names after L.
#
# Phase 1, ptrack.wal_reader = compare: the follower reads each record of its
# steady state with both readers and raises an ERROR at the first
# difference; the test asserts no difference, no read error, no restart of
# tracking, that records were compared (the follower's LOG lines count
# them), that the in-place reader handled every record it was given, and
# that the page LSN oracle finds every block changed since L listed.
# Phase 2, ptrack.wal_reader = inplace (the default, after a reload): the
# same workload, the same assertions without the comparison.
# Phase 3: the segment file the follower reads is cut to nothing while it
# is stopped (SIGSTOP), with WAL in it still to read.  Its next read finds
# the file's end: the record is not handled (LOG), xlogreader reads on
# (from the WAL buffers, or fails to read the file and tracking restarts),
# and the server goes on: no crash restart, a session opened before still
# works, and after a checkpoint the follower answers again.  (The reader
# once mapped the segment files; there the cut raised SIGBUS, which killed
# the follower and made the postmaster restart every backend.)
# Phase 4, the default reader: a record that a crash cut short.  A logical
# message of 2.5 MB spans segments; after an immediate stop the segment
# holding its end is removed, so recovery ends inside the record and the
# WAL written after recovery overwrites its continuation
# (XLP_FIRST_IS_OVERWRITE_CONTRECORD, as PostgreSQL's own recovery test of
# overwritten continuation records makes it).  The follower, resuming before the
# record, finds its claimed end past the WAL flushed: it must not wait for
# WAL that will never complete it (it did, until the server had written
# that much more), but hand it to xlogreader, which skips it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

use PtrackCluster qw(capture_mode ptrack_node init_lsn log_position log_since follower_pid);
use PtrackOracle qw(block_counts no_misses_ok);

plan skip_all => 'the in-place reader is the WAL follower\'s (wal capture only)'
  unless capture_mode() eq 'wal';

my $node = ptrack_node('inplace_reader',
	extra => [ '--wal-segsize=1' ],
	conf => "ptrack.wal_reader = compare\nwal_compression = pglz\nautovacuum = off\n"
	  . "max_prepared_transactions = 2\ncheckpoint_timeout = 1h\nmax_wal_size = 1GB\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
init_lsn($node);    # the follower runs and has caught up
is($node->safe_psql('postgres', 'SHOW wal_segment_size'), '1MB', 'WAL segments of 1 MB');

# The workload of one phase; every object is named after $tag.
sub workload
{
	my ($tag) = @_;
	my $copy_file = $node->basedir . "/copy_$tag.data";
	$node->safe_psql('postgres', qq{
CREATE TABLE big_$tag (id int PRIMARY KEY, v int, pad text);
INSERT INTO big_$tag SELECT g, 0, repeat('x', 200) FROM generate_series(1, 20000) g;
CHECKPOINT;
UPDATE big_$tag SET v = v + 1 WHERE id % 7 = 0;
CREATE TABLE toast_$tag (id int, doc text);
INSERT INTO toast_$tag SELECT g, (SELECT string_agg(md5(g::text || i::text), '') FROM generate_series(1, 400) i)
  FROM generate_series(1, 200) g;
COPY (SELECT g, g % 10, md5(g::text) FROM generate_series(1, 30000) g) TO '$copy_file';
CREATE TABLE copied_$tag (id int, v int, pad text);
COPY copied_$tag FROM '$copy_file';
CREATE INDEX ON copied_$tag (pad);
CREATE INDEX ON copied_$tag USING hash (v);
CREATE SEQUENCE seq_$tag;
SELECT nextval('seq_$tag') FROM generate_series(1, 100);
});
	# Subtransactions, some rolled back.
	$node->safe_psql('postgres', qq{
BEGIN;
INSERT INTO copied_$tag VALUES (-1, -1, 'a');
SAVEPOINT s1;
INSERT INTO copied_$tag VALUES (-2, -2, 'b');
ROLLBACK TO s1;
SAVEPOINT s2;
UPDATE copied_$tag SET v = v + 1 WHERE id < 100;
RELEASE s2;
COMMIT;
});
	# The record kinds of t/030: on-access pruning, freezing, a VM bit cleared.
	$node->safe_psql('postgres', qq{
CREATE TABLE prune_$tag (id int, pad text) WITH (fillfactor = 10);
INSERT INTO prune_$tag VALUES (1, repeat('p', 1500));
UPDATE prune_$tag SET pad = repeat('q', 1500);
});
	$node->safe_psql('postgres', "SELECT count(*) FROM prune_$tag");
	$node->safe_psql('postgres', qq{
CREATE TABLE freeze_$tag (id int, pad text);
INSERT INTO freeze_$tag SELECT g, repeat('f', 100) FROM generate_series(1, 3000) g;
});
	$node->safe_psql('postgres', "VACUUM freeze_$tag");
	$node->safe_psql('postgres', "VACUUM (FREEZE) freeze_$tag");
	$node->safe_psql('postgres', "DELETE FROM freeze_$tag WHERE id % 100 = 1");
	# A truncation by VACUUM, TRUNCATE, DROP, a two-phase commit that drops a table.
	$node->safe_psql('postgres', "DELETE FROM freeze_$tag WHERE id > 1000");
	$node->safe_psql('postgres', "VACUUM freeze_$tag");
	$node->safe_psql('postgres', "TRUNCATE prune_$tag");
	$node->safe_psql('postgres', "CREATE TABLE gone_$tag AS SELECT * FROM big_$tag WHERE id < 500");
	$node->safe_psql('postgres', qq{
BEGIN;
DROP TABLE gone_$tag;
INSERT INTO big_$tag VALUES (-1, 0, 'prepared');
PREPARE TRANSACTION 'p_$tag';
});
	$node->safe_psql('postgres', "COMMIT PREPARED 'p_$tag'");
	# A database created (WAL_LOG) and dropped.
	$node->safe_psql('postgres', "CREATE DATABASE db_$tag");
	$node->safe_psql("db_$tag", "CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g");
	$node->safe_psql('postgres', "DROP DATABASE db_$tag");
	# A record of 3 MB: main data over four segments.
	$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 'ptrack', repeat('m', 3000000))");
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	$node->safe_psql('postgres', qq{
CHECKPOINT;
UPDATE big_$tag SET pad = md5(random()::text) || pad WHERE id % 3 = 0;
UPDATE toast_$tag SET doc = doc || 'z' WHERE id % 5 = 0;
});
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	$node->safe_psql('postgres', "INSERT INTO big_$tag VALUES (-2, 0, 'after the switch')");
	# Last, a row moved off its full page to the table's last page, both
	# filled before L: the heap UPDATE names the last page as block id 0,
	# with a full page image, and no other record after L does, so the
	# oracle sees it listed only if the follower took that reference (the old
	# page, block id 1, is also named by the LOCK record heap_update writes
	# first).
	$node->safe_psql('postgres', qq{
UPDATE moved_$tag SET pad = (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 40) i) WHERE id = 1;
});
	return;
}

# Until the server log since $offset matches $re (the test's timeout).
sub wait_for_log
{
	my ($re, $from) = @_;
	for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
	{
		return 1 if log_since($node, $from // 0) =~ $re;
		usleep(100_000);
	}
	return 0;
}

# One phase: the workload under the current ptrack.wal_reader, then the checks.
sub phase
{
	my ($mode) = @_;
	my $offset = log_position($node);
	$node->safe_psql('postgres', qq{
CREATE TABLE moved_$mode (id int, pad text);
INSERT INTO moved_$mode SELECT g, repeat('a', 100) FROM generate_series(1, 200) g;
});
	# L is a checkpoint's redo LSN, where a summary ends: the answer for L holds no change made before it.
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $lsn = $node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
	my $baseline = block_counts($node->data_dir);
	my $lsn0 = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	workload($mode);
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $lsn1 = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
	my $mb = $node->safe_psql('postgres', "SELECT round(pg_wal_lsn_diff('$lsn1', '$lsn0') / 1048576.0, 1)");
	note "$mode: $mb MB of WAL from $lsn0 to $lsn1";

	no_misses_ok($node, $lsn, "$mode: every block changed since L $lsn is listed", baseline => $baseline);

	my ($restarts, $off) = split /\|/,
	  $node->safe_psql('postgres', "SELECT restarts, coalesce(off_reason, '') FROM ptrack_status()");
	is($restarts, 0, "$mode: tracking never restarted") or diag("off_reason: $off");
	my $log = log_since($node, $offset);
	my @errors = $log =~ /^.*(?:ERROR|WARNING):  ptrack.*$/mg;
	is(scalar @errors, 0, "$mode: no ERROR or WARNING from ptrack")
	  or diag(join("\n", @errors[ 0 .. ($#errors < 4 ? $#errors : 4) ]));
	my @fallbacks = $log =~ /^.*the in-place reader does not handle it.*$/mg;
	is(scalar @fallbacks, 0, "$mode: the in-place reader handled every record it was given")
	  or diag(join("\n", @fallbacks[ 0 .. ($#fallbacks < 4 ? $#fallbacks : 4) ]));
	return $log;
}

my $log = phase('compare');
my $compared = 0;
$compared += $1 while $log =~ /ptrack read (\d+) WAL records in place, equal to xlogreader's/g;
cmp_ok($compared, '>=', 10000, "compare: $compared records read by both readers, equal");

$node->append_conf('postgresql.conf', "ptrack.wal_reader = inplace\nwal_compression = off\n");
$node->reload;    # the follower takes it before its next batch
phase('inplace');

my $offset = log_position($node);
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $session = $node->background_psql('postgres');
$node->safe_psql('postgres', 'CREATE TABLE cut (id int); INSERT INTO cut SELECT generate_series(1, 100)');
init_lsn($node);    # the follower has read that WAL from the current segment
my $segment = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
my $follower = follower_pid($node);
kill 'STOP', $follower;
$node->safe_psql('postgres', 'INSERT INTO cut SELECT generate_series(1, 100)');    # WAL it has not read, in $segment
$node->safe_psql('postgres', 'SELECT pg_switch_wal()');    # nothing more is written to $segment
truncate($node->data_dir . "/pg_wal/$segment", 0) or die "truncate $segment: $!";
kill 'CONT', $follower;
ok( $node->poll_query_until(
		'postgres', "SELECT true FROM pg_stat_activity WHERE backend_type = 'ptrack WAL follower'",
		't')
	  && wait_for_log(qr/does not handle it \(could not read its segment file \w+ at offset \d+: the file ends there\)/,
		$offset),
	"cut segment: the follower found $segment cut short and said so");
my $cut_log = log_since($node, $offset);
unlike($cut_log, qr/terminated by signal/, 'cut segment: no process was killed by a signal');
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $started, 'cut segment: no crash restart');
is($session->query_safe('SELECT 42'), '42', 'cut segment: a session opened before still works');
$session->quit;
# Its restarts read from the slot's position, the last redo LSN, before the cut segment (backing
# off, never spinning) until a checkpoint moves that past it.
$node->safe_psql('postgres', 'CHECKPOINT');
ok(defined eval { init_lsn($node) }, 'cut segment: after a checkpoint the follower answers again') or diag($@);

$node->append_conf('postgresql.conf', "ptrack.wal_wait_timeout = 20s\n");
$node->reload;
$node->safe_psql('postgres', 'CHECKPOINT');
init_lsn($node);    # the follower has applied the checkpoint: it resumes before the message after the crash
$node->safe_psql('postgres', "SELECT pg_logical_emit_message(true, 'ptrack', repeat('xyzxz', 500000))");
my $end_segment = $node->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_insert_lsn())');
$node->stop('immediate');
unlink($node->data_dir . "/pg_wal/$end_segment") or die "unlink $end_segment: $!";
$node->start;
my ($dump_out, $dump_err) = run_command([ 'pg_waldump', '--path', $node->data_dir . '/pg_wal', $end_segment ]);
like($dump_out, qr/OVERWRITE_CONTRECORD/, "aborted record: recovery overwrote its continuation in $end_segment")
  or diag($dump_err);
ok(defined eval { init_lsn($node) }, 'aborted record: the follower goes past it') or diag($@);
is($node->safe_psql('postgres', 'SELECT restarts FROM ptrack_status()'), '0',
	'aborted record: tracking did not restart');

$node->stop;
done_testing();
