# Copyright (c) the ptrack authors
#
# PtrackVerify.pm -- the verification half of the backup round trips (t/003,
# t/014, scripts/main-job.pl): is ptrack's answer complete, and is the
# restored cluster the same as its source?  PtrackBackup.pm is the backup
# tool; it stays a plain tool and calls the checks below while it takes an
# incremental backup, because only then are its listing of the data
# directory, ptrack's answer and the files themselves all at hand.  The
# verdicts land in the statistics incremental_backup() returns, where the
# tests assert them:
#
#   check_pagemap_row($path, $count, $bits, \%st)
#       pagecount_mismatch     rows whose pagecount is not their bit count
#       pagecount_examples     the first ten of them, with their first blocks
#   (unknown_pagemap_paths and unknown_examples, rows naming no permanent
#   relation file, are counted by PtrackBackup, which can list the data
#   directory again after the query)
#   check_marked($datadir, $path, $from_size, $to_size, $bits, \%st)
#       unmarked_new_blocks    blocks ptrack must have listed and did not
#       unmarked_examples      the first ten of them, as path:block
#   check_copied_page($path, $page, $since_int, \%st)
#       old_lsn_pages          copied pages older than the previous backup
#
# new_check_stats() gives these statistics zeroed.  After the restore:
#
#   compare_clusters($src, $dst)    row digests + amcheck
#   cluster_digests($node), compare_digests($src, $dst), amcheck_cluster($dst)
#                                   its parts, for a caller that digests the
#                                   source at one moment and compares later
#                                   (scripts/soak.pl)

package PtrackVerify;

use strict;
use warnings;

use Exporter 'import';
use Fcntl qw(SEEK_SET);

use PtrackUnits qw(BLCKSZ);

our @EXPORT_OK = qw(new_check_stats check_pagemap_row check_marked
  check_copied_page compare_clusters cluster_digests compare_digests amcheck_cluster);

# ---------------------------------------------------------------------------
# ptrack's answer, checked during an incremental backup
# ---------------------------------------------------------------------------

# The statistics the checks below fill, zeroed, as a list of key => value.
sub new_check_stats
{
	return (
		pagecount_mismatch => 0,
		pagecount_examples => [],
		unknown_pagemap_paths => 0,
		unknown_examples => [],
		unmarked_new_blocks => 0,
		unmarked_examples => [],
		old_lsn_pages => 0);
}

# One row of ptrack_get_pagemapset(): $bits is its pagemap as a string of
# '0'/'1', one per block.
sub check_pagemap_row
{
	my ($path, $count, $bits, $st) = @_;
	my $set = ($bits =~ tr/1//);
	return if $set == $count;
	$st->{pagecount_mismatch}++;
	my @first;
	my $blk = -1;
	push @first, $blk while @first < 10 && ($blk = index($bits, '1', $blk + 1)) >= 0;
	push @{ $st->{pagecount_examples} },
	  "$path: pagecount $count, $set bits set in its pagemap"
	  . (@first ? " (blocks @first" . ($set > 10 ? ' ...)' : ')') : '')
	  if @{ $st->{pagecount_examples} } < 10;
	return;
}

# Counts in $st->{unmarked_new_blocks} (and the first ten in
# $st->{unmarked_examples}, as path:block) the blocks in
# [$from_size, $to_size) of the relation file $path that ptrack did not mark
# in $bits although they hold data.  The backup tool calls it for every
# relation file of its listing, taken before the ptrack_get_pagemapset()
# query, with $from_size the file's length in the previous backup (0 for a
# file that backup did not have): those blocks were extended after the
# previous backup's start LSN, so ptrack must list them.  A block that reads
# as zeros is a hole never written (e.g. hash index bucket allocation), which
# ptrack need not list.  Exact on a quiescent server; under concurrent writes
# a page filled after the query can show up here.
sub check_marked
{
	my ($datadir, $path, $from_size, $to_size, $bits, $st) = @_;
	return if $path =~ /_fsm(?:\.\d+)?$/;    # listed whole by ptrack anyway
	my $first = int($from_size / BLCKSZ);
	my $last = int($to_size / BLCKSZ);       # exclusive
	return if $first >= $last;
	my @missing;
	for my $blk ($first .. $last - 1)
	{
		next if defined $bits && $blk < length($bits)
		  && substr($bits, $blk, 1) eq '1';
		push @missing, $blk;
	}
	return unless @missing;
	open(my $fh, '<', "$datadir/$path") or return;
	binmode $fh;
	for my $blk (@missing)
	{
		sysseek($fh, $blk * BLCKSZ, SEEK_SET) or last;
		my $n = sysread($fh, my $page, BLCKSZ);
		last unless $n && $n == BLCKSZ;
		next if $page !~ /[^\0]/;    # a hole that was never written
		$st->{unmarked_new_blocks}++;
		push @{ $st->{unmarked_examples} }, "$path:$blk"
		  if @{ $st->{unmarked_examples} } < 10;
	}
	close($fh);
	return;
}

# Counts in $st->{old_lsn_pages} a page the backup copied from $path whose
# page LSN is older than $since_int (the previous backup's start LSN as an
# integer): a false positive, or a page whose only change since then does
# not set the page LSN (hint bits; visibility map bits cleared by a heap
# change), so an upper bound of the false positives.  FSM pages (not
# WAL-logged, listed whole) and never-initialised pages are not counted.
sub check_copied_page
{
	my ($path, $page, $since_int, $st) = @_;
	return if $path =~ /_fsm(?:\.\d+)?$/;
	# PageHeaderData: pd_lsn (two native uint32: high, low), ...,
	# pd_upper at offset 14 (0 in a page never initialised).
	my ($hi, $lo, $upper) = unpack('L L x6 S', $page);
	$st->{old_lsn_pages}++
	  if $upper != 0 && $hi * 4294967296 + $lo < $since_int;
	return;
}

# ---------------------------------------------------------------------------
# The restored cluster against its source
# ---------------------------------------------------------------------------

# Compares every permanent table (relkind r and m, i.e. also the leaves of
# partitioned tables) of every database but template0 between $src and $dst,
# by row count and an order-independent digest of the rows' text (see
# cluster_digests), then runs amcheck on $dst (amcheck_cluster).  Returns the
# list of problems (empty = identical and clean).  With report => \%r, fills
# $r{tables} = [ [db, table, rows, 'MATCH'|'MISMATCH'] ] and $r{amcheck} =
# { indexes, relations, problems => [...] }.
sub compare_clusters
{
	my ($src, $dst, %opt) = @_;
	my $report = $opt{report} // {};
	my @problems = compare_digests(cluster_digests($src), cluster_digests($dst), report => $report);
	my $am = amcheck_cluster($dst);
	$report->{amcheck} = $am;
	push @problems, @{ $am->{problems} };
	return @problems;
}

# The digests compare_clusters() compares, of one cluster: a hashref
#   dbs     [ databases, sorted ]
#   tables  { db => [ [ table, "rows|sum1|sum2" ] ... ] }, tables sorted
# A table's digest is its row count and the sum, over rows, of the two
# 64-bit halves of md5(row::text), kept in numeric so that it cannot
# overflow: that streams (no sort, no 1 GB string limit) and any changed,
# lost or extra row changes it.  Sequences are left out: nextval()
# WAL-logs 32 values ahead, so a restored sequence legitimately runs ahead
# of its source.  Databases that do not allow connections, or that an
# interrupted DROP DATABASE left invalid, are left out.  With
# large_objects => 1, pg_largeobject and pg_largeobject_metadata of each
# database are digested too.  Taken from a paused source, the digests can be
# compared later with a restored copy's (compare_digests).
sub cluster_digests
{
	my ($node, %opt) = @_;
	my $dbq = "SELECT datname FROM pg_database "
	  . "WHERE datname <> 'template0' AND datallowconn AND datconnlimit <> -2 ORDER BY 1";
	my $tq = "SELECT c.oid::regclass::text FROM pg_class c "
	  . "JOIN pg_namespace n ON n.oid = c.relnamespace "
	  . "WHERE c.relkind IN ('r', 'm') AND c.relpersistence = 'p' "
	  . "AND n.nspname <> 'information_schema' AND n.nspname !~ '^pg_' "
	  . ($opt{large_objects}
		? "OR c.oid IN ('pg_largeobject'::regclass, 'pg_largeobject_metadata'::regclass) "
		: '')
	  . "ORDER BY 1";
	my %d = (dbs => [ split /\n/, $node->safe_psql('postgres', $dbq) ], tables => {});
	for my $db (@{ $d{dbs} })
	{
		my @tables = split /\n/, $node->safe_psql($db, $tq);
		my $sql = join '',
		  map {
			"SELECT count(*), "
			  . "coalesce(sum(('x' || substr(h, 1, 16))::bit(64)::bigint::numeric), 0), "
			  . "coalesce(sum(('x' || substr(h, 17, 16))::bit(64)::bigint::numeric), 0) "
			  . "FROM (SELECT md5(ptrack_row__::text) AS h FROM $_ ptrack_row__) d;\n"
		  } @tables;
		my @digests = @tables ? split /\n/, $node->safe_psql($db, $sql) : ();
		$d{tables}{$db} = [ map { [ $tables[$_], $digests[$_] // '' ] } 0 .. $#tables ];
	}
	return \%d;
}

# The differences between the digests $src (the source) and $dst (the
# restored copy) as a list of problems.  With report => \%r, fills $r{tables} as
# compare_clusters() does.
sub compare_digests
{
	my ($src, $dst, %opt) = @_;
	my $report = $opt{report} // {};
	$report->{tables} = [];
	my @problems;
	my @src_dbs = @{ $src->{dbs} };
	my @dst_dbs = @{ $dst->{dbs} };
	push @problems, "databases differ: [@src_dbs] vs [@dst_dbs]"
	  if "@src_dbs" ne "@dst_dbs";
	my %on_dst = map { $_ => 1 } @dst_dbs;
	for my $db (grep { $on_dst{$_} } @src_dbs)
	{
		my @src_t = map { $_->[0] } @{ $src->{tables}{$db} };
		my @dst_t = map { $_->[0] } @{ $dst->{tables}{$db} };
		push @problems, "$db: tables differ: [@src_t] vs [@dst_t]"
		  if "@src_t" ne "@dst_t";
		my %dst = map { $_->[0] => $_->[1] } @{ $dst->{tables}{$db} };
		for my $t (grep { exists $dst{ $_->[0] } } @{ $src->{tables}{$db} })
		{
			my ($table, $digest) = @$t;
			my ($rows) = split /\|/, $digest;
			my $same = $digest eq $dst{$table};
			push @{ $report->{tables} }, [ $db, $table, $rows, $same ? 'MATCH' : 'MISMATCH' ];
			push @problems, "$db: $table: source $digest, restored $dst{$table}"
			  unless $same;
		}
	}
	return @problems;
}

# amcheck on every database of $dst: bt_index_check(heapallindexed) on every
# valid btree index and verify_heapam on every heap, toast and matview
# relation, catalogs included.  Returns { indexes, relations, problems }.
sub amcheck_cluster
{
	my ($dst) = @_;
	my @dst_dbs = split /\n/, $dst->safe_psql('postgres',
		"SELECT datname FROM pg_database "
		  . "WHERE datname <> 'template0' AND datallowconn AND datconnlimit <> -2 ORDER BY 1");
	my %am = (indexes => 0, relations => 0, problems => []);
	for my $db (@dst_dbs)
	{
		my $out = $dst->safe_psql($db, <<'EOSQL');
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE TEMP TABLE ptrack_amcheck (kind text, obj text, msg text);
DO $do$
DECLARE
	r record;
BEGIN
	FOR r IN SELECT c.oid, c.oid::regclass::text AS name
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		JOIN pg_am a ON a.oid = c.relam
		WHERE a.amname = 'btree' AND c.relpersistence <> 't'
		AND i.indisvalid AND i.indisready
	LOOP
		BEGIN
			PERFORM bt_index_check(r.oid, true);
			INSERT INTO ptrack_amcheck VALUES ('index', r.name, NULL);
		EXCEPTION WHEN OTHERS THEN
			INSERT INTO ptrack_amcheck VALUES ('index', r.name, SQLERRM);
		END;
	END LOOP;
	FOR r IN SELECT c.oid, c.oid::regclass::text AS name FROM pg_class c
		WHERE c.relkind IN ('r', 'm', 't') AND c.relpersistence <> 't'
	LOOP
		BEGIN
			INSERT INTO ptrack_amcheck
			SELECT 'heap', r.name, format('block %s offset %s attnum %s: %s',
				v.blkno, v.offnum, v.attnum, v.msg)
			FROM verify_heapam(r.oid, on_error_stop => false,
				check_toast => true) v;
			INSERT INTO ptrack_amcheck VALUES ('heap', r.name, NULL);
		EXCEPTION WHEN OTHERS THEN
			INSERT INTO ptrack_amcheck VALUES ('heap', r.name, SQLERRM);
		END;
	END LOOP;
END
$do$;
SELECT 'count', count(DISTINCT obj) FILTER (WHERE kind = 'index'),
	count(DISTINCT obj) FILTER (WHERE kind = 'heap') FROM ptrack_amcheck;
SELECT 'problem', kind, obj, msg FROM ptrack_amcheck WHERE msg IS NOT NULL;
EOSQL
		for my $line (split /\n/, $out)
		{
			my @f = split /\|/, $line, 4;
			if ($f[0] eq 'count')
			{
				$am{indexes} += $f[1];
				$am{relations} += $f[2];
			}
			elsif ($f[0] eq 'problem')
			{
				push @{ $am{problems} }, "$db: amcheck $f[1] $f[2]: $f[3]";
			}
		}
	}
	return \%am;
}

1;
