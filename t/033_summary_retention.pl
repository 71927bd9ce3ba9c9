# Copyright (c) the ptrack authors
#
# 033_summary_retention.pl -- wal capture only: the WAL follower's retention
# pass over its summary files (src/pg/persist/summary_retention.cpp, the
# policy in include/ptrack/retention_plan.h, docs/design.md section 4.9), seen
# on disk through the files' headers (t/lib/PtrackSummaries.pm):
#
#   1. cuts that are not redo LSNs are combined away: after checkpoints with
#      changes between (each cuts at its redo LSN and again at the follower's
#      map save), only the open run after the last redo LSN keeps such
#      boundaries, every redo LSN is still a boundary, and the chain starts
#      at ptrack_init_lsn() without a hole;
#   2. more files than ptrack.wal_summary_max_files (8 here): the older half
#      is combined across redo LSNs, the newest redo LSNs stay boundaries,
#      the chain is whole and still starts where it did;
#   3. expiry (ptrack.wal_summary_keep_time = 1h, the two oldest files
#      backdated with touch -d): exactly those two go, the chain stays whole
#      from the third; ptrack_init_lsn() follows, an older start is refused
#      ("take a full backup") and the new oldest start is answered; then,
#      with every file backdated and no save since the follower's resume
#      point, the file ending at it and the later ones stay, and a crash
#      does not restart tracking;
#   4. a crash while combining (simulated on disk, then an immediate stop):
#      files planted inside a valid file's range are removed, a damaged
#      combined file whose inputs are all there is removed, the rest stays;
#   5. strays (include/ptrack/summary_chain.h): two files with summary names
#      whose ranges overlap two files of the chain without fitting it, one
#      with a header that is no summary's, one that passes every check (the
#      second file's body, its header rewritten to a range starting inside
#      the first): once behind the follower's resume point both are removed
#      with a WARNING naming them; the chain's files stay (the valid one must
#      not be taken for a combined file and replace the second), the chain
#      is whole and starts where it did.
#
# The checks of a whole chain wait for a listing without a break: a CI run
# at load 15 listed the directory between a combining pass's new file and
# the removal of the files it combined, and "no hole after expiry" failed
# on that overlap.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node init_lsn log_position log_since);
use PtrackOracle qw(lsn_to_int);
use PtrackSummaries qw(summary_dir summaries chain_break describe_summaries lsn_text summary_name copy_summary_as);

plan skip_all => 'summaries are written by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

my $node = ptrack_node('retention', conf => "autovacuum = off\ncheckpoint_timeout = 1h\n");
$node->start;
my $pgdata = $node->data_dir;
my $dir = summary_dir($pgdata);

$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
my $init = lsn_to_int(init_lsn($node));    # waits for the follower
$node->safe_psql('postgres',
	q{CREATE TABLE t (id int, pad text); INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g});

# Changes, a CHECKPOINT, and the summaries it makes (the cut at its redo LSN,
# then the one at the follower's save after the checkpoint record): returns
# the redo LSN.
my $round = 0;
sub checkpoint_with_changes
{
	$round++;
	$node->safe_psql('postgres', "UPDATE t SET pad = 'r$round' WHERE id % 50 = $round % 50");
	# A redo LSN within 200 ms of the last one cut at is let go (note_redo() in
	# capture_wal.cpp: a checkpoint storm): these checkpoints are further apart.
	usleep(250_000);
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $redo = lsn_to_int($node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()'));
	for (1 .. 600)
	{
		my @s = summaries($pgdata);
		return $redo if @s && $s[-1]{end} > $redo;
		usleep(100_000);
	}
	fail("no summary ends after the redo LSN " . lsn_text($redo));
	return $redo;
}

# Waits (up to 60 s) until `$ok->(@summaries)` holds; returns the last listing.
sub wait_for_files
{
	my ($ok) = @_;
	my @s;
	for (1 .. 600)
	{
		@s = summaries($pgdata);
		return @s if $ok->(@s);
		usleep(100_000);
	}
	return @s;
}

# wait_for_files() for a listing that also has no hole and no overlap.  A
# retention pass writes a combined file before it removes the files it
# combined, so a listing taken in between holds both: the chain looks broken
# for a moment, which is not what the checks after these waits are about.
sub wait_for_chain
{
	my ($ok) = @_;
	return wait_for_files(sub { $ok->(@_) && chain_break(@_) eq '' });
}

# Files before the open run (the newest files after the last redo boundary) that do not end at a redo LSN.
sub closed_cuts
{
	my @s = @_;
	my $last_redo = -1;
	for my $i (0 .. $#s) { $last_redo = $i if $s[$i]{flags} & 1; }
	return grep { !($s[$_]{flags} & 1) } 0 .. $last_redo;
}

sub boundaries { my %e = map { $_->{end} => 1 } @_; return \%e; }

sub reload_with
{
	my ($setting) = @_;
	$node->safe_psql('postgres', "ALTER SYSTEM $setting");
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	usleep(500_000);    # the follower reads the configuration between two waits
}

# ---------------------------------------------------------------------------
# 1. Cuts that are not redo LSNs are combined away
# ---------------------------------------------------------------------------

my @redo;
push @redo, checkpoint_with_changes() for 1 .. 12;
my @s = wait_for_chain(sub { !closed_cuts(@_) });
is(scalar(closed_cuts(@s)), 0,
	'only redo LSNs are boundaries before the open run (have: ' . describe_summaries(@s) . ')');
ok(@s <= scalar(@redo) + 3, scalar(@s) . ' files for ' . scalar(@redo) . ' checkpoints');
my $ends = boundaries(@s);
is(join(' ', map { lsn_text($_) } grep { !$ends->{$_} } @redo), '', 'every redo LSN is still a boundary');
is(chain_break(@s), '', 'the chain has no hole');
is($s[0]{start}, $init, 'the chain starts at ptrack_init_lsn() ' . lsn_text($init));
is(scalar(grep { !$_->{valid} } @s), 0, 'every file has a valid header');

# ---------------------------------------------------------------------------
# 2. More files than ptrack.wal_summary_max_files
# ---------------------------------------------------------------------------

reload_with('SET ptrack.wal_summary_max_files = 8');
push @redo, checkpoint_with_changes() for 1 .. 6;
@s = wait_for_chain(sub { @_ <= 8 });
ok(@s <= 8, 'at most 8 files (have ' . scalar(@s) . ': ' . describe_summaries(@s) . ')');
$ends = boundaries(@s);
my @newest = @redo[ -3 .. -1 ];
is(join(' ', map { lsn_text($_) } grep { !$ends->{$_} } @newest), '',
	'the newest redo LSNs are still boundaries (' . join(' ', map { lsn_text($_) } @newest) . ')');
ok((grep { !$ends->{$_} } @redo[ 0 .. 11 ]) > 0, 'old redo boundaries were combined away');
is(chain_break(@s), '', 'the chain has no hole');
is($s[0]{start}, $init, 'the chain still starts at ptrack_init_lsn()');
reload_with('RESET ptrack.wal_summary_max_files');

# ---------------------------------------------------------------------------
# 3. Expiry
# ---------------------------------------------------------------------------

reload_with("SET ptrack.wal_summary_keep_time = '1h'");
@s = summaries($pgdata);
ok(@s >= 4, 'at least four files to expire two of');
my @old = @s[ 0, 1 ];
my $third = $s[2];
# Backdated as if written 3 hours ago (mtime: when the summary's end was written).
system('touch', '-m', '-d', '3 hours ago', map { "$dir/$_->{name}" } @old) == 0 or die "touch: $?";
my $offset = log_position($node);
checkpoint_with_changes();    # a new summary: a retention pass follows at once
@s = wait_for_chain(sub { @_ && $_[0]{start} == $third->{start} });
is($s[0]{name}, $third->{name}, 'the two backdated files are removed, the third is the oldest (have: '
	  . describe_summaries(@s) . ')');
ok(!-e "$dir/$old[0]{name}" && !-e "$dir/$old[1]{name}", 'both expired files are gone');
is(chain_break(@s), '', 'no hole after expiry');
like(log_since($node, $offset), qr/ptrack removed 2 summary files older than ptrack.wal_summary_keep_time/,
	'the expiry is logged');
is(lsn_to_int(init_lsn($node)), $third->{start}, 'ptrack_init_lsn() is the oldest summary\'s start');
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT count(*) FROM ptrack_get_pagemapset('" . lsn_text($old[1]{start}) . "')");
like($err, qr/full backup/, 'a start LSN in an expired summary is refused: ' . $err);
($rc, $out, $err) = $node->psql('postgres',
	"SELECT count(*) > 0 FROM ptrack_get_pagemapset('" . lsn_text($third->{start}) . "')");
is($err, '', 'the oldest kept start LSN is answered');

# 3b. Expiry keeps the file ending at the resume point (the last save's
# covered LSN + 1) and every later one: calls cut files, no save moves the
# resume point, every file is backdated, then a crash.  Before the fix the
# expiry removed all but the newest, and the restart found no chain ending
# at the resume point: "ptrack restarted change tracking".
my ($saves, $save_lsn) =
  split(/\|/, $node->safe_psql('postgres', 'SELECT saves, last_save_lsn FROM ptrack_status'));
my $resume = lsn_to_int($save_lsn) + 1;
for my $i (1 .. 2)
{
	$node->safe_psql('postgres', "UPDATE t SET pad = 'call$i' WHERE id % 50 = 7");
	$node->safe_psql('postgres',
		"SELECT count(*) FROM ptrack_get_pagemapset('" . lsn_text($third->{start}) . "')");
}
@s = summaries($pgdata);
ok((grep { $_->{end} == $resume } @s) && (grep { $_->{end} < $resume } @s) && $s[-1]{end} > $resume,
	'files end before, at and after the resume point ' . lsn_text($resume) . ' (have: ' . describe_summaries(@s) . ')');
system('touch', '-m', '-d', '3 hours ago', map { "$dir/$_->{name}" } @s) == 0 or die "touch: $?";
$offset = log_position($node);
$node->safe_psql('postgres', "UPDATE t SET pad = 'call3' WHERE id % 50 = 7");
# The call only cuts: its start LSN is one the expiry keeps, whether the
# follower's retention pass comes before the call or after it.
$node->safe_psql('postgres', "SELECT count(*) FROM ptrack_get_pagemapset('" . lsn_text($resume) . "')");
my @kept = wait_for_files(sub { @_ && $_[0]{end} >= $resume });
is($node->safe_psql('postgres', 'SELECT saves FROM ptrack_status'), $saves, 'no save since: the resume point stayed');
is($kept[0]{end}, $resume, 'expiry removed the files ending before the resume point and kept the one ending at it (have: '
	  . describe_summaries(@kept) . ')');
is(join(' ', grep { !-e "$dir/$_->{name}" } grep { $_->{end} > $resume } @s), '',
	'every backdated file after the resume point stays');
like(log_since($node, $offset), qr/ptrack removed \d+ summary files? older than ptrack.wal_summary_keep_time/,
	'the expiry is logged');
my $init_before = init_lsn($node);
$node->stop('immediate');
$offset = log_position($node);
$node->start;
is(init_lsn($node), $init_before, 'after a crash ptrack_init_lsn() is unchanged (' . $init_before . ')');
unlike(log_since($node, $offset), qr/ptrack restarted change tracking/, 'after a crash tracking did not restart');
reload_with('RESET ptrack.wal_summary_keep_time');

# ---------------------------------------------------------------------------
# 4. A crash while combining, simulated on disk
# ---------------------------------------------------------------------------

checkpoint_with_changes();
checkpoint_with_changes();
@s = wait_for_chain(sub { !closed_cuts(@_) });
$node->stop('immediate');
@s = summaries($pgdata);
# (a) a valid file, and what its inputs were: two files inside its range.
my ($h) = grep { $s[$_]{end} - $s[$_]{start} >= 2 } 0 .. $#s - 2;
my $holder = $s[$h];
my $mid = $holder->{start} + int(($holder->{end} - $holder->{start}) / 2);
my @inside = (summary_name($holder->{start}, $mid), summary_name($mid, $holder->{end}));
# (b) the two files after it, and a damaged file said to combine them.
my ($x, $y) = @s[ $h + 1, $h + 2 ];
my $damaged = summary_name($x->{start}, $y->{end});
for my $name (@inside, $damaged)
{
	open(my $fh, '>', "$dir/$name") or die "$name: $!";
	print $fh 'PTRKSUMM' . ("\0" x 200);
	close $fh;
}
$offset = log_position($node);
$node->start;
init_lsn($node);
my @after = wait_for_files(sub { !(grep { -e "$dir/$_" } @inside, $damaged) });
is(join(' ', grep { -e "$dir/$_" } @inside), '', 'the files inside a valid file\'s range are removed');
ok(-e "$dir/$holder->{name}", 'the valid file that holds them stays');
ok(!-e "$dir/$damaged", 'the damaged combined file is removed');
ok(-e "$dir/$x->{name}" && -e "$dir/$y->{name}", 'the files it combined stay');
is(chain_break(@after), '', 'the chain is whole again (have: ' . describe_summaries(@after) . ')');
is($after[0]{start}, $s[0]{start}, 'and starts where it did');
my $log = log_since($node, $offset);
like($log, qr/ptrack removed 2 summary files that ".*" holds/, 'the removal of the inside files is logged');
like($log, qr/ptrack removed the damaged summary file/, 'the removal of the damaged file is logged');

# ---------------------------------------------------------------------------
# 5. Strays: files off the chain
# ---------------------------------------------------------------------------

@s = summaries($pgdata);
ok(@s >= 3, 'at least three files: ' . describe_summaries(@s));
# Two adjacent files of the chain, not the newest (strays behind the resume point go).
my ($first, $second) = @s[ 0, 1 ];
my $stray_start = $first->{start} + int(($first->{end} - $first->{start}) / 2);
my $garbage = summary_name($stray_start, $second->{start} + int(($second->{end} - $second->{start}) / 2));
{
	open(my $fh, '>', "$dir/$garbage") or die "$garbage: $!";
	print $fh 'PTRKSUMM' . ("\0" x 200);
	close $fh;
}
my $posing = copy_summary_as($pgdata, $second->{name}, $stray_start, $second->{end});
my @strays = ($garbage, $posing);
note "strays planted: @strays over $first->{name} and $second->{name}";
$offset = log_position($node);
checkpoint_with_changes();    # a save moves the resume point past them; a new summary: a retention pass
@after = wait_for_files(sub { my %listed = map { $_->{name} => 1 } @_; !(grep { $listed{$_} } @strays) });
is(join(' ', grep { -e "$dir/$_" } @strays), '', 'strays: both are removed');
ok(-e "$dir/$first->{name}" && -e "$dir/$second->{name}",
	'strays: the files of the chain they overlap stay (have: ' . describe_summaries(@after) . ')');
is(chain_break(@after), '', 'strays: the chain is whole');
is($after[0]{start}, $s[0]{start}, 'strays: and starts where it did');
is(scalar(grep { !$_->{valid} } @after), 0, 'strays: every file left has a valid header');
$log = log_since($node, $offset);
foreach my $stray (@strays)
{
	like($log, qr/WARNING:  ptrack removed "pg_wal\/ptrack\/\Q$stray\E": it is not part of the chain/,
		"strays: the removal of $stray is logged");
}

$node->stop;
done_testing();
