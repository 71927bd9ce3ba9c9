# Copyright (c) the ptrack authors

=pod

=head1 NAME

PtrackOracle - check ptrack_get_pagemapset() against the data directory itself

=head1 SYNOPSIS

  use FindBin;
  use lib "$FindBin::RealBin/lib";
  use PtrackOracle qw(lsn_to_int block_counts missed_blocks pagemapset);

  my $lsn      = $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
  my $baseline = block_counts($node->data_dir);
  # ... workload, then CHECKPOINT and no concurrent writers ...
  my %stats;
  my @misses = missed_blocks($node, $lsn, baseline => $baseline, stats => \%stats);
  is(scalar @misses, 0, 'no block changed since L is missing');

=head1 DESCRIPTION

ptrack promises no false negatives: C<ptrack_get_pagemapset(L)> must list every
block of every permanent relation file that was modified, written, extended or
copied after C<L>.  This module checks that promise from evidence that does not
depend on ptrack at all:

=over

=item * the page LSN oracle

Every WAL-logged change of a page sets the page header's C<pd_lsn> to the end
of its WAL record before the page may be written out (WAL before data).  So a
page found B<on disk> with C<pd_lsn E<gt>= L> was written after the WAL insert
position passed C<L>, and must be listed.

=item * the extension oracle

A block beyond a file's length at C<L> (or any block of a file that did not
exist at C<L>) was extended after C<L>, and must be listed, whatever its LSN
(a freshly extended page is all zeroes, LSN 0).  Needs a C<baseline> taken
with C<block_counts()> B<after> C<L> was read.

=back

Neither oracle can see a page that was rewritten with an unchanged LSN (hint
bits), which the design allows to go either way.

Files are read straight from the data directory of a running server.  Read
them before asking the server (missed_blocks() does so): any page seen on disk
was written before the question was asked, hence must be in the answer.  For
stable counts, quiesce the server first (CHECKPOINT, no concurrent sessions,
autovacuum off).

Page headers are read in the machine's native byte order (C<pd_lsn> is
C<{uint32 xlogid; uint32 xrecoff}>), with BLCKSZ 8192 and 64-bit Perl integers.

Only core Perl and the PostgreSQL TAP modules are used.

=cut

package PtrackOracle;

use strict;
use warnings;

use Carp;
use Config;
use Exporter 'import';
use Test::More ();

our @EXPORT_OK = qw(
  BLCKSZ
  page_lsns
  relation_files
  block_counts
  pagemapset
  decode_pagemap
  lsn_to_int
  int_to_lsn
  missed_blocks
  show_misses
  no_misses_ok
  listed_ok
  mismatch_blocks
);

use PtrackUnits qw(BLCKSZ lsn_to_int int_to_lsn);

croak 'PtrackOracle needs a Perl with 64-bit integers'
  unless $Config{ivsize} >= 8;

=pod

=head1 FUNCTIONS

=over

=item lsn_to_int($text), int_to_lsn($int), BLCKSZ

PtrackUnits' own, exported here too for the tests that import them from
this module.

=cut

# An LSN argument given either as text or as an integer.
sub _lsn_arg
{
	my ($lsn) = @_;
	croak 'undefined LSN' unless defined $lsn;
	return $lsn =~ m{/} ? lsn_to_int($lsn) : $lsn + 0;
}

=pod

=item page_lsns($pgdata, $relpath)

The page LSNs (64-bit integers) of every 8 KB page of one segment file,
C<$relpath> relative to C<$pgdata>, in block order; an all-zero page reads as
0.  A trailing partial page (a file being extended while it is read) is left
out.  Returns the empty list if the file vanished (dropped meanwhile).

=cut

sub page_lsns
{
	my ($pgdata, $relpath) = @_;
	my $file = "$pgdata/$relpath";
	my $fh;
	if (!open($fh, '<:raw', $file))
	{
		return () if $!{ENOENT};
		croak "could not open \"$file\": $!";
	}

	my @lsns;
	while (1)
	{
		my $page;
		my $got = read($fh, $page, BLCKSZ);
		croak "could not read \"$file\": $!" unless defined $got;
		last if $got < BLCKSZ;
		my ($xlogid, $xrecoff) = unpack('L L', $page);
		push @lsns, ($xlogid << 32) | $xrecoff;
	}
	close $fh;
	return @lsns;
}

=pod

=item relation_files($pgdata)

Every relation segment file of the data directory: C<global/>,
C<base/E<lt>dbE<gt>/> and C<pg_tblspc/E<lt>spcE<gt>/PG_E<lt>majorE<gt>_*/E<lt>dbE<gt>/>
(the major version is read from C<$pgdata/PG_VERSION>).  Returns a list of
hashrefs sorted by path:

  path         relative to $pgdata, e.g. 'base/5/16385.1'
  dir          the directory part, e.g. 'base/5'
  relfilenode  16385
  fork         'main', 'fsm', 'vm' or 'init'
  segno        0 for the first segment file
  temp         true for a temporary relation's file (t<backend>_<relfilenode>)
  backend      the backend id of a temporary file, else undef
  unlogged     true for a non-init fork of a relation with an init fork
  size         bytes
  nblocks      whole 8 KB pages

Temporary files are included (flagged) so that tests can find them; filter on
C<temp> and C<unlogged> for the permanent relation files a backup copies.
Other files (pg_filenode.map, PG_VERSION, pg_internal.init, ...) are skipped.

=cut

my $relfile_re = qr/^(?:t(\d+)_)?([1-9]\d*)(?:_(fsm|vm|init))?(?:\.([1-9]\d*))?$/;

sub _list_dir
{
	my ($dir) = @_;
	my $dh;
	if (!opendir($dh, $dir))
	{
		return () if $!{ENOENT};
		croak "could not open directory \"$dir\": $!";
	}
	my @names = grep { $_ ne '.' && $_ ne '..' } readdir($dh);
	closedir $dh;
	return sort @names;
}

sub relation_files
{
	my ($pgdata) = @_;

	my @dirs = ('global');
	push @dirs, map { "base/$_" } grep { /^[1-9]\d*$/ } _list_dir("$pgdata/base");

	my $major;
	if (open(my $fh, '<', "$pgdata/PG_VERSION"))
	{
		$major = <$fh>;
		close $fh;
		chomp $major if defined $major;
	}
	croak "could not read $pgdata/PG_VERSION" unless defined $major && $major =~ /^\d+$/;
	foreach my $spc (grep { /^[1-9]\d*$/ } _list_dir("$pgdata/pg_tblspc"))
	{
		foreach my $version (grep { /^PG_${major}_\d+$/ }
			_list_dir("$pgdata/pg_tblspc/$spc"))
		{
			push @dirs, map { "pg_tblspc/$spc/$version/$_" }
			  grep { /^[1-9]\d*$/ }
			  _list_dir("$pgdata/pg_tblspc/$spc/$version");
		}
	}

	my @files;
	foreach my $dir (@dirs)
	{
		my @in_dir;
		my %has_init;
		foreach my $name (_list_dir("$pgdata/$dir"))
		{
			my ($backend, $relfilenode, $fork, $segno) = $name =~ $relfile_re
			  or next;
			my @st = stat("$pgdata/$dir/$name") or next;   # dropped meanwhile
			next unless -f _;
			$fork //= 'main';
			$has_init{$relfilenode} = 1 if $fork eq 'init' && !defined $backend;
			push @in_dir,
			  {
				path => "$dir/$name",
				dir => $dir,
				relfilenode => $relfilenode + 0,
				fork => $fork,
				segno => defined $segno ? $segno + 0 : 0,
				temp => defined $backend ? 1 : 0,
				backend => defined $backend ? $backend + 0 : undef,
				size => $st[7],
				nblocks => int($st[7] / BLCKSZ),
			  };
		}
		foreach my $f (@in_dir)
		{
			$f->{unlogged} =
			  (!$f->{temp} && $f->{fork} ne 'init' && $has_init{ $f->{relfilenode} })
			  ? 1
			  : 0;
		}
		push @files, @in_dir;
	}
	return sort { $a->{path} cmp $b->{path} } @files;
}

=pod

=item block_counts($pgdata)

A snapshot of the file lengths, for the extension oracle: hashref
C<path =E<gt> nblocks> of every permanent (not temporary, not unlogged)
relation segment file.  Take it right B<after> reading the LSN it goes with.

=cut

sub block_counts
{
	my ($pgdata) = @_;
	my %counts;
	foreach my $f (relation_files($pgdata))
	{
		next if $f->{temp} || $f->{unlogged};
		$counts{ $f->{path} } = $f->{nblocks};
	}
	return \%counts;
}

=pod

=item decode_pagemap($hex)

The block numbers whose bits are set in a pagemap given as hex (bit for block
C<b> is byte C<b / 8>, mask C<1 E<lt>E<lt> (b % 8)>), in ascending order.

=cut

sub decode_pagemap
{
	my ($hex) = @_;
	croak "decode_pagemap: not hex: '$hex'" unless $hex =~ /^(?:[0-9a-fA-F]{2})*$/;
	my @blocks;
	my $nbytes = length($hex) / 2;
	for (my $i = 0; $i < $nbytes; $i++)
	{
		my $byte = hex(substr($hex, 2 * $i, 2));
		next unless $byte;
		for my $bit (0 .. 7)
		{
			push @blocks, 8 * $i + $bit if $byte & (1 << $bit);
		}
	}
	return @blocks;
}

=pod

=item pagemapset($node, $dbname, $lsn_text, %opts)

Runs C<ptrack_get_pagemapset($lsn_text)> in database C<$dbname> and returns a
hashref C<path =E<gt> { pagecount, blocks =E<gt> [block numbers set], rows }>,
where C<rows> counts the rows that carried this path (the contract is one).
The function is called schema-qualified (C<schema =E<gt> 'name'>, default
public) with its argument cast to pg_lsn.
Dies if the call fails.

=cut

sub pagemapset
{
	my ($node, $dbname, $lsn_text, %opts) = @_;
	$lsn_text = int_to_lsn($lsn_text) unless $lsn_text =~ m{/};
	my $fn = ($opts{schema} // 'public') . '.ptrack_get_pagemapset';

	# Schema-qualified, with a typed argument (README "Schema safety").
	my $out = $node->safe_psql($dbname,
		"SELECT path, pagecount, encode(pagemap, 'hex') FROM $fn('$lsn_text'::pg_lsn)");

	my %map;
	foreach my $line (split /\n/, $out)
	{
		next if $line eq '';
		my ($path, $pagecount, $hex) = split /\|/, $line, 3;
		croak "pagemapset: unexpected output line '$line'" unless defined $hex;
		my $entry = $map{$path} //= { pagecount => 0, blocks => [], rows => 0 };
		$entry->{rows}++;
		$entry->{pagecount} = $pagecount + 0;
		$entry->{blocks} = [ decode_pagemap($hex) ];
	}
	return \%map;
}

=pod

=item missed_blocks($node, $lsn, %opts)

The oracle.  C<$lsn> is the start LSN C<L> (text or integer).  Reads every page
of every permanent relation file of the checked forks, then calls
ptrack_get_pagemapset(L), and returns the list of misses (empty means pass):

  "base/5/16385 block 12 lsn 0/3A1F2C8"            page LSN >= L, not listed
  "base/5/16385 block 40 extended after L (had 38 blocks)"   needs baseline

Options:

  forks     arrayref of forks to check, default ['main']
            ('vm' and 'init' pages carry LSNs too; 'fsm' is not WAL-logged)
  baseline  hashref from block_counts() taken just after L: also require
            every block extended after L to be listed (all forks but fsm)
  dbname    database to call the function in, default 'postgres'
  schema    schema of the extension, default public
  stats     hashref filled with the counts below
  quiet     do not note() the counts

Counts (also sent to note() unless quiet):

  files             files checked
  blocks            blocks checked
  at_or_after       blocks whose page LSN >= L
  at_or_after_listed    ... of which listed
  extended          blocks extended after L (baseline only)
  extended_listed   ... of which listed
  listed            listed blocks of the checked files
  listed_below      listed blocks of the checked files whose page LSN < L and
                    that were not extended after L: false positives, or
                    writes that did not change the LSN (hint bits)
  rows, listed_total    rows and blocks of the whole pagemapset
  pagemapset        the decoded pagemapset itself (as pagemapset() returns)

=cut

sub missed_blocks
{
	my ($node, $lsn, %opts) = @_;
	my $since = _lsn_arg($lsn);
	my $since_text = int_to_lsn($since);
	my $forks = $opts{forks} // ['main'];
	my %check_fork = map { $_ => 1 } @$forks;
	my $baseline = $opts{baseline};
	my $pgdata = $node->data_dir;

	# 1. Look at the disk first: whatever is seen was written before step 2.
	my @checked;
	foreach my $f (relation_files($pgdata))
	{
		next if $f->{temp} || $f->{unlogged};
		my $want_lsn = $check_fork{ $f->{fork} };
		my $want_ext = defined $baseline && $f->{fork} ne 'fsm';
		next unless $want_lsn || $want_ext;
		my @lsns = page_lsns($pgdata, $f->{path});
		my $had = defined $baseline ? ($baseline->{ $f->{path} } // 0) : undef;
		push @checked, { file => $f, lsns => \@lsns, had => $had, lsn_checked => $want_lsn };
	}

	# 2. Ask the server.
	my $map = pagemapset($node, $opts{dbname} // 'postgres', $since_text,
		schema => $opts{schema});

	# 3. Compare.
	my %s = map { $_ => 0 }
	  qw(files blocks at_or_after at_or_after_listed extended extended_listed
	  listed listed_below rows listed_total);
	$s{rows} = scalar keys %$map;
	$s{listed_total} += scalar @{ $_->{blocks} } foreach values %$map;

	my @misses;
	foreach my $c (@checked)
	{
		my $path = $c->{file}{path};
		my %listed;
		%listed = map { $_ => 1 } @{ $map->{$path}{blocks} } if $map->{$path};
		my $lsns = $c->{lsns};
		$s{files}++;
		for my $b (0 .. $#$lsns)
		{
			my $page_lsn = $lsns->[$b];
			my $is_listed = $listed{$b} ? 1 : 0;
			my $extended = defined $c->{had} && $b >= $c->{had};
			my $counted = 0;
			if ($c->{lsn_checked})
			{
				$counted = 1;
				$s{blocks}++;
				$s{listed} += $is_listed;
				if ($page_lsn >= $since)
				{
					$s{at_or_after}++;
					$s{at_or_after_listed} += $is_listed;
					push @misses, sprintf('%s block %d lsn %s', $path, $b, int_to_lsn($page_lsn))
					  unless $is_listed;
				}
			}
			if ($extended)
			{
				$s{extended}++;
				$s{extended_listed} += $is_listed;
				push @misses,
				  sprintf('%s block %d extended after L (had %d blocks)', $path, $b, $c->{had})
				  unless $is_listed || ($counted && $page_lsn >= $since);
			}
			$s{listed_below}++
			  if $counted && $is_listed && $page_lsn < $since && !$extended;
		}
	}
	$s{pagemapset} = $map;

	Test::More::note(
		sprintf(
			'oracle at %s: %d files, %d blocks checked, %d with page LSN >= L (%d listed), '
			  . '%d extended after L (%d listed), %d listed with LSN < L; '
			  . 'pagemapset: %d rows, %d blocks; %d misses',
			$since_text, @s{qw(files blocks at_or_after at_or_after_listed extended extended_listed
			  listed_below rows listed_total)}, scalar @misses))
	  unless $opts{quiet};

	%{ $opts{stats} } = %s if $opts{stats};
	return @misses;
}

=pod

=item show_misses(@misses)

The misses missed_blocks() returned, for a diag() after a failed test: their
count and the first 20; '' when there are none.

=cut

sub show_misses
{
	my (@misses) = @_;
	return '' unless @misses;
	my $n = @misses;
	splice(@misses, 20) if @misses > 20;
	return join("\n", "$n misses, first ones:", @misses);
}

=pod

=item no_misses_ok($node, $lsn, $name, %opts)

One test named $name: missed_blocks($node, $lsn, %opts) finds no miss (the
first misses go to diag() otherwise).  Returns the stats hashref of
missed_blocks(), for the caller's checks that the oracle saw enough.

=cut

sub no_misses_ok
{
	my ($node, $lsn, $name, %opts) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my %stats;
	my @misses = missed_blocks($node, $lsn, %opts, stats => \%stats);
	Test::More::is(scalar @misses, 0, $name) or Test::More::diag(show_misses(@misses));
	return \%stats;
}

=pod

=item listed_ok($map, $re, $name, %opts)

One test named $name: some path of the pagemapset $map (a hashref keyed by
path, as pagemapset() or PtrackBackup's C<pagemap> statistic) matches $re.
On failure, diag() says how many rows there were, which rows share the
directory of what was expected, and, with C<pgdata =E<gt> $dir>, which
relation files matching $re are on disk (size, temporary or unlogged): what
ptrack was expected to list.

=cut

sub listed_ok
{
	my ($map, $re, $name, %opts) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	my @paths = sort keys %$map;
	return 1 if Test::More::ok((grep { $_ =~ $re } @paths), $name);

	my @diag = (sprintf('no pagemapset row matches %s (%d rows)', $re, scalar @paths));
	if (defined $opts{pgdata})
	{
		my @on_disk = grep { $_->{path} =~ $re } relation_files($opts{pgdata});
		push @diag,
		  @on_disk
		  ? 'relation files on disk that match: ' . _first_few(
			map {
				"$_->{path} ($_->{size} bytes"
				  . ($_->{temp} ? ', temporary' : '')
				  . ($_->{unlogged} ? ', unlogged' : '') . ')'
			} @on_disk)
		  : 'no relation file on disk matches';
		# What ptrack did list next to the files it was expected to list.
		my %dirs = map { $_->{dir} => 1 } @on_disk;
		my @near = grep { m{^(.*)/} && $dirs{$1} } @paths;
		push @diag, 'rows in the same directories: ' . (@near ? _first_few(@near) : 'none')
		  if %dirs;
	}
	push @diag, 'first rows: ' . (@paths ? _first_few(@paths) : 'none');
	Test::More::diag(join "\n", @diag);
	return 0;
}

=pod

=item mismatch_blocks($src, $dst, $db, $table, %opts)

For a table of database $db whose rows differ between $src and $dst, where
$dst was restored from a physical backup of $src (or of a standby of it), so
that a row keeps its block: the heap blocks whose rows differ, one line each
(the first 20, then how many more):

  postgres.big: base/5/16385.1 block 3000 (relation block 134072): source
  1 rows, restored 1 rows; page LSN on disk: source 0/5A1B2C8, restored
  0/3001000; listed by ptrack_get_pagemapset(0/3000028) now: no

With C<since =E<gt> L>, asks ptrack_get_pagemapset(L) (on C<tracked>, default
$src) whether it lists each block now.  For a diag() after a failed
comparison: a block ptrack missed comes back from the older backup.

=cut

sub mismatch_blocks
{
	my ($src, $dst, $db, $table, %opts) = @_;
	my $sql = "SELECT (ctid::text::point)[0]::bigint, count(*), "
	  . "md5(string_agg(md5(r::text), '' ORDER BY md5(r::text))) "
	  . "FROM ONLY $table r GROUP BY 1";
	my %rows;    # block => [ source "count|digest", restored "count|digest" ]
	foreach my $side (0, 1)
	{
		my $node = $side ? $dst : $src;
		foreach my $line (split /\n/, $node->safe_psql($db, $sql))
		{
			my ($blk, $count, $digest) = split /\|/, $line;
			$rows{$blk}[$side] = [ $count, $digest ];
		}
	}
	my @blocks = sort { $a <=> $b } grep {
		my ($s, $d) = @{ $rows{$_} }[ 0, 1 ];
		!$s || !$d || $s->[1] ne $d->[1]
	} keys %rows;
	return ("$db.$table: no block differs (rows moved between blocks?)") unless @blocks;

	my $relpath = $src->safe_psql($db, "SELECT pg_relation_filepath('$table')");
	my $tracked = $opts{tracked} // $src;
	my $listed = defined $opts{since}
	  ? pagemapset($tracked, $opts{dbname} // 'postgres', $opts{since}, schema => $opts{schema})
	  : undef;
	my $relseg_blocks = 131072;    # 1 GB segments of 8 KB blocks
	my @lines;
	foreach my $blk (@blocks[ 0 .. ($#blocks < 19 ? $#blocks : 19) ])
	{
		my $segno = int($blk / $relseg_blocks);
		my $segpath = $segno ? "$relpath.$segno" : $relpath;
		my $segblk = $blk % $relseg_blocks;
		my ($s, $d) = @{ $rows{$blk} }[ 0, 1 ];
		my $line = sprintf('%s.%s: %s block %d (relation block %d): source %s rows, restored %s rows',
			$db, $table, $segpath, $segblk, $blk, $s ? $s->[0] : 0, $d ? $d->[0] : 0);
		$line .= sprintf('; page LSN on disk: source %s, restored %s',
			_page_lsn_text($src->data_dir, $segpath, $segblk),
			_page_lsn_text($dst->data_dir, $segpath, $segblk));
		if ($listed)
		{
			my $is = $listed->{$segpath} && grep { $_ == $segblk } @{ $listed->{$segpath}{blocks} };
			$line .= "; listed by ptrack_get_pagemapset($opts{since}) now: " . ($is ? 'yes' : 'no');
		}
		push @lines, $line;
	}
	push @lines, "$db.$table: " . (@blocks - 20) . ' more blocks differ' if @blocks > 20;
	return @lines;
}

# The page LSN of one block of a file, as text, or why there is none.
sub _page_lsn_text
{
	my ($pgdata, $relpath, $blk) = @_;
	open(my $fh, '<:raw', "$pgdata/$relpath") or return 'no file';
	my $page;
	my $got = sysseek($fh, $blk * BLCKSZ, 0) ? sysread($fh, $page, 8) : 0;
	close $fh;
	return 'beyond the end' unless $got && $got == 8;
	my ($xlogid, $xrecoff) = unpack('L L', $page);
	return int_to_lsn(($xlogid << 32) | $xrecoff);
}

# The first 20 items of a list, comma-separated, and how many were left out.
sub _first_few
{
	my (@items) = @_;
	my $more = @items > 20 ? ', ... (' . (@items - 20) . ' more)' : '';
	splice(@items, 20) if @items > 20;
	return join(', ', @items) . $more;
}

=pod

=back

=cut

1;
