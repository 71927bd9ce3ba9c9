# Copyright (c) the ptrack authors
#
# 037_walk_growth_catchup.pl -- wal capture only: a size walk made while the
# WAL follower is far behind (catching up after a load) does not put the
# load into the summary that starts at a later redo LSN (docs/design.md
# section 4.3, "Dating a walk's growth").
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
#      nothing missed for R nor for ptrack_init_lsn();
#   4. the growth a call's walk finds (a new free space map: no WAL names
#      it), dated while a transaction's WAL is inserted but not flushed, is
#      in the summaries the call answers from: the call's cut ends past the
#      walk's date (the backend's target is the insert position after the
#      walk), and a cut takes the growth dated before its end; a backend's
#      cut also takes whatever still waits, whole (a guard: this test passes
#      without it, and fails without both);
#   5. a truncation lowers what the WAL dated: a table of 1,000 named pages
#      emptied and truncated by VACUUM, then grown again by COPY, which on
#      16 and later extends in bulk and leaves zero pages no WAL names: every
#      page it added after L is listed (with the truncation not lowering
#      it, the walk's growth was taken as dated and those pages missed);
#   6. a walk made when the WAL ends at a WAL switch: the insert position
#      then lies past the next segment's page header, which no record ends
#      before.  A walk dated its growth there, the follower (standing at the
#      switch's end) could not apply the WAL up to that date, and a backend's
#      cut took the growth whole although the WAL had dated it: a table
#      grown before a backup's start was listed for it from the size a walk
#      saw last (t/041 saw 72 of 177 pages listed, in 1 run of 10 or so).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use IPC::Run;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node init_lsn follower_pid);
use PtrackOracle qw(lsn_to_int block_counts pagemapset no_misses_ok page_lsns);
use PtrackSummaries qw(lsn_text describe_summaries summary_fork_limits);

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

# ---------------------------------------------------------------------------
# 4. A backend's cut takes the waiting growth whole
# ---------------------------------------------------------------------------
# Without data checksums and wal_log_hints, a free space map is never
# WAL-logged: only a walk sees it grow.  wal_writer_delay keeps an open
# transaction's WAL unflushed.

my $n2 = ptrack_node('walk_growth_cut', checksums => 0,
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\nwal_log_hints = off\nwal_writer_delay = 10s\n");
$n2->start;
$n2->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$n2->safe_psql('postgres', q{CREATE TABLE g (id int, pad text); CREATE TABLE other (id int)});
$n2->safe_psql('postgres', q{INSERT INTO g VALUES (0, 'one page, no free space map')});
init_lsn($n2);    # a walk: g is known, without a free space map
is($n2->safe_psql('postgres', q{SELECT pg_relation_size('g', 'fsm')}), '0', 'no free space map yet');
$n2->safe_psql('postgres', q{INSERT INTO g SELECT x, repeat('g', 300) FROM generate_series(1, 3000) x});
is($n2->safe_psql('postgres', q{SELECT pg_relation_size('g', 'fsm') > 0}), 't', 'the inserts made a free space map');
my $fsm = $n2->safe_psql('postgres',
	q{SELECT (SELECT dattablespace FROM pg_database WHERE datname = current_database()) || '/' ||
	  (SELECT oid FROM pg_database WHERE datname = current_database()) || '/' || pg_relation_filenode('g') || '/1'});
my $L = $n2->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');

# The follower pauses 3 s after its next batch; the call asks for a walk meanwhile, and an open
# transaction inserts WAL before the walk: the walk's date lies past the flushed WAL.
$n2->append_conf('postgresql.conf', 'ptrack.wal_batch_delay = 3000');
$n2->reload;
sleep 1;
$n2->safe_psql('postgres', 'INSERT INTO other VALUES (0)');    # a batch, then the pause
my @conn = ('-X', '-A', '-t', '-h', $n2->host, '-p', $n2->port, '-d', 'postgres');
my ($call_out, $call_err, $tx_out, $tx_err) = ('', '', '', '');
my $call = IPC::Run::start([ 'psql', @conn, '-c', "SELECT count(*) FROM ptrack_get_pagemapset('$L')" ],
	'>', \$call_out, '2>', \$call_err);
usleep(500_000);
my $tx = IPC::Run::start(
	[ 'psql', @conn, '-c', 'BEGIN; INSERT INTO other SELECT generate_series(1, 10); SELECT pg_sleep(8); COMMIT;' ],
	'>', \$tx_out, '2>', \$tx_err);
$call->finish;
is($call_err, '', 'the call succeeds while the transaction is open');
# The newest summary is the call's cut: nothing else cuts while the transaction's WAL is unflushed.
my @s = PtrackSummaries::summaries($n2->data_dir);
my @holding;
for my $sum (@s)
{
	my $limits = eval { summary_fork_limits($n2->data_dir, $sum->{name}) } // {};
	push @holding, $sum if defined $limits->{$fsm} && $limits->{$fsm} == 0;
}
ok(@holding > 0, "the summaries written for the call (up to " . lsn_text($s[-1]{end}) . ") hold the free space map $fsm "
	  . "from block 0 (holding it: " . describe_summaries(@holding) . '; all: ' . describe_summaries(@s) . ')');
$tx->finish;
$n2->append_conf('postgresql.conf', 'ptrack.wal_batch_delay = 0');
$n2->reload;
no_misses_ok($n2, $L, 'no block changed since the call\'s L is missed');

# ---------------------------------------------------------------------------
# 5. Truncated, then grown again with zero pages
# ---------------------------------------------------------------------------

$n2->safe_psql('postgres', q{CREATE TABLE tr (id int, pad text); INSERT INTO tr SELECT g, repeat('t', 1800) FROM generate_series(1, 4000) g});
$n2->safe_psql('postgres', 'DELETE FROM tr');
init_lsn($n2);    # applied and walked: the WAL dated tr's 1,000 pages
# No walk may see tr truncated before COPY grows it again (a walk that sees a file shorter lowers
# what the WAL dated too): all of it while the follower pauses after a batch.
$n2->append_conf('postgresql.conf', 'ptrack.wal_batch_delay = 3000');
$n2->reload;
sleep 1;
$n2->safe_psql('postgres', 'INSERT INTO other VALUES (0)');    # a batch, then the pause
$n2->safe_psql('postgres', 'VACUUM tr');
is($n2->safe_psql('postgres', q{SELECT pg_relation_size('tr')}), '0', 'VACUUM truncated tr to nothing');
# L5 a redo LSN: a summary starts there, after the truncation's (whose limit would list every page).
$n2->safe_psql('postgres', 'CHECKPOINT');
my $L5 = $n2->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
my $baseline5 = block_counts($n2->data_dir);
$n2->safe_psql('postgres', q{COPY tr (id) FROM PROGRAM 'seq 1 20000'});
$n2->append_conf('postgresql.conf', 'ptrack.wal_batch_delay = 0');
$n2->reload;
my $stats = no_misses_ok($n2, $L5, 'every page tr got again after its truncation is listed', baseline => $baseline5);
$n2->safe_psql('postgres', 'CHECKPOINT');
my $zero = grep { $_ == 0 } page_lsns($n2->data_dir, $n2->safe_psql('postgres', "SELECT pg_relation_filepath('tr')"));
note "tr: $stats->{extended} pages extended after L, $stats->{extended_listed} listed; $zero zero pages no WAL names";
ok($zero > 0, "COPY left $zero zero pages that no WAL names (bulk extension, 16 and later)")
  if $n2->safe_psql('postgres', 'SHOW server_version_num') >= 160000;
$n2->stop;

# ---------------------------------------------------------------------------
# 6. A walk when the WAL ends at a switch
# ---------------------------------------------------------------------------
# The follower is stopped from before the growth until after the switch; a checkpoint before the
# growth makes a save due, which the follower makes after its first batch (1,000 records, the
# save interval past), with the growth half applied: its walk sees the rest of it, while the WAL
# ends at the switch.  Without data checksums, the call inserts no WAL (no full-page image of a
# catalog page whose hint bits it sets) before its walk: the WAL still ends at the switch.

my $n3 = ptrack_node('walk_growth_switch', checksums => 0,
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\nwal_log_hints = off\n");
$n3->start;
$n3->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$n3->safe_psql('postgres', 'CREATE TABLE w (id int, n int); INSERT INTO w SELECT g, 0 FROM generate_series(1, 20000) g');
init_lsn($n3);    # a walk: w is known at its size now
my $w_path = $n3->safe_psql('postgres', "SELECT pg_relation_filepath('w')");
my $w_before = $n3->safe_psql('postgres', "SELECT pg_relation_size('w') / 8192");
my $fpid = follower_pid($n3);
kill 'STOP', $fpid;
$n3->safe_psql('postgres', 'CHECKPOINT');
$n3->safe_psql('postgres', 'UPDATE w SET n = n + 1');    # 20,000 new row versions: w about doubles
my $w_after = $n3->safe_psql('postgres', "SELECT pg_relation_size('w') / 8192");
$n3->safe_psql('postgres', 'CHECKPOINT');
my $R6 = $n3->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
my $switch_end = $n3->safe_psql('postgres', 'SELECT pg_switch_wal()');
sleep 1;
kill 'CONT', $fpid;
my $w_listed = pagemapset($n3, 'postgres', $R6)->{$w_path};
my @w_blocks = $w_listed ? @{ $w_listed->{blocks} } : ();
is(scalar @w_blocks, 0,
	"none of w's pages grown from $w_before to $w_after before the redo LSN $R6 is listed for it "
	  . "(WAL switch at $switch_end)")
  or diag("listed: @w_blocks; summaries: " . describe_summaries(PtrackSummaries::summaries($n3->data_dir)));
no_misses_ok($n3, $R6, 'no block changed since the redo LSN after the switch is missed');
$n3->stop;
done_testing();
