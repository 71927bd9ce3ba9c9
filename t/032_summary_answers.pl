# Copyright (c) the ptrack authors
#
# 032_summary_answers.pl -- wal capture only: ptrack_get_pagemapset(L)
# answers from the change summaries under pg_wal/ptrack
# (src/pg/sql/summary_scan.cpp, docs/design.md section 4.8), and refuses,
# never answers short, when one it needs is damaged or missing:
#
#   1. three rounds of changes A, B, C after L0, L1, L2, each round ended by a
#      call (each call has the follower cut a summary): every answer lists
#      what it must;
#   2. a damaged summary (one byte flipped), the one holding change B:
#      pagemapset(L0) and (L1) refuse naming the file, (L2) still answers;
#      the follower keeps running, tracking does not restart, no file is
#      removed; with the byte restored, (L1) answers again;
#   3. the same summary missing: (L0) and (L1) refuse naming the missing
#      range, (L2) answers, ptrack_init_lsn() moves past the hole;
#   4. the summaries before it removed (as retention would): (L0) refuses as
#      older than ptrack_init_lsn(), which is now the oldest summary's start;
#      (L1) answers;
#   5. growth without WAL found by the walk before an answer, while another
#      session inserts WAL that is not flushed at once: the walk dates the
#      growth past what the follower has applied, and the call's summary must
#      hold it all the same (the follower records it in its set at once; the
#      call waits for a summary that ends past the WAL position after the
#      walk: wal_summaries() in src/pg/capture/wal/capture_wal.cpp).  Several
#      rounds;
#   6. strays: two files with summary names whose ranges overlap two files of
#      the chain without fitting it, one with a header that is no summary's,
#      one that passes every check of the reader (another file's body, its
#      header rewritten to the stray's range): every L the chain holds is
#      still answered, from the chain's files (an L where the stray starts
#      lists the change the chain's file holds, which the stray's content
#      lacks), each call names both strays in a WARNING, ptrack_init_lsn()
#      does not move (src/pg/sql/summary_scan.cpp, include/ptrack/summary_chain.h).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use File::Copy qw(copy);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node log_position log_since init_lsn);
use PtrackOracle qw(lsn_to_int int_to_lsn pagemapset);
use PtrackSummaries qw(copy_summary_as summary_name);
use PtrackUnits qw(BLCKSZ);

plan skip_all => 'change summaries are written by the WAL follower (wal capture only)'
  unless capture_mode() eq 'wal';

my $node = ptrack_node('summary_answers', conf => "autovacuum = off\n");
$node->start;
my $pgdata = $node->data_dir;
my $sumdir = "$pgdata/pg_wal/ptrack";

$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
is($node->safe_psql('postgres', 'SELECT map_fill IS NULL FROM ptrack_status()'), 't',
	'the map holds no marks: answers come from the summaries');

# The summary files, sorted by start: [ { name, start, end } ].
sub summaries
{
	opendir(my $dh, $sumdir) or return ();
	my @out;
	foreach my $name (sort readdir $dh)
	{
		next unless $name =~ /^([0-9A-F]{16})([0-9A-F]{16})\.summary$/;
		push @out, { name => $name, start => hex($1), end => hex($2) };
	}
	closedir $dh;
	return @out;
}

sub lsn { return $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()'); }

# The block of a row of table $t (by id), and the table's path.
sub where_is
{
	my ($t, $id) = @_;
	my $path = $node->safe_psql('postgres', "SELECT pg_relation_filepath('$t')");
	my $block = $node->safe_psql('postgres', "SELECT (ctid::text::point)[0]::int FROM $t WHERE id = $id");
	return ($path, $block);
}

sub listed
{
	my ($map, $path, $block) = @_;
	return $map->{$path} && grep { $_ == $block } @{ $map->{$path}{blocks} };
}

$node->safe_psql('postgres',
	q{CREATE TABLE t (id int, pad text);
	  INSERT INTO t SELECT g, repeat('x', 500) FROM generate_series(1, 3000) g;
	  CHECKPOINT});

# --- 1. three rounds of changes, each ended by a call (a cut) -----------------
# The cases below need a summary that holds L_B and ends before L_C, with
# older ones before it.  The calls' cuts make that layout, but the follower
# may combine them (only redo LSNs are kept boundaries: docs/design.md 4.9)
# or cut elsewhere meanwhile, so the rounds run again (on other rows) until
# the summaries have it, at most five times.
my %L;
my %changed;    # round => [path, block]
my (@files, $fb);
for my $attempt (0 .. 4)
{
	foreach my $round ([ 'A', 100 ], [ 'B', 1500 ], [ 'C', 2900 ])
	{
		my ($name, $id) = @$round;
		$id += 10 * $attempt;
		$L{$name} = lsn();
		$node->safe_psql('postgres', "UPDATE t SET pad = 'changed $name' WHERE id = $id");
		$changed{$name} = [ where_is('t', $id) ];
		my $map = pagemapset($node, 'postgres', $L{$name});
		ok(listed($map, @{ $changed{$name} }),
			"round $name: the block changed after $L{$name} is listed ($changed{$name}[0] block $changed{$name}[1])");
		# The call's cut ends at the follower's position + 1, which is the next round's L when no WAL
		# comes in between: that summary would then hold the next L too (case 2 needs L_C after it).
		$node->safe_psql('postgres', "SELECT pg_logical_emit_message(false, 't/032', 'a record after round $name')");
	}
	@files = summaries();
	# The summary that holds change B: the one whose range contains L_B.
	my $lb = lsn_to_int($L{B});
	($fb) = grep { $_->{start} <= $lb && $lb < $_->{end} } @files;
	last
	  if $fb
	  && lsn_to_int($L{C}) >= $fb->{end}
	  && lsn_to_int($L{A}) < $fb->{start}
	  && (grep { $_->{end} <= $fb->{start} } @files);
	note "attempt $attempt: the summaries (" . join(' ', map { $_->{name} } @files) . ") do not separate L_A "
	  . "$L{A}, L_B $L{B} and L_C $L{C}; once more";
}
cmp_ok(scalar @files, '>=', 3, 'the calls left summaries: ' . join(' ', map { $_->{name} } @files));
ok($fb, "a summary covers L_B $L{B}") or BAIL_OUT('no summary covers L_B');
my $fb_path = "$sumdir/$fb->{name}";
ok(lsn_to_int($L{C}) >= $fb->{end}, "that summary ($fb->{name}) ends before L_C $L{C}");
ok((grep { $_->{end} <= $fb->{start} } @files), 'summaries older than it exist');

my $pid = $node->safe_psql('postgres', 'SELECT follower_pid FROM ptrack_status()');
my $init_before = init_lsn($node);
my $log_offset = log_position($node);

# A call for each L: (ok, stderr).
sub call
{
	my ($lsn) = @_;
	my ($ret, $out, $err) =
	  $node->psql('postgres', "SELECT count(*) FROM ptrack_get_pagemapset('$lsn'::pg_lsn)");
	return ($ret == 0, $err);
}

# --- 2. a damaged summary ----------------------------------------------------
copy($fb_path, "$fb_path.orig") or die "copy: $!";
{
	open(my $fh, '+<:raw', $fb_path) or die "open $fb_path: $!";
	my $size = -s $fh;
	my $at = $size > 100 ? 100 : $size - 1;    # in the body if there is one, else in the header
	seek($fh, $at, 0);
	read($fh, my $byte, 1);
	seek($fh, $at, 0);
	print $fh chr(ord($byte) ^ 0x5A);
	close $fh;
}
foreach my $name ('A', 'B')
{
	my ($ok, $err) = call($L{$name});
	ok(!$ok, "damaged: pagemapset(L_$name $L{$name}) refuses");
	like($err, qr/summary file "pg_wal\/ptrack\/\Q$fb->{name}\E" is not usable/, "damaged: the error names the file")
	  or diag($err);
	like($err, qr/HINT:\s+Take a full backup/, 'damaged: the hint says to take a full backup');
}
{
	my $map = pagemapset($node, 'postgres', $L{C});
	ok(listed($map, @{ $changed{C} }), "damaged: pagemapset(L_C $L{C}), which does not need it, answers");
}
is($node->safe_psql('postgres', 'SELECT follower_pid FROM ptrack_status()'), $pid, 'damaged: the follower runs on');
ok(-f $fb_path, 'damaged: the file is left in place');
unlike(log_since($node, $log_offset), qr/restarted change tracking/, 'damaged: tracking did not restart');
copy("$fb_path.orig", $fb_path) or die "copy: $!";
{
	my $map = pagemapset($node, 'postgres', $L{B});
	ok(listed($map, @{ $changed{B} }), 'restored: pagemapset(L_B) answers and lists change B');
}

# --- 3. a missing summary ------------------------------------------------------
unlink($fb_path) or die "unlink: $!";
foreach my $name ('A', 'B')
{
	my ($ok, $err) = call($L{$name});
	ok(!$ok, "missing: pagemapset(L_$name $L{$name}) refuses");
	like($err, qr/a change summary is missing/, 'missing: the error says a summary is missing') or diag($err);
	like($err, qr/\Q$fb->{name}\E/, 'missing: the error names the missing file') or diag($err);
}
{
	my $map = pagemapset($node, 'postgres', $L{C});
	ok(listed($map, @{ $changed{C} }), "missing: pagemapset(L_C $L{C}), after the hole, answers");
}
cmp_ok(lsn_to_int(init_lsn($node)), '>=', $fb->{end}, 'missing: ptrack_init_lsn() lies past the hole');
unlike(log_since($node, $log_offset), qr/restarted change tracking/, 'missing: tracking did not restart');
copy("$fb_path.orig", $fb_path) or die "copy: $!";
unlink("$fb_path.orig");
is(init_lsn($node), $init_before, 'restored: ptrack_init_lsn() is back');

# --- 4. the older summaries removed (as retention would) ---------------------
my @older = grep { $_->{end} <= $fb->{start} } summaries();
unlink("$sumdir/$_->{name}") or die "unlink: $!" foreach @older;
# An L before what is left: L_A, unless retention combined round A's cut
# away (it may: only redo LSNs are kept boundaries) and the file holding L_B
# begins before it; then the oldest removed file's start.
my $l_old = lsn_to_int($L{A}) < $fb->{start} ? $L{A} : int_to_lsn($older[0]{start});
{
	my ($ok, $err) = call($l_old);
	ok(!$ok, "expired: pagemapset($l_old) refuses");
	like($err, qr/is older than ptrack_init_lsn\(\)/, 'expired: as older than ptrack_init_lsn()') or diag($err);
}
is(lsn_to_int(init_lsn($node)), $fb->{start}, 'expired: ptrack_init_lsn() is the oldest summary\'s start');
{
	my $map = pagemapset($node, 'postgres', $L{B});
	ok(listed($map, @{ $changed{B} }), 'expired: pagemapset(L_B) answers');
}

# --- 5. growth found by the answer's walk, WAL inserted meanwhile -------------
$node->safe_psql('postgres',
	q{CREATE TABLE grown (id int); INSERT INTO grown VALUES (1);
	  CREATE TABLE wal_filler (v text); CHECKPOINT});
my $grown = $node->safe_psql('postgres', "SELECT pg_relation_filepath('grown')");
# Asynchronous commits: the insert position runs ahead of the flushed WAL.
my $filler_sql = "SET synchronous_commit = off;\n"
  . "INSERT INTO wal_filler SELECT repeat('f', 200) FROM generate_series(1, 200); DELETE FROM wal_filler;\n" x 20000;
my $filler = IPC::Run::start(
	[ 'psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', 'postgres' ],
	'<', \$filler_sql, '>', '/dev/null', '2>', '/dev/null');
my @missed;
foreach my $round (1 .. 8)
{
	my $L = lsn();
	my $blocks = (-s "$pgdata/$grown") / BLCKSZ;
	# Zero blocks added without WAL, as a bulk extension leaves them.
	truncate("$pgdata/$grown", ($blocks + 4) * BLCKSZ) or die "truncate: $!";
	my $map = pagemapset($node, 'postgres', $L);
	my @want = ($blocks .. $blocks + 3);
	my @not = grep { !listed($map, $grown, $_) } @want;
	push @missed, "round $round (L $L): $grown blocks @not of @want not listed" if @not;
	$filler->pump_nb;
}
$filler->kill_kill;
is(join("\n", @missed), '', 'growth found by the walk before an answer is listed, also while WAL is being inserted');

# --- 6. strays: files off the chain ---------------------------------------------
foreach my $round ([ 'D', 200 ], [ 'E', 2800 ])
{
	my ($name, $id) = @$round;
	$L{$name} = lsn();
	$node->safe_psql('postgres', "UPDATE t SET pad = 'changed $name' WHERE id = $id");
	$changed{$name} = [ where_is('t', $id) ];
	pagemapset($node, 'postgres', $L{$name});    # a cut after each change
}
@files = summaries();
my $ld = lsn_to_int($L{D});
my ($x) = grep { $_->{start} <= $ld && $ld < $_->{end} } @files;
# L_D is where the follower stood at the call before: a cut just past a record first ends a
# summary at its end (docs/design.md 4.5), so the file holding L_D may be that one-byte summary,
# which a stray cannot start inside: the strays then go over the files after it (D is in the first).
($x) = grep { $_->{start} == $x->{end} } @files if $x && $x->{end} - $x->{start} < 2;
my ($y) = $x ? grep { $_->{start} == $x->{end} } @files : ();
# The garbage stray ends inside the file after $x, or after $y when $y is such a one-byte summary.
my ($z) = $y && $y->{end} - $y->{start} < 2 ? grep { $_->{start} == $y->{end} } @files : ($y);
ok($x && $y && $z, 'two files of the chain after L_D: ' . join(' ', map { $_->{name} } grep { defined } $x, $y, $z))
  or BAIL_OUT('no chain after L_D');
my $stray_start = $x->{start} + int(($x->{end} - $x->{start}) / 2);
$log_offset = log_position($node);    # before the strays: retention may remove them at once
my $garbage = summary_name($stray_start, $z->{start} + int(($z->{end} - $z->{start}) / 2));
{
	open(my $fh, '>', "$sumdir/$garbage") or die "$garbage: $!";
	print $fh 'PTRKSUMM' . ("\0" x 200);
	close $fh;
}
# Every check of the reader passes; it holds what $y holds, not the change D that $x holds.
my $posing = copy_summary_as($pgdata, $y->{name}, $stray_start, $y->{end});
my @strays = ($garbage, $posing);
note "strays planted: @strays over $x->{name} and $y->{name}";
foreach my $case ([ 'L_D', $L{D}, 'D', 'E' ], [ 'the strays\' start', int_to_lsn($stray_start), 'D', 'E' ],
	[ 'the end of the first file', int_to_lsn($x->{end}), 'E' ])
{
	my ($what, $lsn, @want) = @$case;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SELECT path, pagemap FROM ptrack_get_pagemapset('$lsn'::pg_lsn)");
	ok($ret == 0, "strays: pagemapset($what $lsn) answers") or diag($err);
	foreach my $stray (@strays)
	{
		# Retention may have removed it already (it ends before the follower's
		# resume point): then its removal is what the log names.
		my $named = qr/WARNING:  ptrack ignores "pg_wal\/ptrack\/\Q$stray\E": it is not part of the chain/;
		my $removed = qr/WARNING:  ptrack removed "pg_wal\/ptrack\/\Q$stray\E": it is not part of the chain/;
		ok($err =~ $named || (!-e "$sumdir/$stray" && log_since($node, $log_offset) =~ $removed),
			"strays: the call for $what names $stray, or retention removed it")
		  or diag($err);
	}
	my $map = pagemapset($node, 'postgres', $lsn);
	foreach my $c (@want)
	{
		ok(listed($map, @{ $changed{$c} }), "strays: pagemapset($what $lsn) lists change $c ($changed{$c}[0] block "
			  . "$changed{$c}[1]), from the chain's files");
	}
}
cmp_ok(lsn_to_int(init_lsn($node)), '<=', $x->{start}, 'strays: ptrack_init_lsn() is not moved by them');
unlike(log_since($node, $log_offset), qr/restarted change tracking/, 'strays: tracking did not restart');
unlink("$sumdir/$_") foreach @strays;

$node->stop;
done_testing();
