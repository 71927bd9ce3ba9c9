# Copyright (c) the ptrack authors
#
# PtrackSoak::Rng -- the soak's one source of randomness (scripts/soak.pl).
#
# Every choice the soak makes (which operation a client runs, its
# arguments, which fault, when a backup is taken) comes from a generator
# derived from the run's seed and a stream name ("driver", "client-2"), so
# that the same seed and options give the same sequence of operations and
# faults in each process, as far as the interleaving of concurrent clients
# allows.  Perl's own rand() is not used: its generator depends on the
# platform's C library, and a forked child would share the parent's state.
#
# The generator is xoshiro128** (Blackman and Vigna), written here on
# 32-bit words so that every product fits in Perl's 64-bit integers; a
# stream's state is the SHA-256 of "seed/stream".  Not for cryptography.
#
#   my $rng = PtrackSoak::Rng->new($seed, 'driver');
#   my $child = $rng->derive('client-2');       # independent stream
#   $rng->below(10);            # 0 .. 9
#   $rng->between(5, 20);       # 5 .. 20
#   $rng->chance(0.3);          # true 30% of the time
#   $rng->pick(@items);
#   $rng->weighted(\%weights);  # a key, with probability weight / sum

package PtrackSoak::Rng;

use strict;
use warnings;

use Carp;
use Digest::SHA qw(sha256);

use constant MASK => 0xFFFFFFFF;

sub new
{
	my ($class, $seed, $stream) = @_;
	croak 'PtrackSoak::Rng->new needs a seed and a stream name'
	  unless defined $seed && defined $stream;
	my @s = unpack('N4', sha256("ptrack-soak/$seed/$stream"));
	$s[0] = 1 unless $s[0] | $s[1] | $s[2] | $s[3];    # never all zero
	return bless { seed => $seed, stream => $stream, s => \@s }, $class;
}

# An independent generator for a sub-stream (a client of this driver).
sub derive
{
	my ($self, $name) = @_;
	return PtrackSoak::Rng->new($self->{seed}, "$self->{stream}/$name");
}

sub _rotl
{
	my ($x, $k) = @_;
	return (($x << $k) | ($x >> (32 - $k))) & MASK;
}

# The next 32-bit output.
sub u32
{
	my ($self) = @_;
	my $s = $self->{s};
	my $result = (_rotl(($s->[1] * 5) & MASK, 7) * 9) & MASK;
	my $t = ($s->[1] << 9) & MASK;
	$s->[2] ^= $s->[0];
	$s->[3] ^= $s->[1];
	$s->[1] ^= $s->[2];
	$s->[0] ^= $s->[3];
	$s->[2] ^= $t;
	$s->[3] = _rotl($s->[3], 11);
	return $result;
}

# A float in [0, 1).
sub float
{
	my ($self) = @_;
	return $self->u32 / 4294967296;
}

# An integer in [0, $n).
sub below
{
	my ($self, $n) = @_;
	croak "below($n): need a positive bound" unless $n >= 1;
	return int($self->float * $n);
}

# An integer in [$lo, $hi].
sub between
{
	my ($self, $lo, $hi) = @_;
	return $lo + $self->below($hi - $lo + 1);
}

sub chance
{
	my ($self, $p) = @_;
	return $self->float < $p;
}

sub pick
{
	my ($self, @items) = @_;
	croak 'pick from an empty list' unless @items;
	return $items[ $self->below(scalar @items) ];
}

# A key of %$weights (name => weight >= 0), with probability weight / total;
# keys are taken in sorted order, so the result depends only on the stream.
sub weighted
{
	my ($self, $weights) = @_;
	my @keys = grep { $weights->{$_} > 0 } sort keys %$weights;
	croak 'weighted(): no positive weight' unless @keys;
	my $total = 0;
	$total += $weights->{$_} for @keys;
	my $x = $self->float * $total;
	for my $k (@keys)
	{
		return $k if $x < $weights->{$k};
		$x -= $weights->{$k};
	}
	return $keys[-1];
}

1;
