# Copyright (c) the ptrack authors
#
# PtrackGdb.pm -- hold a backend at a chosen point with gdb, for the tests
# that must put something (a checkpoint, an LSN) between two steps of one
# server function (t/016_bypass_writes.pl, t/041_page_lsn_marks.pl).
#
#   my $g = gdb_session($node, $flags_dir, @lines);
#       opens a background psql session on $node and attaches gdb, in batch
#       mode, to its backend, with a script of "set pagination off",
#       "set confirm off", @lines, then "delete", "detach", touching the
#       flag file DETACHED and "quit"; returns once gdb has set its first
#       breakpoint.  The script waits for a flag file X with the line
#       "shell while [ ! -e <flags>/X ]; do sleep 0.1; done" and signals
#       one with "shell touch <flags>/Y" (flag_path($g, 'X') gives the path).
#       $g holds session (the psql session), pid (its backend), flags.
#   gdb_wait($g, $what)
#       until gdb's output matches $what (a regex) or the flag file $what
#       (a name) exists; dies with what gdb said after the test timeout.
#   gdb_output($g)   what gdb printed so far.
#   gdb_release($g, $name)   touches the flag file $name.
#   gdb_finish($g)   waits for DETACHED, then for gdb to exit.
#
# gdb must be on PATH (scripts/run-tests.sh installs it); the test bails out
# otherwise.  The flag directory is emptied first.

package PtrackGdb;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

our @EXPORT_OK = qw(gdb_session gdb_wait gdb_output gdb_release gdb_finish flag_path);

sub flag_path
{
	my ($g, $name) = @_;
	return "$g->{flags}/$name";
}

sub gdb_session
{
	my ($node, $flags, @lines) = @_;
	my ($gdb) = grep { -x $_ } map { "$_/gdb" } split /:/, $ENV{PATH};
	BAIL_OUT('gdb is not installed: scripts/run-tests.sh installs it (apt-get install gdb)') unless $gdb;
	mkdir $flags unless -d $flags;
	unlink glob("$flags/*");

	my $session = $node->background_psql('postgres');
	my $pid = $session->query_safe('SELECT pg_backend_pid()');
	chomp $pid;

	my $script = "$flags/script.gdb";
	open my $fh, '>', $script or croak "open $script: $!";
	print $fh join("\n", 'set pagination off', 'set confirm off', @lines, 'delete', 'detach',
		"shell touch $flags/DETACHED", 'quit'), "\n";
	close $fh;
	my $g = { session => $session, pid => $pid, flags => $flags, out => '' };
	$g->{run} = IPC::Run::start([ $gdb, '-nx', '-batch', '-p', $pid, '-x', $script ],
		'<', \undef, '>&', \$g->{out});
	gdb_wait($g, qr/Breakpoint 1 at/);
	return $g;
}

sub gdb_wait
{
	my ($g, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until (ref $what ? $g->{out} =~ $what : -e flag_path($g, $what))
	{
		$g->{run}->pump_nb;
		croak "gdb (attached to backend $g->{pid}) never got to $what (is ptrace allowed here?); "
		  . "gdb said:\n$g->{out}"
		  if time() > $deadline || !$g->{run}->pumpable;
		usleep(100_000);
	}
	return;
}

sub gdb_output
{
	my ($g) = @_;
	$g->{run}->pump_nb if $g->{run}->pumpable;
	return $g->{out};
}

sub gdb_release
{
	my ($g, $name) = @_;
	my $path = flag_path($g, $name);
	open my $f, '>', $path or croak "open $path: $!";
	close $f;
	return;
}

sub gdb_finish
{
	my ($g) = @_;
	gdb_wait($g, 'DETACHED');
	$g->{run}->finish;
	return;
}

1;
