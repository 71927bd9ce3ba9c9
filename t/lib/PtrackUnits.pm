# Copyright (c) the ptrack authors

=pod

=head1 NAME

PtrackUnits - PostgreSQL's units as the TAP tests use them: the block size
and LSNs

=head1 SYNOPSIS

  use PtrackUnits qw(BLCKSZ lsn_to_int int_to_lsn);

  my $blocks = (-s $file) / BLCKSZ;
  cmp_ok(lsn_to_int($init), '<=', lsn_to_int($start), 'init_lsn is not after the start');
  my $next = int_to_lsn(lsn_to_int($lsn) + 1);

=head1 DESCRIPTION

One definition of each, for every module under t/lib and the tests: the
block size of relation files (BLCKSZ, 8192 in every server the suite builds
or uses), and the conversion between an LSN as PostgreSQL prints it
(C<%X/%X>) and a 64-bit integer (the suite needs a Perl with 64-bit
integers).

=over

=item BLCKSZ

8192.

=item lsn_to_int($text)

C<'16/B374D848'> to the integer C<0x16B374D848>.  Dies on anything that is
not an LSN in PostgreSQL's C<%X/%X> text form.

=item int_to_lsn($int)

The inverse of lsn_to_int(): C<0x16B374D848> to C<'16/B374D848'>.

=back

=cut

package PtrackUnits;

use strict;
use warnings;

use Carp;
use Config;
use Exporter 'import';

our @EXPORT_OK = qw(BLCKSZ lsn_to_int int_to_lsn);

croak 'PtrackUnits needs a Perl with 64-bit integers' unless $Config{ivsize} >= 8;

use constant BLCKSZ => 8192;

sub lsn_to_int
{
	my ($text) = @_;
	croak 'lsn_to_int: undefined LSN' unless defined $text;
	$text =~ s/^\s+|\s+$//g;
	my ($hi, $lo) = $text =~ m{^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$}
	  or croak "lsn_to_int: not an LSN: '$text'";
	return (hex($hi) << 32) | hex($lo);
}

sub int_to_lsn
{
	my ($int) = @_;
	return sprintf('%X/%X', ($int >> 32) & 0xFFFFFFFF, $int & 0xFFFFFFFF);
}

1;
