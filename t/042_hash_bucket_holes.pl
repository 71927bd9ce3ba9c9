# Copyright (c) the ptrack authors
#
# 042_hash_bucket_holes.pl -- blocks a relation file gains without any write
# naming them: the hole a hash index's bucket allocation leaves.
#
# A hash index allocates the buckets of a new split point all at once: it
# writes only the last of their blocks, past the end of the file
# (_hash_alloc_buckets() in hashpage.c), and the blocks before it read as zero
# pages until a split starts using them.  No write and no WAL record names
# those blocks, yet a backup must list every block a file gained after its
# parent's start (docs/design.md section 3.7).  The hooks learn of them from
# the core patch, whose mdextend_hook is called for each block of the hole as
# well as for the block written; WAL capture from its walk of the relation
# files' sizes before a call (section 4.3).
#
# The index grows between L and the call with no checkpoint in between: a
# checkpoint's size walk would mark the hole in hooks mode and hide a hook
# that misses it.  The test checks that the index file does have zero pages
# past its length at L (the case is really there), then that every block the
# files gained is listed, those zero pages by name.
#
# Found by the soak (scripts/soak.sh --pg-version 18 --capture hooks --seed
# 2828): the core patch called mdextend_hook for the block mdextend() wrote
# only, so the hole stayed unmarked until the next checkpoint's size walk, and
# a call made before it left the hole's blocks out.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode);
use PtrackOracle qw(block_counts no_misses_ok pagemapset);
use PtrackUnits qw(BLCKSZ);

my $node = PostgreSQL::Test::Cluster->new('hash_bucket_holes');
$node->init;
# No checkpoint and no page written by the background writer or an eviction
# until the call: the hole's blocks stay zero pages on disk.
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'ptrack'
ptrack.map_size = 64MB
wal_level = replica
shared_buffers = 128MB
bgwriter_lru_maxpages = 0
checkpoint_timeout = 1h
max_wal_size = 10GB
autovacuum = off
});
$node->start;
note('capture mode: ' . capture_mode());

$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql(
	'postgres', q{
CREATE TABLE h (id int, k int);
CREATE INDEX h_k ON h USING hash (k);
INSERT INTO h SELECT g, g FROM generate_series(1, 1000) g;
});
$node->safe_psql('postgres', 'CHECKPOINT');
my $lsn = $node->safe_psql('postgres', 'SELECT redo_lsn FROM pg_control_checkpoint()');
my $baseline = block_counts($node->data_dir);
my $index = $node->safe_psql('postgres', "SELECT pg_relation_filepath('h_k')");
my $before = $baseline->{$index};
ok(defined $before, "the hash index $index exists at L $lsn") or BAIL_OUT('no index file');

# About 40 split points' worth of buckets: each new one allocated as a hole.
$node->safe_psql('postgres', 'INSERT INTO h SELECT g, g FROM generate_series(1001, 200000) g');

# The blocks of the index file past its length at L that are zero pages on disk.
my $file = $node->data_dir . "/$index";
my @zero;
open(my $fh, '<:raw', $file) or die "could not open $file: $!";
my $nblocks = int((-s $fh) / BLCKSZ);
for my $b ($before .. $nblocks - 1)
{
	sysseek($fh, $b * BLCKSZ, 0) or die "could not seek in $file: $!";
	my $got = sysread($fh, my $page, BLCKSZ);
	die "could not read block $b of $file: " . ($got // $!) unless ($got // 0) == BLCKSZ;
	push @zero, $b if $page !~ /[^\0]/;
}
close $fh;
ok(scalar @zero > 0,
	"the index file gained zero pages no write named ($index: $before blocks at L, $nblocks now, "
	  . scalar(@zero) . ' zero pages among the new ones)');

my $stats = no_misses_ok($node, $lsn, "every block written or gained since L $lsn is listed",
	baseline => $baseline);
cmp_ok($stats->{extended}, '>=', $nblocks - $before, 'the extension oracle saw the blocks the index gained');

my $map = pagemapset($node, 'postgres', $lsn);
my %listed = map { $_ => 1 } @{ $map->{$index}{blocks} // [] };
my @unlisted = grep { !$listed{$_} } @zero;
is(scalar @unlisted, 0, "the hole's zero pages are listed by ptrack_get_pagemapset('$lsn')")
  or diag("$index: zero pages not listed: "
	  . join(', ', @unlisted[ 0 .. ($#unlisted < 19 ? $#unlisted : 19) ])
	  . (@unlisted > 20 ? sprintf(' and %d more', @unlisted - 20) : ''));

$node->stop;
done_testing();
