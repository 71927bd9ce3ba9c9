# Copyright (c) the ptrack authors
#
# 038_redo_after_cut.pl -- wal capture only: a checkpoint's redo LSN exactly
# at the end of the last record the WAL follower applied, learnt only after
# the follower cut a summary just past that record, still starts a summary,
# and retention keeps that boundary (docs/design.md section
# 4.5).
#
# The follower cuts at C + 1 (C: the end of the last record applied) for a
# save, a backend's request or a full set.  A checkpoint that begins right
# after (no WAL in between: a backup's fast checkpoint requested during a
# spread one, which begins when that one's record is written; a backup
# started right after a ptrack call) has its redo LSN at C.  The follower
# learnt it too late (below its set's start), no summary started at C, and an
# incremental backup from C took the whole summary before it: t/003 once
# listed 140,103 pages of a load made before its full backup (the summary
# from the previous redo LSN held the hint-bit images of a 1 GB table).  Now
# such a cut first ends a summary at C (the record ending at C goes to the
# next one), and a redo LSN learnt at C marks that summary as ending at a
# redo LSN, so that retention does not combine the boundary away.
#
#   1. an UPDATE of every page of t, a ptrack call (its cut ends past the
#      UPDATE's commit, C + 1), then CHECKPOINT with no WAL in between: its
#      redo LSN is C (else the case is tried again); the answer for it lists
#      none of t's pages (the code before listed every page the UPDATE
#      changed);
#   2. more checkpoints and saves, until retention has combined the
#      summaries after C: a summary still ends at C, with the ends-at-redo
#      flag, and the answer for C still lists none of t;
#   3. the same after a save's cut (t/003's case): CHECKPOINT, the follower
#      saves after applying its record (cut at C + 1), then CHECKPOINT with
#      its redo LSN at C: a summary ends there, flagged, and one starts there.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node init_lsn);
use PtrackOracle qw(lsn_to_int);
use PtrackSummaries qw(lsn_text chain_break describe_summaries);

plan skip_all => 'summaries are written by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

# Without data checksums and wal_log_hints: a checkpoint then logs no image of t's pages.
my $node = ptrack_node('redo_after_cut', checksums => 0,
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\nmax_wal_size = 4GB\nwal_log_hints = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql('postgres', "CREATE TABLE t (id int, pad text)");
$node->safe_psql('postgres', "CREATE TABLE u (id int)");
$node->safe_psql('postgres', "INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g");
$node->safe_psql('postgres', 'CHECKPOINT');
init_lsn($node);    # the follower runs and has caught up
my $rel = $node->safe_psql('postgres', "SELECT pg_relation_filepath('t')");

sub follower_lsn
{
	return lsn_to_int($node->safe_psql('postgres', 'SELECT follower_lsn FROM ptrack_status()'));
}

sub redo_lsn
{
	return lsn_to_int($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
}

# Pages of t the answer for $lsn lists (the call waits for the follower to apply the WAL before it).
sub listed
{
	my ($lsn) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(sum(pagecount), 0) FROM ptrack_get_pagemapset('" . lsn_text($lsn) . "') WHERE path = '$rel'");
}

# ---------------------------------------------------------------------------
# 1. A redo LSN right where a backend's cut ended a summary
# ---------------------------------------------------------------------------

my ($redo, $updated);
for my $try (1 .. 5)
{
	$node->safe_psql('postgres', 'UPDATE t SET id = id + 1');
	$updated = $node->safe_psql('postgres', "SELECT pg_relation_size('t') / current_setting('block_size')::int");
	# The call asks the follower for a cut after the UPDATE's commit, the last record: at C + 1.
	$node->safe_psql('postgres', 'SELECT count(*) FROM ptrack_get_pagemapset(ptrack_init_lsn())');
	my $c = follower_lsn();
	$node->safe_psql('postgres', 'CHECKPOINT');
	$redo = redo_lsn();
	last if $redo == $c;
	note 'try ' . $try . ': the redo LSN ' . lsn_text($redo) . ' is not where the follower stood, '
	  . lsn_text($c) . ' (WAL in between, or a page boundary): again';
	$redo = undef;
}
ok(defined $redo, 'a checkpoint began right where the follower cut a summary for a call');
$redo //= redo_lsn();
my $pages = listed($redo);
is($pages, 0,
	"the answer for the redo LSN " . lsn_text($redo) . " lists none of t's $updated pages "
	  . '(the UPDATE before it): the summaries are ' . describe_summaries(PtrackSummaries::summaries($node->data_dir)));

# ---------------------------------------------------------------------------
# 2. Retention keeps the boundary
# ---------------------------------------------------------------------------

# Each CHECKPOINT: a redo LSN (a boundary with the flag), then a save (at most one a second) after its record.
# Retention combines the runs between redo LSNs up to the save's resume point: the run from C on.
my $combined = 0;
for my $round (1 .. 30)
{
	$node->safe_psql('postgres', 'INSERT INTO u VALUES (1)');
	$node->safe_psql('postgres', 'CHECKPOINT');
	usleep(1_100_000);
	my @s = PtrackSummaries::summaries($node->data_dir);
	# Combined: no file starts at C + 1 any more (the save's cut after C ended one there).
	if (!grep { $_->{start} == $redo + 1 } @s)
	{
		$combined = 1;
		last;
	}
}
my @s = PtrackSummaries::summaries($node->data_dir);
ok($combined, 'retention combined the summaries after the redo LSN (have: ' . describe_summaries(@s) . ')');
my ($at) = grep { $_->{end} == $redo } @s;
ok(defined $at && ($at->{flags} & 1),
	'a summary still ends at the redo LSN ' . lsn_text($redo) . ', with the ends-at-redo flag (have: '
	  . describe_summaries(@s) . ')');
is(chain_break(@s), '', 'the chain has no hole');
is(listed($redo), 0, "after retention the answer for the redo LSN still lists none of t's pages");

# ---------------------------------------------------------------------------
# 3. A redo LSN right where a save's cut ended a summary (t/003's case)
# ---------------------------------------------------------------------------

# A CHECKPOINT's record makes the follower save (a second at least after the last save): its cut
# ends past that record, at C + 1.  A CHECKPOINT right after has its redo LSN at C.
my $redo3;
for my $try (1 .. 5)
{
	usleep(1_100_000);
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->poll_query_until('postgres', "SELECT follower_lsn = pg_current_wal_insert_lsn() FROM ptrack_status()")
	  or die 'the follower did not catch up';
	my $c = follower_lsn();
	# The save's cut (it comes right after the follower applied the checkpoint record).
	for (1 .. 100)
	{
		last if grep { $_->{end} == $c + 1 } PtrackSummaries::summaries($node->data_dir);
		usleep(100_000);
	}
	$node->safe_psql('postgres', 'CHECKPOINT');
	$redo3 = redo_lsn();
	last if $redo3 == $c;
	note 'try ' . $try . ': the redo LSN ' . lsn_text($redo3) . ' is not where the follower saved, '
	  . lsn_text($c) . ': again';
	$redo3 = undef;
}
ok(defined $redo3, 'a checkpoint began right where the follower cut a summary for a save');
$redo3 //= redo_lsn();
# The follower has applied the second checkpoint (it learnt the redo LSN before or at its first record).
$node->poll_query_until('postgres', "SELECT follower_lsn = pg_current_wal_insert_lsn() FROM ptrack_status()")
  or die 'the follower did not catch up';
# It marks the summary ending there between two batches, right after.
for (1 .. 100)
{
	@s = PtrackSummaries::summaries($node->data_dir);
	($at) = grep { $_->{end} == $redo3 } @s;
	last if defined $at && ($at->{flags} & 1);
	usleep(100_000);
}
ok(defined $at && ($at->{flags} & 1) && grep({ $_->{start} == $redo3 } @s),
	'a summary ends at the redo LSN ' . lsn_text($redo3) . ' with the ends-at-redo flag, and one starts there '
	  . '(have: ' . describe_summaries(@s) . ')');

$node->stop;
done_testing();
