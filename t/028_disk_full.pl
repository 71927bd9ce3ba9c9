# Copyright (c) the ptrack authors
#
# 028_disk_full.pl -- the map cannot be saved for lack of space (issue 18,
# items 4 and "disk full" of the standing adversarial tests).
#
# A full disk is simulated without privileges by the file size limit
# (RLIMIT_FSIZE, `ulimit -f`): the postmaster ignores SIGXFSZ "so that ulimit
# violations work like disk full" (postmaster.c), and a write past the limit
# fails with EFBIG after a short write, exactly the failing-write path of a
# full disk.  The cluster has 1 MB WAL segments and small relations, so the
# map file (8 MB map, a little more on disk) is the only file that outgrows
# the 4 MB limit.
#
#   1. the node runs without a limit: a map is saved; L0 and a baseline are
#      taken;
#   2. restarted under the limit, with a workload and checkpoints: every
#      save of the whole map fails.  The server keeps running and
#      checkpointing, the WARNING names ptrack, the map and the file and says
#      why (File too large), ptrack_status() counts failed saves, no partial
#      ptrack.map.tmp stays in the data directory (before the fix it stayed,
#      4 MB of a map, until a save succeeded), and the page-LSN oracle finds
#      every block changed since L0 listed;
#   3. stopped (the shutdown save fails too) and started without the limit:
#      either tracking goes on (wal: the slot kept the WAL since the last
#      good save) and the oracle still finds nothing missed since L0, or the
#      map is refused (hooks: the saved map predates the checkpoint recovery
#      starts from) with a fresh ptrack_init_lsn() after L0, and a call from
#      L0 fails.  Never silently short.
#
# Hooks only: with wal capture the map keeps only the follower's resume
# point, a few KB whatever ptrack.map_size says (docs/design.md section 4.6),
# and never outgrows the limit; the summaries' own write failures (the
# directory unwritable, counted as failed saves, nothing lost) are
# t/034_summary_failures.pl's.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node ptrack_file init_lsn log_position log_since not_trusted_re);
use PtrackOracle qw(block_counts lsn_to_int no_misses_ok);

plan skip_all => 'wal capture saves a map of a few KB (t/034 covers its summaries\' write failures)'
  unless capture_mode() eq 'hooks';

my $limit_bytes = 4 * 1024 * 1024;

my $node = ptrack_node(
	'disk_full',
	map_size => '8MB',
	extra => ['--wal-segsize=1'],
	conf => "autovacuum = off\nlog_checkpoints = on\nmin_wal_size = 4MB\nmax_wal_size = 32MB\n");
my $pgdata = $node->data_dir;
note 'capture source: ' . capture_mode();

# Runs $code with this process's soft RLIMIT_FSIZE at $bytes ('unlimited' to
# lift it): what the server started meanwhile inherits it.
sub with_file_size_limit
{
	my ($bytes, $code) = @_;
	my $before = `prlimit --pid $$ --fsize --output SOFT --noheadings`;
	chomp $before;
	$before =~ s/^\s+|\s+$//g;
	system('prlimit', '--pid', $$, "--fsize=$bytes:") == 0
	  or BAIL_OUT("prlimit --fsize=$bytes: failed");
	$code->();
	system('prlimit', '--pid', $$, "--fsize=$before:") == 0
	  or BAIL_OUT("prlimit --fsize=$before: failed");
	return;
}

# The file size limit of the running postmaster, from /proc.
sub postmaster_fsize
{
	my $pid = $node->safe_psql('postgres', "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'");
	my $limits = slurp_file("/proc/$pid/limits");
	return $limits =~ /^Max file size\s+(\S+)/m ? $1 : '?';
}

sub temp_files
{
	opendir(my $dh, $pgdata) or die "opendir $pgdata: $!";
	my @files = sort grep { /^ptrack\.map\.tmp$|^ptrack\..*\.tmp$/ } readdir $dh;
	closedir $dh;
	return map { "$_ (" . (-s "$pgdata/$_" // 0) . ' bytes)' } @files;
}

# ---- 1. without a limit -----------------------------------------------------------

$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION ptrack;
CREATE TABLE t1 (id int PRIMARY KEY, v int, pad text);
INSERT INTO t1 SELECT g, 0, repeat('x', 100) FROM generate_series(1, 5000) g;
CHECKPOINT;
});
$node->poll_query_until('postgres', 'SELECT saves > 0 FROM ptrack_status')
  or die 'no save without a limit';
my $L0 = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
my $init0 = init_lsn($node);
$node->stop;
ok(-s ptrack_file($pgdata, 'ptrack.map') > $limit_bytes,
	'the saved map is larger than the limit: ' . (-s ptrack_file($pgdata, 'ptrack.map')) . " bytes > $limit_bytes");

# ---- 2. under the limit -------------------------------------------------------------

my $log_at = log_position($node);
with_file_size_limit($limit_bytes, sub { $node->start });
is(postmaster_fsize(), $limit_bytes, "the server runs with a file size limit of $limit_bytes bytes");
my $baseline = block_counts($pgdata);
$node->safe_psql('postgres', q{
UPDATE t1 SET v = v + 1 WHERE id % 7 = 0;
INSERT INTO t1 SELECT g, 1, repeat('y', 100) FROM generate_series(5001, 7000) g;
CREATE TABLE t2 AS SELECT g AS id, md5(g::text) AS t FROM generate_series(1, 3000) g;
CHECKPOINT;
});
my $warning_re =
  qr/WARNING:  ptrack could not save its map: could not write file "ptrack\.map\.tmp": File too large/;
my $logged = 0;
for (1 .. 180)
{
	last if $logged = log_since($node, $log_at) =~ $warning_re;
	sleep 1;
}
ok($logged, 'the failed save is a WARNING naming the map, the file and the cause')
  or diag 'log since the start under the limit:' . "\n" . log_since($node, $log_at);
my ($warning) = log_since($node, $log_at) =~ /^(.*$warning_re.*\n(?:.*DETAIL:.*\n)?(?:.*HINT:.*\n)?)/m;
note "what the server logged:\n" . ($warning // '(nothing)');

# The failed save removes its partial file before it returns.
my @left;
for (1 .. 30)
{
	@left = temp_files();
	last unless @left;
	sleep 1;
}
is("@left", '', 'no partial temporary file of ptrack stays after the failed save');

is($node->safe_psql('postgres', 'SELECT 1'), '1', 'the server keeps running');
$node->safe_psql('postgres', 'UPDATE t1 SET v = v + 1 WHERE id % 11 = 0; CHECKPOINT');
is($node->safe_psql('postgres', 'SELECT failed_saves > 0 FROM ptrack_status'), 't',
	'ptrack_status counts the failed saves');
note 'ptrack_status: ' . $node->safe_psql('postgres',
	'SELECT saves, failed_saves, last_save_lsn FROM ptrack_status');
is("@{[ temp_files() ]}", '', 'no temporary file after a second checkpoint either');
my $st = no_misses_ok($node, $L0, 'under the limit: every block changed since L0 is listed',
	baseline => $baseline, quiet => 1);
note "oracle: $st->{at_or_after} blocks with a page LSN >= L0 and $st->{extended} extended since, "
  . "of $st->{blocks} checked";
cmp_ok($st->{at_or_after} + $st->{extended}, '>', 100, '... and the oracle saw the changes (premise)');

# ---- 3. restarted without the limit -------------------------------------------------

$node->stop;
is("@{[ temp_files() ]}", '', 'no temporary file after the shutdown save failed');
$log_at = log_position($node);
$node->start;
my $init1 = init_lsn($node);
if ($init1 eq $init0)
{
	note "restarted: tracking goes on, ptrack_init_lsn() is still $init0";
	my $after = no_misses_ok($node, $L0, 'after the restart: every block changed since L0 is listed',
		baseline => $baseline, quiet => 1);
	cmp_ok($after->{at_or_after} + $after->{extended}, '>', 100, '... and the oracle saw the changes (premise)');
}
else
{
	my $log = log_since($node, $log_at);
	note "restarted: tracking restarted at $init1 (was $init0)";
	cmp_ok(lsn_to_int($init1), '>', lsn_to_int($L0), 'the fresh ptrack_init_lsn() is after L0');
	like($log, qr/${\ not_trusted_re()}|ptrack restarted change tracking/, '... with a WARNING saying so');
	my ($rc, $out, $err) = $node->psql('postgres',
		"SELECT count(*) FROM public.ptrack_get_pagemapset('$L0'::pg_lsn)");
	isnt($rc, 0, 'a call from L0 fails instead of answering short');
	like($err, qr/ERROR:.*ptrack_init_lsn/, '... naming ptrack_init_lsn()') or diag $err;
}
is($init1, $init0, 'wal capture keeps tracking across the restart (the slot kept the WAL since the last good save)')
  if capture_mode() eq 'wal';

$node->stop;
done_testing();
