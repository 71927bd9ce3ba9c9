# Copyright (c) the ptrack authors
#
# PtrackSoak::Log -- the soak's event log: one line per operation, fault,
# backup and check, written by the driver and by every client process into
# one file (each line with a single append, so lines of concurrent writers
# never mix).  When the soak finds a miss or a failed restore it prints the
# last lines of this file: what the clients and the driver did just before.
#
#   my $log = PtrackSoak::Log->new("$run/events.log");
#   $log->line('c2', 'insert c2_t1 (300 rows): ok');
#   print for $log->tail(30);

package PtrackSoak::Log;

use strict;
use warnings;

use Carp;
use Fcntl qw(O_WRONLY O_APPEND O_CREAT SEEK_END);
use POSIX ();
use Time::HiRes ();

sub new
{
	my ($class, $path) = @_;
	return bless { path => $path, fh => undef, pid => 0 }, $class;
}

sub path { return $_[0]{path}; }

# Appends "HH:MM:SS.mmm <who> <text>" in one write(2).  A forked child
# reopens the file (its own descriptor, O_APPEND).
sub line
{
	my ($self, $who, $text) = @_;
	if (!$self->{fh} || $self->{pid} != $$)
	{
		sysopen(my $fh, $self->{path}, O_WRONLY | O_APPEND | O_CREAT, 0644)
		  or croak "could not open $self->{path}: $!";
		$self->{fh} = $fh;
		$self->{pid} = $$;
	}
	my $t = Time::HiRes::time();
	$text =~ s/\s*\n\s*/ | /g;
	my $msg = sprintf("%s.%03d %-6s %s\n",
		POSIX::strftime('%H:%M:%S', localtime $t), ($t - int $t) * 1000, $who, $text);
	syswrite($self->{fh}, $msg);
	return;
}

# The last $n lines of the log.
sub tail
{
	my ($self, $n) = @_;
	open(my $fh, '<', $self->{path}) or return ();
	my $size = -s $fh;
	my $want = 400 * $n;
	seek($fh, $size > $want ? $size - $want : 0, 0);
	local $/;
	my $text = <$fh> // '';
	close $fh;
	my @lines = split /\n/, $text;
	shift @lines if $size > $want && @lines;    # a partial first line
	splice(@lines, 0, @lines - $n) if @lines > $n;
	return @lines;
}

1;
