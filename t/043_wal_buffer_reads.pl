# Copyright (c) the ptrack authors
#
# 043_wal_buffer_reads.pl -- wal capture only: the WAL follower's page reader
# mixes pages from the WAL buffers and from the segment files, across many
# segment switches, and loses nothing (docs/design.md section 4.1).
#
# On a primary's own timeline the follower takes a page from the WAL buffers
# while they still hold it (WALReadFromBuffers(), PostgreSQL 17 and 18) and
# from the segment file otherwise.  xlogreader records the page's segment in
# the reader after every page (seg.ws_segno), and WALRead() trusts the open
# segment file to be that segment's: after pages of a new segment came from
# the buffers, a read from the files must not use the previous segment's
# file, which the page reader closes.  The follower sleeps at the end of the
# WAL, wakes after the buffers have moved on, reads the start of its backlog
# from the files and catches up into the buffers.
#
# The cluster has 1 MB WAL segments and 512 kB of WAL buffers, so bursts of
# updates cross a segment boundary every few hundred milliseconds, the
# follower's catch-ups end in the buffers about every other time across one,
# and each wake-up starts in the files.  A page read through the wrong
# segment's file fails its page-header or CRC check, and the follower
# restarts tracking with a WARNING: the test asserts no restart, no such
# WARNING, and that every block changed since L is listed (the page LSN
# oracle).  On 15 every page comes from the files; the test runs there too.
#
# At the end of the WAL available, xlogreader forgets the segment it read
# (XLogReaderInvalReadState()), so the next read after a sleep reopens the
# right file whatever the buffers served before; the case the page reader's
# file closing guards is a batch that reads the buffers across a boundary
# and then, without reaching the end, finds its next page evicted (the
# follower descheduled while the writers lap the buffers), which a test
# cannot time.
#
# The page reader serves xlogreader; on a primary the follower's steady state
# reads in place by default (ptrack.wal_reader = inplace, which reads the
# segment files only), so the test runs it with xlogreader.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use Time::HiRes qw(usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node init_lsn log_position log_since);
use PtrackOracle qw(block_counts no_misses_ok);

plan skip_all => 'the page reader is the WAL follower\'s (wal capture only)'
  unless capture_mode() eq 'wal';

my $node = ptrack_node('wal_buffer_reads',
	extra => [ '--wal-segsize=1' ],
	conf => "ptrack.wal_reader = xlogreader\nwal_buffers = 512kB\nautovacuum = off\ncheckpoint_timeout = 1h\n"
	  . "max_wal_size = 1GB\n");
$node->start;
my $offset = log_position($node);
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
init_lsn($node);    # the follower runs and has caught up
$node->safe_psql('postgres', q{
CREATE TABLE t (id int PRIMARY KEY, v int, pad text);
INSERT INTO t SELECT g, 0, repeat('x', 200) FROM generate_series(1, 20000) g;
});
is($node->safe_psql('postgres', 'SHOW wal_segment_size'), '1MB', 'WAL segments of 1 MB');

$node->safe_psql('postgres', 'CHECKPOINT');
my $lsn = $node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
my $baseline = block_counts($node->data_dir);
my $lsn0 = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');

# Bursts of about 1.5 MB of WAL each, with pauses shorter and longer than the
# follower's sleep at the end of the WAL, so that it wakes at every distance
# behind the WAL inserted.
srand(43);
for my $burst (1 .. 40)
{
	my $from = 1 + int(rand(15000));
	$node->safe_psql('postgres',
		"UPDATE t SET v = v + 1, pad = md5(random()::text) || pad WHERE id BETWEEN $from AND $from + 2500");
	$node->safe_psql('postgres', 'UPDATE t SET pad = left(pad, 200)') if $burst % 10 == 0;
	usleep(int(rand(400_000)));
}
my $lsn1 = $node->safe_psql('postgres', 'SELECT pg_current_wal_lsn()');
my $segments = $node->safe_psql('postgres',
	"SELECT floor(pg_wal_lsn_diff('$lsn1', '0/0') / 1048576) - floor(pg_wal_lsn_diff('$lsn0', '0/0') / 1048576)");
cmp_ok($segments, '>=', 20, "the bursts crossed $segments segment boundaries ($lsn0 to $lsn1)");

no_misses_ok($node, $lsn, "every block changed since L $lsn is listed", baseline => $baseline);

my ($restarts, $off) = split /\|/,
  $node->safe_psql('postgres', "SELECT restarts, coalesce(off_reason, '') FROM ptrack_status()");
is($restarts, 0, 'tracking never restarted') or diag("off_reason: $off");
my $log = log_since($node, $offset);
my @read_errors = $log =~ /^.*ptrack could not (?:read|find) .*$/mg;
is(scalar @read_errors, 0, 'the follower read every page it asked for')
  or diag(join("\n", @read_errors[ 0 .. ($#read_errors < 4 ? $#read_errors : 4) ]));

$node->stop;
done_testing();
