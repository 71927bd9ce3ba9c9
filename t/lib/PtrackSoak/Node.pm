# Copyright (c) the ptrack authors
#
# PtrackSoak::Node -- the soak's primary and standbys (scripts/soak.pl), kept
# running through the faults as a DBA would keep them:
#   - a driver connection that a crash restart refuses ("the database system
#     is in recovery mode", "... not yet accepting connections", "... is
#     starting up") or cuts ("terminating connection because of crash of
#     another server process") waits until the server accepts connections
#     again and runs its statement again, for at most $WAIT seconds.  A fault
#     can crash a process long after it was injected (a checkpointer under
#     prlimit --fsize PANICs when its next checkpoint writes the WAL), so
#     every driver statement may race a crash restart;
#   - a server whose recovery fails for want of space on the tiny
#     tablespace's file system gets the reserve file there freed and is
#     started again, and PostgreSQL's own recovery then finishes.  Redo can
#     need more space than the run had when it crashed: it extends free
#     space maps that the original writes left alone (CREATE TABLE AS writes
#     none), and a transaction that the full disk aborted, whose abort
#     record the crash lost, gets its files written again and kept.
#     Once that server is up, the space_freed callback runs (soak.pl: the
#     filled tablespace emptied and the reserve made again at once, as a DBA
#     frees space after such a start), so that the next crash's recovery has
#     a reserve too: the clients would fill the freed space again before
#     PtrackSoak::Faults::lift_limits() ran at the next backup.
# Each wait and each freed reserve is a line of the events log and counted
# (counts()): the summary reports them.
#
#   PtrackSoak::Node::configure(note => \&event, reserve => "$tiny/reserve",
#       space_freed => sub { my ($node) = @_; ... });
#   PtrackSoak::Node->adopt($node);   # a PostgreSQL::Test::Cluster node
#
# A statement that the server cuts because its own backend crashed (no
# "crash of another server process" warning) is not run again: that crash
# is a finding.

package PtrackSoak::Node;

use strict;
use warnings;

use parent -norequire, 'PostgreSQL::Test::Cluster';

use Carp;
use Fcntl qw(O_WRONLY O_CREAT O_APPEND);
use Time::HiRes qw(sleep time);

use PtrackCluster qw(log_position log_since);

# How long a statement waits for a crash restart (PostgreSQL::Test::Cluster
# waits as long for a start).
my $WAIT = 300;

# The reserve file's size.
my $RESERVE_BYTES = 8 * 1048576;

my $REFUSED = qr/the database system is (?:in recovery mode|not yet accepting connections|starting up|shutting down)|terminating connection because of crash of another server process/;

my %config = (note => sub { }, reserve => undef, space_freed => sub { });
my %count = (waits => 0, waited_s => 0, freed => 0);

sub configure
{
	my (%o) = @_;
	@config{ keys %o } = values %o;
	return;
}

sub counts { return {%count}; }

sub adopt
{
	my ($class, $node) = @_;
	croak 'PtrackSoak::Node adopts PostgreSQL::Test::Cluster nodes, not ' . ref($node)
	  unless ref($node) eq 'PostgreSQL::Test::Cluster';
	return bless $node, $class;
}

# --- the reserve on the tiny file system -----------------------------------------

# Makes the reserve file its full size again (as much of it as fits);
# returns the bytes it has.
sub make_reserve
{
	my $path = $config{reserve} // return 0;
	my $have = -s $path // 0;
	return $have if $have >= $RESERVE_BYTES;
	sysopen(my $fh, $path, O_WRONLY | O_CREAT | O_APPEND, 0600) or return $have;
	my $chunk = "\0" x 65536;
	while ($have < $RESERVE_BYTES)
	{
		my $n = syswrite($fh, $chunk, $RESERVE_BYTES - $have < 65536 ? $RESERVE_BYTES - $have : 65536);
		last unless $n;
		$have += $n;
	}
	close $fh;
	return $have;
}

sub _free_reserve
{
	my $path = $config{reserve} // return 0;
	my $have = -s $path or return 0;
	unlink $path or return 0;
	return $have;
}

# --- starts -------------------------------------------------------------------------

sub _postmaster_down
{
	my ($self) = @_;
	open(my $fh, '<', $self->data_dir . '/postmaster.pid') or return 1;
	my $pid = <$fh>;
	close $fh;
	chomp $pid if defined $pid;
	return !($pid && $pid =~ /^\d+$/ && kill(0, $pid));
}

# The startup process's "No space left on device" in the log since $offset
# (after the last time the server was ready), or undef.
sub _recovery_enospc
{
	my ($self, $offset) = @_;
	my $log = log_since($self, $offset);
	my $ready = rindex($log, 'database system is ready to accept');
	$log = substr($log, $ready) if $ready >= 0;
	my ($line) = $log =~ /^(.*\bstartup FATAL:.*No space left on device.*)$/m;
	return $line;
}

# pg_ctl start; when recovery runs out of space, the reserve freed and a
# second start.  Returns as PostgreSQL::Test::Cluster::start does, but dies
# rather than bails out.
sub start
{
	my ($self, %params) = @_;
	my $offset = log_position($self);
	return 1 if $self->SUPER::start(%params, fail_ok => 1);
	return 1 if $self->_free_space_and_start($offset);
	croak 'the server ' . $self->name . ' did not start: see ' . $self->logfile unless $params{fail_ok};
	return 0;
}

# The server stopped on its own since $offset: when its recovery ran out of
# space, frees the reserve and starts it again.  Returns 1 when it started.
sub _free_space_and_start
{
	my ($self, $offset) = @_;
	my $enospc = $self->_recovery_enospc($offset) // return 0;
	my $freed = _free_reserve();
	croak 'the recovery of ' . $self->name . ' ran out of space and the reserve on the tiny file '
	  . "system is already freed: $enospc (see " . $self->logfile . ')'
	  unless $freed;
	$count{freed}++;
	$config{note}->(sprintf('recovery of %s ran out of space (%s): freed the %d MB reserve on the '
			. 'tiny file system, starting it again', $self->name, $enospc =~ s/^.*?FATAL:\s+//r,
			$freed / 1048576));
	$self->_update_pid(-1);
	$self->SUPER::start(fail_ok => 1)
	  or croak 'the server ' . $self->name . ' did not start after the reserve was freed: see '
	  . $self->logfile;
	$config{space_freed}->($self);
	return 1;
}

# After a crash restart began (the log since $offset): waits until the log
# shows $ready_re, starting the server again if its recovery ran out of
# space.
sub wait_crash_restart
{
	my ($self, $offset, $ready_re) = @_;
	my $deadline = time + $WAIT;
	while (time < $deadline)
	{
		return 1 if log_since($self, $offset) =~ $ready_re;
		if ($self->_postmaster_down)
		{
			return 1 if $self->_free_space_and_start($offset);
			croak 'the server ' . $self->name . ' stopped during its crash restart: see ' . $self->logfile;
		}
		sleep 0.1;
	}
	croak 'the server ' . $self->name . " did not come back from a crash restart within $WAIT s: see "
	  . $self->logfile;
}

# --- connections --------------------------------------------------------------------

# PostgreSQL::Test::Cluster::psql (safe_psql, lsn, wait_for_catchup go
# through it), run again while a crash restart refuses or cuts the
# connection.
sub psql
{
	my ($self, $dbname, $sql, %params) = @_;
	my ($waiting, $why, $deadline);
	while (1)
	{
		my ($out, $err) = ('', '');
		my $ret = $self->SUPER::psql($dbname, $sql, %params, stdout => \$out, stderr => \$err,
			on_error_die => 0);
		if ($ret == 2 && ($err =~ /($REFUSED)/ || $self->_postmaster_down))
		{
			($waiting, $why, $deadline) = (time, $1 // 'the server is down', time + $WAIT)
			  unless defined $waiting;
			croak 'the server ' . $self->name . " did not accept connections within $WAIT s after a "
			  . "crash restart (last: $err): see " . $self->logfile
			  if time > $deadline;
			$self->_free_space_and_start(_recent($self)) || croak 'the server ' . $self->name
			  . " stopped during a crash restart ($err): see " . $self->logfile
			  if $self->_postmaster_down;
			sleep 0.2;
			next;
		}
		$self->_report_wait($waiting, $why) if defined $waiting;
		${ $params{stdout} } = $out if $params{stdout};
		${ $params{stderr} } = $err if $params{stderr};
		if ($ret && $params{on_error_die})
		{
			die "psql error: stderr: '$err'\nwhile running psql on $dbname with sql '$sql'" if $ret == 1;
			die "connection error: '$err'\nwhile running psql on $dbname" if $ret == 2;
			die "error running SQL: '$err'\nwhile running psql on $dbname with sql '$sql'" if $ret == 3;
			die "psql returns $ret: '$err'\nwhile running psql on $dbname";
		}
		return wantarray ? ($ret, $out, $err) : $ret;
	}
}

# An offset in the log before the latest crash restart (its last MB).
sub _recent
{
	my ($self) = @_;
	my $pos = log_position($self);
	return $pos > 1048576 ? $pos - 1048576 : 0;
}

sub _report_wait
{
	my ($self, $since, $why) = @_;
	my $s = time - $since;
	$count{waits}++;
	$count{waited_s} += $s;
	# What crashed: the postmaster's line before its last reinitialization.
	my $log = log_since($self, _recent($self));
	my $reinit = rindex($log, 'all server processes terminated; reinitializing');
	my @crashed = $reinit < 0 ? ()
	  : substr($log, 0, $reinit) =~ /^.*?postmaster LOG:\s+(\S+(?: \S+)* process \(PID \d+\) (?:was terminated by signal|exited with exit code) .*)$/mg;
	$config{note}->(sprintf('the driver waited %.1f s for %s to accept connections again (%s)%s',
			$s, $self->name, $why, @crashed ? "; the last crash: $crashed[-1]" : ''));
	return;
}

1;
