# Copyright (c) the ptrack authors
#
# 037_walk_growth_catchup.pl -- wal capture only: a size walk made while the
# WAL follower is far behind (catching up after a load) does not put the
# load into the summary that starts at a later redo LSN (docs/design.md
# section 9.1, "Extension found by a walk").
#
# A walk dates the growth it sees at P, the insert LSN read after it.  With
# the follower far behind, it sees the whole load; a checkpoint's redo LSN R
# between the follower and P (a full backup taken during the catch-up) then
# got every summary up to P holding the load's growth, and an incremental
# from R listed the whole load (a tester saw 34,261 extra blocks).  The WAL
# up to P names those blocks itself: the follower now keeps a walk's growth
# waiting until it has applied the WAL up to P, and records only what that
# WAL did not date.
#
#   1. ptrack.wal_batch_delay keeps the follower behind a 20,000-record load
#      (about 5,000 pages); a CHECKPOINT gives R; a call that gives up at
#      once (ptrack.wal_wait_timeout = 100ms) asks for a walk, which the
#      follower makes while still far behind R;
#   2. 2,000 rows more after R extend the table;
#   3. once the follower has caught up, the answer for R lists the pages
#      extended after R and at most a few of the load's (the code before
#      listed all of them), and the page-LSN and extension oracles find
#      nothing missed for R nor for ptrack_init_lsn().

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node init_lsn);
use PtrackOracle qw(lsn_to_int block_counts pagemapset no_misses_ok);
use PtrackSummaries qw(lsn_text);

plan skip_all => 'summaries are written by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

my $node = ptrack_node('walk_growth',
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\nmax_wal_size = 4GB\n");
$node->start;
my $pgdata = $node->data_dir;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
my $init = init_lsn($node);
$node->safe_psql('postgres', 'CREATE TABLE big (id int, pad text)');
my $rel = $node->safe_psql('postgres', "SELECT pg_relation_filepath('big')");

sub follower_lsn
{
	return lsn_to_int($node->safe_psql('postgres', 'SELECT follower_lsn FROM ptrack_status()'));
}

# ---------------------------------------------------------------------------
# 1. A load, R, and a walk while the follower is far behind R
# ---------------------------------------------------------------------------

$node->append_conf('postgresql.conf', 'ptrack.wal_batch_delay = 2000');
$node->reload;
sleep 1;
# Rows of 1,800 bytes (not compressed: below the TOAST threshold), four to a page.
$node->safe_psql('postgres', "INSERT INTO big SELECT g, repeat('x', 1800) FROM generate_series(1, 20000) g");
$node->safe_psql('postgres', 'CHECKPOINT');
my $redo = lsn_to_int($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
my $baseline = block_counts($pgdata);
my $load_pages = $baseline->{$rel} // 0;
ok($load_pages >= 4000, "the load made $load_pages pages of $rel before R = " . lsn_text($redo));

# The call asks for a walk (wait_for_follower()), then gives up; the follower walks after its batch.
my ($ret, $out, $err) =
  $node->psql('postgres', "SET ptrack.wal_wait_timeout = '100ms'; SELECT ptrack_init_lsn()");
like($err, qr/has not caught up/, 'a call made while the follower is behind times out (and asked for a walk)');
sleep 5;
my $behind = follower_lsn();
ok($behind < $redo, 'the follower is still behind R after the walk: at ' . lsn_text($behind));

# ---------------------------------------------------------------------------
# 2. Extension after R
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', "INSERT INTO big SELECT g, repeat('y', 1800) FROM generate_series(1, 2000) g");

# ---------------------------------------------------------------------------
# 3. Caught up: the answer for R
# ---------------------------------------------------------------------------

$node->append_conf('postgresql.conf', 'ptrack.wal_batch_delay = 0');
$node->reload;
$node->poll_query_until('postgres', 'SELECT follower_lsn >= pg_current_wal_lsn() FROM ptrack_status()')
  or die 'the follower did not catch up';

my $map = pagemapset($node, 'postgres', lsn_text($redo));
my @listed = @{ ($map->{$rel} // { blocks => [] })->{blocks} };
my $old = grep { $_ < $load_pages } @listed;
my $new = grep { $_ >= $load_pages } @listed;
my $total = $node->safe_psql('postgres', "SELECT pg_relation_size('big') / current_setting('block_size')::int");
is($new, $total - $load_pages, "the answer for R lists the $new pages extended after it");
ok($old <= 2, "the answer for R lists $old of the $load_pages pages the load made before it (the code before: all)");

no_misses_ok($node, $redo, 'no block changed or extended since R is missed', baseline => $baseline);
no_misses_ok($node, $init, 'no block changed since ptrack_init_lsn() is missed');
my $from_init = pagemapset($node, 'postgres', $init);
is(scalar @{ ($from_init->{$rel} // { blocks => [] })->{blocks} }, $total,
	"the answer for ptrack_init_lsn() lists every one of the $total pages");

$node->stop;
done_testing();
