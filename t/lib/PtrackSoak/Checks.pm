# Copyright (c) the ptrack authors
#
# PtrackSoak::Checks -- what the soak (scripts/soak.pl) checks after every
# backup, against evidence that does not come from ptrack:
#
#   oracle()     every page of every permanent relation file (main, vm and
#                init forks) whose LSN is at or past the previous backup's
#                start LSN is listed by ptrack_get_pagemapset(), and so is
#                every block a file gained since then (file sizes recorded
#                when the previous backup ended): PtrackOracle's page-LSN
#                and extension oracles
#   verify()     ptrack_verify() from the same LSN returns no row
#   restored()   the chain restores (pg_probackup restore) into a scratch
#                directory and starts; its tables (large objects included)
#                equal the source's digests taken when the backup ended,
#                with the clients paused (PtrackVerify::cluster_digests), and
#                so do its prepared transactions; amcheck (bt_index_check
#                with heapallindexed, verify_heapam) is clean
#
# A miss is described with its relation, so that the report says what was
# lost: "base/16384/16402.1 block 7 lsn 0/5A1B2C8 (soak: c1_t3)".

package PtrackSoak::Checks;

use strict;
use warnings;

use Carp;
use File::Path qw(rmtree make_path);

use PtrackBackup qw(start_restored);
use PtrackCluster qw(new_node);
use PtrackOracle qw(missed_blocks);
use PtrackVerify qw(cluster_digests compare_digests amcheck_cluster);

# The page-LSN and extension oracles from $since with the file sizes
# $baseline; returns ({ misses => [lines], blocks, at_or_after, extended }).
sub oracle
{
	my ($node, $since, $baseline) = @_;
	my %stats;
	my @misses = missed_blocks($node, $since, forks => [qw(main vm init)],
		baseline => $baseline, stats => \%stats, quiet => 1);
	delete $stats{pagemapset};
	return { %stats, misses => [ describe($node, @misses) ] };
}

# ptrack_verify($since): { misses => [lines], pages => pages it checked }.
sub verify
{
	my ($node, $since) = @_;
	my ($rc, $out, $err) = $node->psql('postgres',
		"SET ptrack.verify_max_rate = 0;\n"
		  . "SELECT path, block, page_lsn FROM ptrack_verify('$since'::pg_lsn) ORDER BY 1, 2");
	croak "ptrack_verify('$since') failed: $err" if $rc;
	my ($pages) = $err =~ /ptrack_verify: \d+ files, .*?, (\d+) pages checked/;
	my @misses = map {
		my ($path, $block, $lsn) = split /\|/;
		"$path block $block lsn $lsn (ptrack_verify)"
	} grep { /\S/ } split /\n/, $out;
	return { misses => [ describe($node, @misses) ], pages => $pages // 0 };
}

# The miss lines with the relation each file belongs to appended, when the
# catalog still knows it.
sub describe
{
	my ($node, @lines) = @_;
	my %dbname;
	for my $line (@lines)
	{
		my ($path) = $line =~ /^(\S+)/ or next;
		my ($spc, $db, $fnode);
		if ($path =~ m{^global/(\d+)})
		{
			($spc, $db, $fnode) = (1664, undef, $1);
		}
		elsif ($path =~ m{^base/(\d+)/(\d+)})
		{
			($spc, $db, $fnode) = (0, $1, $2);
		}
		elsif ($path =~ m{^pg_tblspc/(\d+)/[^/]+/(\d+)/(\d+)})
		{
			($spc, $db, $fnode) = ($1, $2, $3);
		}
		else
		{
			next;
		}
		my $dbn = defined $db
		  ? ($dbname{$db} //= $node->safe_psql('postgres',
				"SELECT datname FROM pg_database WHERE oid = $db") || '')
		  : 'postgres';
		next if $dbn eq '';
		my ($rc, $rel) = $node->psql($dbn,
			"SELECT coalesce(pg_filenode_relation($spc, $fnode)::regclass::text, 'dropped')");
		$line .= " ($dbn: " . ($rc == 0 && $rel ne '' ? $rel : 'unknown') . ')';
	}
	return @lines;
}

# Restores backup $b (its chain) with $pgpb into a new node named $name,
# starts it and compares it with $digests (the source's when the backup
# ended; undef: no comparison, the clients ran during the backup), then
# runs amcheck.  Returns { ok, problems => [...], tables, indexes, node }
# (node: the restored node, stopped; its directory is removed unless $keep).
sub restored
{
	my (%a) = @_;
	my $node = new_node($a{name}, stock => $a{stock});
	my $pgdata = $node->data_dir;
	my %ts_map;
	for my $oid (sort keys %{ $a{tablespaces} })
	{
		$ts_map{ $a{tablespaces}{$oid} } = $node->basedir . "/tablespace_$oid";
	}
	my %r = (ok => 0, problems => [], tables => 0, indexes => 0, node => $node);
	my ($rc, $out) = $a{pgpb}->restore($a{backup}{id}, $pgdata, \%ts_map);
	if ($rc)
	{
		push @{ $r{problems} }, "pg_probackup restore of $a{backup}{id} failed (exit $rc):\n$out";
		return \%r;
	}
	chmod 0700, $pgdata;
	unlink "$pgdata/standby.signal";
	if (!start_restored($node, fail_ok => 1))
	{
		push @{ $r{problems} }, "the cluster restored from $a{backup}{id} did not start: see "
		  . $node->logfile;
		return \%r;
	}
	my $prepared = prepared_transactions($node);
	if ($a{digests})
	{
		my %report;
		push @{ $r{problems} },
		  compare_digests($a{digests}, cluster_digests($node, large_objects => 1), report => \%report);
		$r{tables} = scalar @{ $report{tables} };
		my ($want, $got) = map { join(' ', map { $_->[0] } @$_) } $a{digests}{prepared}, $prepared;
		push @{ $r{problems} }, "prepared transactions differ: source [$want], restored [$got]"
		  if $want ne $got;
	}
	# amcheck's verify_heapam checks the TOAST values of the deleted tuples
	# that a snapshot could still see, and an old prepared transaction keeps
	# every recent one so; a TOAST index rebuilt since (REINDEX
	# CONCURRENTLY) does not index the chunks such a tuple points to, and
	# verify_heapam reports them missing, on the source as well.  The
	# restored copy is thrown away: roll them back first.
	for my $p (@$prepared)
	{
		$node->safe_psql($p->[1], "ROLLBACK PREPARED '$p->[0]'");
	}
	my $am = amcheck_cluster($node);
	push @{ $r{problems} }, @{ $am->{problems} };
	$r{indexes} = $am->{indexes};
	$node->stop('fast', fail_ok => 1);
	$r{ok} = !@{ $r{problems} };
	rmtree($node->basedir) if $r{ok} && !$a{keep};
	return \%r;
}

# The prepared transactions of $node: [ [gid, database] ], by gid.
sub prepared_transactions
{
	my ($node) = @_;
	return [ map { [ split /\|/ ] } split /\n/,
		$node->safe_psql('postgres', 'SELECT gid, database FROM pg_prepared_xacts ORDER BY gid') ];
}

1;
