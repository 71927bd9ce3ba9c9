# Copyright (c) the ptrack authors
#
# 030_record_kinds.pl -- the heap records whose kinds differ between
# PostgreSQL versions (docs/design.md section 8.1), each the only thing that
# changes a block after L, in both capture modes:
#
#   1. on-access pruning: a SELECT prunes a page whose old tuple version is
#      dead (15: heap2 PRUNE; 17, 18: heap2 PRUNE_ON_ACCESS);
#   2. freezing: VACUUM (FREEZE) of an all-visible page (15: heap2
#      FREEZE_PAGE; 17, 18: the combined heap2 PRUNE_VACUUM_SCAN), and the
#      all-frozen bit it sets in the visibility map (heap2 VISIBLE);
#   3. a visibility map bit cleared by a DELETE: the VM page changes (its
#      bytes are compared before and after).  15 clears the bit without a
#      block reference to the VM page, so its page LSN stays behind L and the
#      page-LSN oracle cannot see it; 17.11 and 18.6 register the VM page (the
#      fix of the VM changes PostgreSQL 17's WAL summarizer missed).
#
# For each case: the expected record kind is among the records after L
# (pg_walinspect), every block any record after L references is listed by
# ptrack_get_pagemapset(L) (a WAL oracle independent of ptrack), and the
# block the case changes is listed.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/lib";

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use PtrackCluster qw(capture_mode ptrack_node server_major tablespace_version_re);
use PtrackOracle qw(pagemapset);

my $major = server_major();
my %kind = $major >= 17
  ? (prune => 'PRUNE_ON_ACCESS', freeze => 'PRUNE_VACUUM_SCAN')
  : (prune => 'PRUNE', freeze => 'FREEZE_PAGE');
note 'PostgreSQL ' . $major . ', ' . capture_mode() . " capture: on-access prune is heap2/$kind{prune}, "
  . "freezing heap2/$kind{freeze}";

my $node = ptrack_node('record_kinds', conf => "autovacuum = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ptrack');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_walinspect');

# The path of block $blk's segment file of fork $fork of relation spc/db/rel,
# and the block's number in that segment.
sub block_path
{
	my ($spc, $db, $rel, $fork, $blk) = @_;
	my %suffix = (main => '', fsm => '_fsm', vm => '_vm', init => '_init');
	my $dir = $spc == 1664 ? 'global' : $spc == 1663 ? "base/$db" : undef;
	return undef unless defined $dir;    # no tablespace in this test
	my $segno = int($blk / 131072);
	my $path = "$dir/$rel$suffix{$fork}" . ($segno ? ".$segno" : '');
	return ($path, $blk % 131072);
}

# Records after $L: a list of [record_type, start_lsn, [block refs]].
sub records_since
{
	my ($L) = @_;
	my $out = $node->safe_psql('postgres',
		"SELECT resource_manager || '/' || record_type, start_lsn, coalesce(block_ref, '') "
		  . "FROM pg_get_wal_records_info('$L', pg_current_wal_flush_lsn())");
	my @records;
	foreach my $line (split /\n/, $out)
	{
		my ($type, $lsn, $refs) = split /\|/, $line, 3;
		my @blocks;
		while ($refs =~ m{blkref #\d+: rel (\d+)/(\d+)/(\d+)(?: fork (\w+))? blk (\d+)}g)
		{
			push @blocks, [ $1, $2, $3, $4 // 'main', $5 ];
		}
		push @records, [ $type, $lsn, \@blocks ];
	}
	return @records;
}

# Checks that the records after $L include one of kind $want on $relfile,
# that every block any of them references is listed by pagemapset($L), and
# that each [path, block] of @must is listed.
sub case_ok
{
	my ($label, $L, $want, $relfile, @must) = @_;
	$node->safe_psql('postgres', 'CHECKPOINT');
	my @records = records_since($L);
	my $map = pagemapset($node, 'postgres', $L);
	my %listed;
	foreach my $path (keys %$map)
	{
		$listed{"$path $_"} = 1 foreach @{ $map->{$path}{blocks} };
	}
	my (@seen, @missed);
	foreach my $r (@records)
	{
		my ($type, $lsn, $blocks) = @$r;
		foreach my $b (@$blocks)
		{
			my ($path, $blk) = block_path(@$b);
			next unless defined $path;
			push @seen, $type if $path eq $relfile;
			push @missed, "$path block $blk (referenced by $type at $lsn)" unless $listed{"$path $blk"};
		}
	}
	note "$label: records after L: " . join('; ', map { "$_->[0] " . join(',', map { join('/', @$_) } @{ $_->[2] }) } @records);
	my %kinds = map { $_ => 1 } @seen;
	ok($kinds{$want}, "$label: a $want record changed $relfile after L")
	  or diag("records on $relfile after L $L: " . join(', ', sort keys %kinds));
	is(scalar @missed, 0, "$label: every block referenced by the " . scalar(@records) . " records after L is listed")
	  or diag(join("\n", @missed[ 0 .. ($#missed < 20 ? $#missed : 19) ]));
	foreach my $m (@must)
	{
		ok($listed{"$m->[0] $m->[1]"}, "$label: $m->[0] block $m->[1] is listed")
		  or diag("listed in $m->[0]: " . join(' ', @{ ($map->{ $m->[0] } // { blocks => [] })->{blocks} }));
	}
}

# L for a case: in a later WAL segment than every change before it, so
# that no earlier mark shares L's granule (marks are rounded up to 64 KB of
# WAL, docs/design.md section 3.3) and a block is listed only if marked after L.
sub fresh_L
{
	$node->safe_psql('postgres', 'CHECKPOINT');
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	return $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
}

sub relfile
{
	my ($table) = @_;
	return $node->safe_psql('postgres', "SELECT pg_relation_filepath('$table')");
}

# ---------------------------------------------------------------------------
# 1. On-access pruning
# ---------------------------------------------------------------------------

# fillfactor 10: a page with more than ~10% used is worth pruning when read
# (heap_page_prune_opt); the update leaves the old version dead on the page.
$node->safe_psql('postgres', q{
CREATE TABLE p (id int, pad text) WITH (fillfactor = 10);
INSERT INTO p VALUES (1, repeat('p', 1500));
UPDATE p SET pad = repeat('q', 1500);
});
my $L = fresh_L();
$node->safe_psql('postgres', 'SELECT count(*) FROM p');
my $p = relfile('p');
case_ok('on-access prune', $L, "Heap2/$kind{prune}", $p, [ $p, 0 ]);

# ---------------------------------------------------------------------------
# 2. Freezing an all-visible page
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{
CREATE TABLE f (id int, pad text);
INSERT INTO f SELECT g, repeat('f', 100) FROM generate_series(1, 300) g;
});
$node->safe_psql('postgres', 'VACUUM f');    # all-visible, not frozen
$L = fresh_L();
$node->safe_psql('postgres', 'VACUUM (FREEZE) f');
my $f = relfile('f');
case_ok('VACUUM (FREEZE)', $L, "Heap2/$kind{freeze}", $f, [ $f, 0 ], [ "${f}_vm", 0 ]);

# ---------------------------------------------------------------------------
# 3. A visibility map bit cleared
# ---------------------------------------------------------------------------

$node->safe_psql('postgres', q{
CREATE TABLE v (id int, pad text);
INSERT INTO v SELECT g, repeat('v', 100) FROM generate_series(1, 300) g;
});
$node->safe_psql('postgres', 'VACUUM (FREEZE) v');
$L = fresh_L();
my $v = relfile('v');
my $vm_path = $node->data_dir . "/${v}_vm";
my $vm_before = slurp_file($vm_path);
$node->safe_psql('postgres', 'DELETE FROM v WHERE id = 1');
case_ok('VM bit cleared by DELETE', $L, 'Heap/DELETE', $v, [ $v, 0 ], [ "${v}_vm", 0 ]);
my $vm_after = slurp_file($vm_path);
isnt($vm_after, $vm_before, "the DELETE changed ${v}_vm block 0 (the bits of heap block 0 cleared)");

$node->stop;
done_testing();
