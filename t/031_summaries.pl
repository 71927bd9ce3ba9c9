# Copyright (c) the ptrack authors
#
# 031_summaries.pl -- wal capture only: the WAL follower writes its exact
# change set as summary files under pg_wal/ptrack (src/pg/persist/summary_io.h,
# docs/design.md sections 4.4-4.6), read here directly from their header layout
# (include/ptrack/summary_file.h):
#
#   1. summaries appear after a CHECKPOINT, each a whole file named after the
#      range its header holds, and the ranges chain without a hole from
#      ptrack_init_lsn() (where the follower's fresh set started);
#   2. a CHECKPOINT issued while pgbench keeps the follower busy: a summary
#      ends exactly at its redo LSN (pg_control_checkpoint()), with the
#      kSummaryEndsAtRedo flag, and the next one starts there; the same for a
#      CHECKPOINT on an idle server, where the follower stands exactly at the
#      redo LSN (the last record is moved to the later summary);
#   3. an immediate stop with changes only in memory: after the restart the
#      chain continues from the saved map's covered LSN + 1 (the end of the
#      summary cut at that save) with no overlap and no hole, a planted
#      summary that ends after that point and a planted .tmp are removed,
#      and no .tmp is left;
#   4. growth only a walk sees (a new free space map) is dated after the save
#      that found it; an immediate stop before any summary holds it: the sizes
#      saved with the map do not count it, so the restarted follower's walk
#      finds it again and a summary from the resume point on holds it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node init_lsn server_major follower_pid background_pgbench);
use PtrackOracle qw(lsn_to_int);
use PtrackSummaries qw(lsn_text chain_break describe_summaries summary_temp_files summary_forks_in);

plan skip_all => 'summaries are written by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

# Without data checksums (18's default is on): a free space map is then never WAL-logged (with
# them, its hint-bit changes log full-page images), so case 4 sees growth only a walk finds.
# A primary for case 6's standby (allows_streaming turns wal_log_hints on: off again, for the same reason).
my $node = ptrack_node('summaries', allows_streaming => 1, checksums => 0,
	conf => "autovacuum = off\ncheckpoint_timeout = 1h\nwal_log_hints = off\n");
$node->start;
my $pgdata = $node->data_dir;
our $dir = "$pgdata/pg_wal/ptrack";    # the node whose summaries are read (local for the standby's)

$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
my $init = init_lsn($node);    # waits for the follower

# Every summary file: [ { name, start, end, flags } ] sorted by start (t/lib/PtrackSummaries.pm:
# a consistent listing while the follower combines files); dies on a file whose header is not a
# summary or does not match its name.
sub summaries
{
	my @s = PtrackSummaries::summaries($dir =~ s{/pg_wal/ptrack$}{}r);    # $dir: the standby's in case 6
	die "$_->{name}: not a summary header matching its name" for grep { !$_->{valid} } @s;
	return @s;
}

# The fork records of a summary's body (t/lib/PtrackSummaries.pm).
sub summary_forks
{
	my ($name) = @_;
	return summary_forks_in("$dir/$name");
}

# The summaries (those $filter keeps, if given) that hold fork $rel with a limit at or below $limit.
sub with_limit
{
	my ($rel, $limit, $filter) = @_;
	$filter //= sub { @_ };
	# The follower may combine files between the listing and the reads: list again then.
	for (1 .. 50)
	{
		my ($vanished, @found) = (0);
		for my $s ($filter->(summaries()))
		{
			my @forks = eval { summary_forks($s->{name}) };
			if ($@)
			{
				die $@ unless $@ =~ /No such file or directory/;
				$vanished = 1;
				last;
			}
			push @found, $s if grep { $_->{rel} eq $rel && defined $_->{limit} && $_->{limit} <= $limit } @forks;
		}
		return @found unless $vanished;
	}
	die 'the summary files keep changing while read';
}

# A save happens after the follower applies the checkpoint record: wait for a summary ending past $lsn.
sub wait_for_summary_past
{
	my ($lsn, $what) = @_;
	for (1 .. 600)
	{
		my @s = summaries();
		return @s if @s && $s[-1]{end} > $lsn;
		usleep(100_000);
	}
	my @s = summaries();
	fail("$what: no summary ends after " . lsn_text($lsn) . ' (have: ' . describe_summaries(@s) . ')');
	return @s;
}

# ---------------------------------------------------------------------------
# 1. Summaries after CHECKPOINT, chained from ptrack_init_lsn()
# ---------------------------------------------------------------------------

$node->safe_psql('postgres',
	q{CREATE TABLE t (id int, pad text); INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g});
# The save after a checkpoint record cuts the summaries past that record.
sub checkpoint_lsn
{
	return lsn_to_int($node->safe_psql('postgres', 'SELECT checkpoint_lsn FROM pg_control_checkpoint()'));
}

$node->safe_psql('postgres', 'CHECKPOINT');
my @s = wait_for_summary_past(checkpoint_lsn(), 'first checkpoint');
ok(@s > 0, 'summaries appear after a CHECKPOINT: ' . describe_summaries(@s));
is($s[0]{start}, lsn_to_int($init), 'the first summary starts at ptrack_init_lsn() ' . $init);
is(chain_break(@s), '', 'the summaries chain without a hole or an overlap');

# ---------------------------------------------------------------------------
# 2. A summary ends at a checkpoint's redo LSN (busy, then idle)
# ---------------------------------------------------------------------------

$node->command_ok([ 'pgbench', '-i', '-q', '-s', '2', 'postgres' ], 'pgbench -i -s 2');
my $pgbench = background_pgbench($node, clients => 2, seconds => 8);
sleep 2;
$node->safe_psql('postgres', 'CHECKPOINT');
my $redo = lsn_to_int($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
$pgbench->finish;
@s = wait_for_summary_past($redo, 'busy checkpoint');
my ($at_redo) = grep { $_->{end} == $redo } @s;
ok(defined $at_redo, 'busy: a summary ends at the redo LSN ' . lsn_text($redo) . ' (have: ' . describe_summaries(@s) . ')');
is($at_redo->{flags} & 1, 1, 'busy: it carries the ends-at-redo flag') if defined $at_redo;
ok((grep { $_->{start} == $redo } @s), 'busy: the next summary starts at the redo LSN');
is(chain_break(@s), '', 'busy: the chain has no hole');

# Idle: the follower has applied everything when the checkpoint starts.
$node->safe_psql('postgres', 'UPDATE t SET id = id + 1 WHERE id % 100 = 0');
$node->poll_query_until('postgres',
	"SELECT follower_lsn >= pg_current_wal_lsn() FROM ptrack_status()")
  or note 'the follower did not catch up before the idle checkpoint';
$node->safe_psql('postgres', 'CHECKPOINT');
$redo = lsn_to_int($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
@s = wait_for_summary_past($redo, 'idle checkpoint');
($at_redo) = grep { $_->{end} == $redo } @s;
ok(defined $at_redo, 'idle: a summary ends at the redo LSN ' . lsn_text($redo) . ' (have: ' . describe_summaries(@s) . ')');
is(chain_break(@s), '', 'idle: the chain has no hole');

# ---------------------------------------------------------------------------
# 2b. A follower catching up cuts at every redo LSN it reads
# ---------------------------------------------------------------------------
# Stopped (SIGSTOP) while three checkpoints run, each after a few MB of WAL,
# the follower then reads their redo LSNs within milliseconds: each may be a
# backup's start (t/003's full backup follows a 1 GB load), so each must end a
# summary.  Before 17 only the last is learnt ahead (GetRedoRecPtr()); the
# others end a summary at the save after their checkpoint record.

my $fpid = follower_pid($node);
ok($fpid =~ /^\d+$/, "the WAL follower runs (PID $fpid)");
my @redos;
kill 'STOP', $fpid;
for my $round (1 .. 3)
{
	$node->safe_psql('postgres', "UPDATE t SET pad = repeat('c$round', 100)");
	$node->safe_psql('postgres', 'CHECKPOINT');
	push @redos, lsn_to_int($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
}
kill 'CONT', $fpid;
@s = wait_for_summary_past($redos[-1], 'catching up');
my @must = server_major() >= 17 ? @redos : ($redos[-1]);
my @missing = grep { my $r = $_; !grep { $_->{end} == $r && ($_->{flags} & 1) } @s } @must;
is(join(' ', map { lsn_text($_) } @missing), '',
	'catching up: a summary ends at each redo LSN ' . join(' ', map { lsn_text($_) } @must)
	  . ' (have: ' . describe_summaries(@s) . ')');
is(chain_break(@s), '', 'catching up: the chain has no hole');

# ---------------------------------------------------------------------------
# 3. Crash with changes in memory; planted leftovers
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', 'INSERT INTO t SELECT g, repeat(\'y\', 200) FROM generate_series(1, 5000) g');
$node->safe_psql('postgres', 'CHECKPOINT');
wait_for_summary_past(checkpoint_lsn(), 'checkpoint before the crash');
# Changes the follower records only in memory (no save follows them).
$node->safe_psql('postgres', 'UPDATE t SET pad = \'z\' WHERE id % 7 = 0');
$node->poll_query_until('postgres', "SELECT follower_lsn >= pg_current_wal_lsn() FROM ptrack_status()");
$node->stop('immediate');

# The covered LSN of the last save (ptrack.map's header is older when deltas followed it).
my @saves = slurp_file($node->logfile) =~ /ptrack map flush: \w+, .* complete up to ([0-9A-F]+\/[0-9A-F]+)/g;
my $covered = lsn_to_int($saves[-1]);
my @before = summaries();
is($before[-1]{end}, $covered + 1,
	'before the crash the summaries end at the map\'s covered LSN + 1 (' . lsn_text($covered + 1) . ')');
# Planted: a summary past the resume point (as if cut after the last save) and a .tmp.
my $planted = sprintf('%016X%016X.summary', $covered + 1, $covered + 4096);
{
	open(my $fh, '>', "$dir/$planted") or die $!;
	print $fh 'PTRKSUMM' . ("\0" x 88);
	close $fh;
	open($fh, '>', "$dir/0000000000000001000000000000FFFF.summary.tmp") or die $!;
	print $fh 'partial';
	close $fh;
}
$node->start;
init_lsn($node);
ok(!-e "$dir/$planted", 'a summary ending after the resume point is removed at start');
is(join(',', summary_temp_files($pgdata)), '', 'no .tmp left after the start');
$node->safe_psql('postgres', 'UPDATE t SET pad = \'w\' WHERE id % 11 = 0');
$node->safe_psql('postgres', 'CHECKPOINT');
@s = wait_for_summary_past(checkpoint_lsn(), 'after the crash');
# A cut at a save is no redo LSN: retention may have combined the files on both sides of it.
my ($next) = grep { $_->{start} <= $covered + 1 && $_->{end} > $covered + 1 } @s;
ok(defined $next, 'after the crash the chain continues at the covered LSN + 1 (have: ' . describe_summaries(@s) . ')');
is(chain_break(@s), '', 'after the crash: no hole, no overlap');
is($s[0]{start}, lsn_to_int($init), 'after the crash: the chain still starts at the first ptrack_init_lsn()');
is(join(',', summary_temp_files($pgdata)), '', 'no .tmp left');

# ---------------------------------------------------------------------------
# 4. Growth only a walk sees (a free space map, never WAL-logged), then a crash
#    before any summary holds it: the sizes saved with the map do not count
#    it, so the restarted follower's walk finds it again
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{CREATE TABLE g (id int, pad text); INSERT INTO g VALUES (0, 'one page, no free space map')});
$node->safe_psql('postgres', 'CHECKPOINT');
@s = wait_for_summary_past(checkpoint_lsn(), 'checkpoint before the free space map exists');
# The save walks the files after its cut: let it finish before the free space map appears.
my $saved = lsn_text($s[-1]{end} - 1);
$node->wait_for_log(qr/ptrack map flush: \w+, .* complete up to \Q$saved\E/);
is($node->safe_psql('postgres', q{SELECT pg_relation_size('g', 'fsm')}), '0', 'no free space map yet');
# Pages filling up make one: its file is created and extended without WAL.
$node->safe_psql('postgres', q{INSERT INTO g SELECT x, repeat('g', 300) FROM generate_series(1, 3000) x});
is($node->safe_psql('postgres', q{SELECT pg_relation_size('g', 'fsm') > 0}), 't', 'the inserts made a free space map');
my $fsm = $node->safe_psql('postgres',
	q{SELECT (CASE WHEN reltablespace = 0 THEN (SELECT dattablespace FROM pg_database WHERE datname = current_database()) ELSE reltablespace END) || '/' ||
	  (SELECT oid FROM pg_database WHERE datname = current_database()) || '/' || pg_relation_filenode('g') || '/1' FROM pg_class WHERE relname = 'g'});
my $log_before = -s $node->logfile;
$node->safe_psql('postgres', 'CHECKPOINT');    # its save walks the files: the growth is pending in memory
my $ckpt = checkpoint_lsn();
@s = wait_for_summary_past($ckpt, 'checkpoint after VACUUM');
my @holding = with_limit($fsm, 0);
is(describe_summaries(@holding), "", "before the crash no summary holds the free space map $fsm (it is dated after the last cut; checkpoint at " . lsn_text($ckpt) . ")");
$node->stop('immediate');
$covered = lsn_to_int((slurp_file($node->logfile) =~ /ptrack map flush: \w+, .* complete up to ([0-9A-F]+\/[0-9A-F]+)/g)[-1]);
$node->start;
init_lsn($node);
$node->safe_psql('postgres', 'CHECKPOINT');
@s = wait_for_summary_past(checkpoint_lsn(), 'checkpoint after the restart');
@holding = with_limit($fsm, 0, sub { grep { $_->{start} >= $covered + 1 } @_ });
ok(@holding > 0, "after the crash a summary from the resume point " . lsn_text($covered + 1)
	  . " on holds the free space map $fsm from block 0 (summaries: " . describe_summaries(@s) . ')');
is(chain_break(@s), '', 'and the chain has no hole');

# ---------------------------------------------------------------------------
# 5. A summary that cannot be written: the follower stops applying the WAL
#    (the slot keeps it), retries, and once it can write again nothing is
#    missing from the chain
# ---------------------------------------------------------------------------

chmod(0500, $dir) or die "chmod $dir: $!";
my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{CREATE TABLE blocked (id int); INSERT INTO blocked VALUES (1)});
my $blocked = $node->safe_psql('postgres',
	q{SELECT (SELECT dattablespace FROM pg_database WHERE datname = current_database()) || '/' ||
	  (SELECT oid FROM pg_database WHERE datname = current_database()) || '/' || pg_relation_filenode('blocked') || '/0'});
$node->safe_psql('postgres', 'CHECKPOINT');
$ckpt = checkpoint_lsn();
$node->wait_for_log(qr/WARNING:  ptrack could not save its change summary: could not create file/, $offset);
pass('a summary that cannot be written is a WARNING');
my $applied = lsn_to_int($node->safe_psql('postgres', 'SELECT follower_lsn FROM ptrack_status()'));
ok($applied <= $ckpt, 'the follower stops applying the WAL meanwhile (applied ' . lsn_text($applied)
	  . ', checkpoint at ' . lsn_text($ckpt) . ')');
chmod(0700, $dir) or die "chmod $dir: $!";
@s = wait_for_summary_past($ckpt, 'once the summary can be written');
is(chain_break(@s), '', 'the chain has no hole after the failed writes');
ok(scalar(with_limit($blocked, 0)) > 0, "the relation created meanwhile ($blocked) is in a summary");
is(join(",", summary_temp_files($pgdata)), '', 'no .tmp left by the failed writes');

# ---------------------------------------------------------------------------
# 6. A standby: a base backup carries no summary; the standby's follower
#    writes its own chain from its ptrack_init_lsn(), cut on 17 and later at
#    the redo LSN of a checkpoint the primary made (the CHECKPOINT_REDO record
#    it replays; on 15 the redo LSN is learnt too late, the cut after the
#    checkpoint record is the fallback)
# ---------------------------------------------------------------------------

$node->backup('for_standby');
ok(!-e $node->backup_dir . '/for_standby/pg_wal/ptrack/' || !glob($node->backup_dir . '/for_standby/pg_wal/ptrack/*'),
	'the base backup carries no summary');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'for_standby', has_streaming => 1);
$standby->append_conf('postgresql.conf', "checkpoint_timeout = 1h\n");
$standby->start;
$node->wait_for_catchup($standby);
my $sb_init = lsn_to_int(init_lsn($standby));
$node->safe_psql('postgres', 'UPDATE t SET pad = \'s\' WHERE id % 13 = 0');
$node->safe_psql('postgres', 'CHECKPOINT');
my $primary_redo = lsn_to_int($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
$node->safe_psql('postgres', 'UPDATE t SET pad = \'u\' WHERE id % 17 = 0');
$node->safe_psql('postgres', 'CHECKPOINT');
my $primary_ckpt = checkpoint_lsn();
$node->wait_for_catchup($standby);
{
	local $dir = $standby->data_dir . '/pg_wal/ptrack';
	@s = wait_for_summary_past($primary_ckpt, 'standby');
	is($s[0]{start}, $sb_init, 'standby: its chain starts at its ptrack_init_lsn() ' . lsn_text($sb_init));
	is(chain_break(@s), '', 'standby: the chain has no hole');
  SKIP:
	{
		skip 'no CHECKPOINT_REDO record before PostgreSQL 17', 1 if server_major() < 17;
		ok((grep { $_->{end} == $primary_redo && ($_->{flags} & 1) } @s),
			'standby: a summary ends at the primary checkpoint\'s redo LSN ' . lsn_text($primary_redo)
			  . ' (have: ' . describe_summaries(@s) . ')');
	}
}
$standby->stop;

$node->stop;
done_testing();
