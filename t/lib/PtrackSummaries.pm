# Copyright (c) the ptrack authors

=pod

=head1 NAME

PtrackSummaries - read wal capture's summary files (pg_wal/ptrack) in TAP tests

=head1 SYNOPSIS

  use PtrackSummaries qw(summaries chain_break describe_summaries lsn_text summary_temp_files);

  my @s = summaries($node->data_dir);   # [ { name, start, end, flags } ] by start
  is(chain_break(@s), '', 'no hole') or diag describe_summaries(@s);

=head1 DESCRIPTION

Reads the headers of the summary files on its own, from the byte layout of
include/ptrack/summary_file.h, so that a test sees what is on disk without
asking the server.  Names are "<16 hex start><16 hex end>.summary"
(src/pg/persist/summary_io.h).

=cut

package PtrackSummaries;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use PtrackCluster;
use PtrackUnits qw(int_to_lsn);

our @EXPORT_OK = qw(summary_dir summaries chain_break describe_summaries lsn_text summary_temp_files
  summary_name copy_summary_as summary_forks_in summary_fork_limits remove_summaries);

=pod

=head1 FUNCTIONS

=over

=item summary_dir($pgdata)

The directory of the summaries (where wal capture keeps its map too).

=item remove_summaries($pgdata)

Removes the summary files (and their .tmp files) of a stopped server, and
nothing else: what a data directory of a version of ptrack without
summaries looks like, or one whose summaries were lost.

=item lsn_text($lsn)

An LSN (an integer) as PostgreSQL prints it: PtrackUnits::int_to_lsn().

=item summary_name($start, $end)

The file name of the summary of [$start, $end).

=item summaries($pgdata)

Every summary file, as hashes { name, start, end, flags, valid }, sorted by
start then by end descending (a file holding another's range first).
valid is false when the header is not a summary header (magic, header
CRC-32C) matching the name (planted or damaged files); start and end come
from the name.

=item chain_break(@summaries)

The first place where the chain breaks (a hole or an overlap), or ''.

=item describe_summaries(@summaries)

"start-end[R]" for each file (R: ends at a redo LSN), for messages.

=item summary_temp_files($pgdata)

The names of the summaries' .tmp files in the directory ("<name>.summary.tmp";
the map's own files, which live there too, are not counted).

=item copy_summary_as($pgdata, $source_name, $start, $end [, $flags])

Writes the summary file of [$start, $end) with the body of $source_name and
its header saying that range (and $flags if given; header CRC-32C
recomputed): a file every
check of the reader passes (this cluster, this server, CRCs, counts) that
holds another range's changes.  Replaces a file of that name; returns the
name.

=item summary_forks_in($path)

The fork records of the summary file at $path, read on their own from the
body's layout (include/ptrack/summary_file.h): a list of
C<{ rel =E<gt> "spc/db/relfilenode/fork", limit =E<gt> N or undef, chunks =E<gt> N }>.
Dies if the file cannot be read.

=item summary_fork_limits($pgdata, $name)

The limits of the fork records of summary $name (include/ptrack/summary_file.h):
a hashref "spc/db/relfilenode/fork" => first block of the limit, for the forks
that have one.  Dies if the file cannot be read (it may have been combined
since it was listed).

=back

=cut

sub summary_dir { my ($pgdata) = @_; return "$pgdata/pg_wal/ptrack"; }

# PtrackUnits::int_to_lsn() under the name the summary tests know it by.
*lsn_text = \&int_to_lsn;

sub summary_name { my ($start, $end) = @_; return sprintf('%016X%016X.summary', $start, $end); }

sub summaries
{
	my ($pgdata) = @_;
	# A listing taken while the follower combines may miss both the combined
	# file (not there yet when listed) and its inputs (removed when opened):
	# list again until no listed file vanished.
	for (1 .. 100)
	{
		my ($vanished, @s) = _list($pgdata);
		return @s unless $vanished;
	}
	croak 'the summary files keep changing while listed';
}

sub _list
{
	my ($pgdata) = @_;
	my $dir = summary_dir($pgdata);
	my ($vanished, @out) = (0);
	opendir(my $dh, $dir) or return (0);
	for my $name (readdir $dh)
	{
		next unless $name =~ /^([0-9A-F]{16})([0-9A-F]{16})\.summary$/;
		my ($ns, $ne) = (hex($1), hex($2));
		my $fh;
		if (!open($fh, '<', "$dir/$name"))
		{
			croak "open $dir/$name: $!" unless $!{ENOENT};
			$vanished = 1;
			next;
		}
		binmode $fh;
		my $header = '';
		my $n = read($fh, $header, 96) // 0;
		close $fh;
		my ($valid, $flags) = (0, 0);
		if ($n == 96 && substr($header, 0, 8) eq 'PTRKSUMM')
		{
			my ($start, $end) = unpack('Q< Q<', substr($header, 32, 16));
			$flags = unpack('L<', substr($header, 68, 4));
			my $crc_ok = unpack('L<', substr($header, 92, 4)) == PtrackCluster::_crc32c(substr($header, 0, 92));
			$valid = $crc_ok && $start == $ns && $end == $ne;
		}
		push @out, { name => $name, start => $ns, end => $ne, flags => $flags, valid => $valid };
	}
	closedir $dh;
	return ($vanished, sort { $a->{start} <=> $b->{start} || $b->{end} <=> $a->{end} } @out);
}

sub chain_break
{
	my @s = @_;
	for my $i (1 .. $#s)
	{
		return sprintf('%s ends at %s but %s starts at %s', $s[ $i - 1 ]{name}, lsn_text($s[ $i - 1 ]{end}),
			$s[$i]{name}, lsn_text($s[$i]{start}))
		  if $s[ $i - 1 ]{end} != $s[$i]{start};
	}
	return '';
}

sub describe_summaries
{
	return join(', ', map { lsn_text($_->{start}) . '-' . lsn_text($_->{end}) . ($_->{flags} & 1 ? 'R' : '') } @_);
}

sub copy_summary_as
{
	my ($pgdata, $source, $start, $end, $flags) = @_;
	my $dir = summary_dir($pgdata);
	open(my $in, '<:raw', "$dir/$source") or croak "open $dir/$source: $!";
	local $/;
	my $data = <$in>;
	close $in;
	croak "$source is not a summary" unless length($data) >= 96 && substr($data, 0, 8) eq 'PTRKSUMM';
	substr($data, 32, 16) = pack('Q< Q<', $start, $end);
	substr($data, 68, 4) = pack('L<', $flags) if defined $flags;
	substr($data, 92, 4) = pack('L<', PtrackCluster::_crc32c(substr($data, 0, 92)));
	my $name = summary_name($start, $end);
	open(my $out, '>:raw', "$dir/$name.planted") or croak "open $dir/$name.planted: $!";
	print $out $data;
	close $out or croak "close: $!";
	rename("$dir/$name.planted", "$dir/$name") or croak "rename to $name: $!";
	return $name;
}

sub _varint
{
	my ($data, $pos) = @_;
	my ($v, $shift) = (0, 0);
	while (1)
	{
		my $b = ord(substr($data, $$pos++, 1));
		$v |= ($b & 0x7F) << $shift;
		last unless $b & 0x80;
		$shift += 7;
	}
	return $v;
}

# The fork records of the summary file at $path (see the POD above).
sub summary_forks_in
{
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or croak "open $path: $!";
	local $/;
	my $data = <$fh>;
	close $fh;
	my ($forks) = unpack('Q<', substr($data, 48, 8));
	my $pos = 96;
	my @out;
	for (1 .. $forks)
	{
		my ($spc, $db, $rfn, $fork, $limit) = unpack('L< L< L< C L<', substr($data, $pos, 17));
		$pos += 17;
		my $chunks = 0;
		# Chunks: kind (0 ends the fork), chunk number, then offsets (1), runs (2) or a bitmap (3).
		while ((my $kind = ord(substr($data, $pos++, 1))) != 0)
		{
			_varint($data, \$pos);
			$chunks++;
			if ($kind == 1) { my $n = _varint($data, \$pos); _varint($data, \$pos) for 1 .. $n; }
			elsif ($kind == 2) { my $n = _varint($data, \$pos); _varint($data, \$pos) for 1 .. 2 * $n; }
			elsif ($kind == 3) { $pos += 8192; }
			else { croak "$path: chunk kind $kind at byte $pos"; }
		}
		push @out,
		  { rel => "$spc/$db/$rfn/$fork", limit => ($limit == 0xFFFFFFFF ? undef : $limit), chunks => $chunks };
	}
	return @out;
}

sub summary_fork_limits
{
	my ($pgdata, $name) = @_;
	return { map { ($_->{rel} => $_->{limit}) } grep { defined $_->{limit} }
		  summary_forks_in(summary_dir($pgdata) . "/$name") };
}

sub remove_summaries
{
	my ($pgdata) = @_;
	my $dir = summary_dir($pgdata);
	opendir(my $dh, $dir) or return;
	for my $name (grep { /^[0-9A-F]{32}\.summary(?:\.tmp)?$/ } readdir $dh)
	{
		unlink("$dir/$name") or croak "unlink $dir/$name: $!";
	}
	closedir $dh;
	return;
}

sub summary_temp_files
{
	my ($pgdata) = @_;
	opendir(my $dh, summary_dir($pgdata)) or return ();
	my @t = grep { /^[0-9A-F]{32}\.summary\.tmp$/ } readdir $dh;
	closedir $dh;
	return @t;
}

1;
