# Copyright (c) the ptrack authors
#
# 015_crash_windows.pl -- a crash loses no mark, and does not force a full
# backup, when the WAL proves what was lost (docs/design.md section 3.5).
#
# A saved map holds the marks made before the save; a crash loses those made
# after it, and recovery marks only the pages it writes again.  Replay skips
# a page whose on-disk LSN is already past the record (a record without a
# full-page image), so the hooks alone would miss it.  The hooks source reads
# the WAL after the map's covered LSN at startup; the wal source re-reads it
# with its follower.  Each case asserts, after the crash, that the map is
# trusted (no WARNING, ptrack_init_lsn() unchanged) and that the page-LSN
# oracle (t/lib/PtrackOracle.pm) finds no block changed since an L read
# before the lost changes that pagemapset(L) does not list.
#
# Cases (shared_buffers = 1MB, so that updated pages are written, and their
# marks made, before the crash; pgbench scale 3 is ~40 MB):
#   1. full_page_writes turned off after a checkpoint, an UPDATE, turned on
#      again, immediate stop (the issue's reproduction: 5,709 of 5,846
#      changed blocks were missed before the startup scan);
#   2. the map and its delta removed during the crash (a fresh map, hooks;
#      the wal source starts at its slot): the WAL since the redo LSN does
#      not name the zero pages relation extension added since, so tracking
#      starts one byte past the end of the WAL (design.md 3.8): a
#      pagemapset from the redo LSN is refused with the "full backup" hint,
#      and the oracle passes from the new ptrack_init_lsn();

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node ptrack_file log_position log_since not_trusted_re init_lsn);
use PtrackOracle qw(block_counts lsn_to_int no_misses_ok);

my $mode = capture_mode();
my $small = "autovacuum = off\nshared_buffers = 1MB\n";

sub crashed_ok
{
	my ($node, $off, $label) = @_;
	like(log_since($node, $off), qr/database system was interrupted/, "$label: the server went through crash recovery");
}

# ---- 1. full_page_writes off for a while, then a crash ----------------------

my $node = ptrack_node('fpw_toggle', conf => $small);
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->command_ok([ 'pgbench', '-i', '-q', '-s', '3', 'postgres' ], 'pgbench -i -s 3');
$node->safe_psql('postgres', 'CHECKPOINT');
my $init = init_lsn($node);
my $L = $node->lsn('insert');
my $baseline = block_counts($node->data_dir);
$node->safe_psql('postgres', 'ALTER SYSTEM SET full_page_writes = off');
$node->reload;
$node->safe_psql('postgres', "UPDATE pgbench_accounts SET filler = md5(aid::text) WHERE aid % 50 = 1");
$node->safe_psql('postgres', 'ALTER SYSTEM RESET full_page_writes');
$node->reload;
$node->safe_psql('postgres', "UPDATE pgbench_branches SET bbalance = bbalance + 1");
my $off = log_position($node);
$node->stop('immediate');
$node->start;
crashed_ok($node, $off, 'full_page_writes toggled');
my $log = log_since($node, $off);
unlike($log, not_trusted_re(), 'full_page_writes toggled, crash: the map is trusted');
like($log, qr/LOG:  ptrack marked the changes of \d+ WAL records from \S+ to \S+ after the map's covered LSN/,
	'full_page_writes toggled, crash: the startup scan read the WAL after the saved map')
  if $mode eq 'hooks';
is(init_lsn($node), $init, 'full_page_writes toggled, crash: ptrack_init_lsn() is unchanged');
$node->safe_psql('postgres', 'CHECKPOINT');
my $stats = no_misses_ok($node, $L, "full_page_writes toggled, crash: every block changed since $L is listed",
	baseline => $baseline);
cmp_ok($stats->{at_or_after} // 0, '>', 500,
	"full_page_writes toggled: the oracle saw the updated pages ($stats->{at_or_after} blocks changed since $L)");

# ---- 2. a fresh map after a crash starts at the end of the WAL -----------------

if ($mode eq 'hooks')
{
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $redo = $node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
	$baseline = block_counts($node->data_dir);
	$node->safe_psql('postgres', "UPDATE pgbench_accounts SET filler = md5(aid::text) WHERE aid % 40 = 3");
	$node->safe_psql('postgres', "CREATE TABLE fresh_t AS SELECT g AS id, repeat('x', 100) AS pad FROM generate_series(1, 20000) g");
	$off = log_position($node);
	$node->stop('immediate');
	unlink(ptrack_file($node->data_dir, $_)) for qw(ptrack.map ptrack.map.delta);
	$node->start;
	crashed_ok($node, $off, 'fresh map after a crash');
	$log = log_since($node, $off);
	like($log, qr/LOG:  ptrack marked the changes of \d+ WAL records from \S+ to \S+ since the redo LSN/,
		'fresh map after a crash: the startup scan read the WAL since the redo LSN');
	my $fresh = init_lsn($node);
	my ($wal_end) = $log =~ /LOG:  ptrack marked the changes of \d+ WAL records from \S+ to (\S+) since the redo LSN/;
	is(lsn_to_int($fresh), lsn_to_int($wal_end) + 1,
		"fresh map after a crash: ptrack_init_lsn() $fresh is one byte past the end of the WAL $wal_end");
	cmp_ok(lsn_to_int($fresh), '>', lsn_to_int($redo), "fresh map after a crash: it is after the redo LSN $redo");
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM public.ptrack_get_pagemapset('$redo'::pg_lsn)");
	isnt($ret, 0, 'fresh map after a crash: a pagemapset from the redo LSN is refused');
	like($err, qr/full backup/i, 'fresh map after a crash: the error says to take a full backup')
	  or diag("psql said: $err");
	my $restarted = block_counts($node->data_dir);
	$node->safe_psql('postgres', "UPDATE pgbench_accounts SET filler = md5(aid::text) WHERE aid % 40 = 7");
	$node->safe_psql('postgres', 'CHECKPOINT');
	$stats = no_misses_ok($node, $fresh, "fresh map after a crash: every block changed since $fresh is listed",
		baseline => $restarted);
	cmp_ok($stats->{at_or_after} // 0, '>', 300,
		"fresh map after a crash: the oracle saw the pages changed after it ($stats->{at_or_after} blocks)");
}

$node->stop;
done_testing();
