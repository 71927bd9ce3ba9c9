# Copyright (c) the ptrack authors
#
# 036_redo_targets.pl -- wal capture only: a WAL follower behind the WAL that
# learns several checkpoints' redo LSNs before it reaches the first still ends
# a summary at each of them (docs/design.md section 4.5).
#
# On 15 the follower learns a redo LSN only by polling GetRedoRecPtr() before
# each batch of WAL (17 and 18 also read it from the XLOG_CHECKPOINT_REDO
# record).  It kept one target: a second checkpoint that began before it had
# reached the first one's redo LSN replaced it, no summary ended there, and
# an incremental backup starting there took the whole summary holding it
# (a tester saw an 11,320-page update made before the backup listed).
#
# The developer setting ptrack.wal_batch_delay keeps the follower behind
# while it polls: 2 s after each batch of 1000 records, with about 20,000
# records of WAL before the first CHECKPOINT.  After the second CHECKPOINT
# the pause is removed, the follower catches up, and summaries must end at
# both redo LSNs (with the ends-at-redo flag).

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

# Without data checksums (18's default is on) and wal_log_hints: the UPDATE's scan would
# otherwise log a full-page image of every page whose hint bits it sets after the checkpoint.
my $node = ptrack_node('redo_targets', checksums => 0,
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\nmax_wal_size = 4GB\nwal_log_hints = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
init_lsn($node);    # the follower runs and has caught up
$node->safe_psql('postgres', 'CREATE TABLE t (id int, pad text)');

sub follower_lsn
{
	return lsn_to_int($node->safe_psql('postgres', 'SELECT follower_lsn FROM ptrack_status()'));
}

sub redo_lsn
{
	return lsn_to_int($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
}

# The pause, read by the follower at its next SIGHUP (it sleeps 200 ms at most between looks).
$node->append_conf('postgresql.conf', 'ptrack.wal_batch_delay = 2000');
$node->reload;
sleep 1;

# About 20,000 heap insert records: 20 batches, 40 s for the follower at that pace.
$node->safe_psql('postgres', "INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g");
$node->safe_psql('postgres', 'CHECKPOINT');
my $redo1 = redo_lsn();
# Two batches at least: the follower has polled GetRedoRecPtr() since, and is far from the redo LSN.
sleep 5;
$node->safe_psql('postgres', 'UPDATE t SET id = id + 1 WHERE id % 100 = 0');
$node->safe_psql('postgres', 'CHECKPOINT');
my $redo2 = redo_lsn();
my $behind = follower_lsn();
ok($behind < $redo1,
	'the follower is still behind the first redo LSN ' . lsn_text($redo1) . ' when the second checkpoint ('
	  . lsn_text($redo2) . ') has begun: at ' . lsn_text($behind));

$node->append_conf('postgresql.conf', 'ptrack.wal_batch_delay = 0');
$node->reload;
$node->poll_query_until('postgres', "SELECT follower_lsn >= '" . lsn_text($redo2) . "' FROM ptrack_status()")
  or die 'the follower did not catch up';
# The summaries up to the save after the second checkpoint record.
init_lsn($node);
$node->safe_psql('postgres', 'SELECT count(*) FROM ptrack_get_pagemapset(ptrack_init_lsn())');
my @s = PtrackSummaries::summaries($node->data_dir);
for my $r ([ 'first', $redo1 ], [ 'second', $redo2 ])
{
	my ($what, $redo) = @$r;
	my ($at) = grep { $_->{end} == $redo } @s;
	ok(defined $at && ($at->{flags} & 1),
		"a summary ends at the $what redo LSN " . lsn_text($redo) . ', with the ends-at-redo flag (have: '
		  . describe_summaries(@s) . ')');
}
is(chain_break(@s), '', 'the chain has no hole');

# What the first redo LSN's answer lists of t: the rows updated after it, not the 20,000 inserted before.
my $rel = $node->safe_psql('postgres', "SELECT pg_relation_filepath('t')");
my $pages = $node->safe_psql('postgres',
	"SELECT coalesce(sum(pagecount), 0) FROM ptrack_get_pagemapset('" . lsn_text($redo1) . "') WHERE path = '$rel'");
my $all = $node->safe_psql('postgres', "SELECT pg_relation_size('t') / current_setting('block_size')::int");
ok($pages < $all / 2, "the answer for the first redo LSN lists $pages of t's $all pages (the UPDATE's), not the load");

$node->stop;
done_testing();
