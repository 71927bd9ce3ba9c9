# Copyright (c) the ptrack authors
#
# PtrackSoak::Faults -- what the soak (scripts/soak.pl) does to the servers
# while the clients run: crashes of every kind, a full disk, settings that
# change how the WAL looks or how ptrack keeps it, and with --standby a
# failover.  Each fault leaves the cluster running again (or fails the soak
# if it cannot: a server that does not come back is a finding too).  A
# crash restart that a fault causes later (a limited checkpointer PANICs at
# its next checkpoint) is waited out by every driver statement
# (PtrackSoak::Node).
#
#   immediate_stop     pg_ctl stop -m immediate, start
#   kill_postmaster    kill -9 of the postmaster and then of its children,
#                      as a power cut would leave them, start
#   kill_checkpointer, kill_follower (wal), kill_backend (an active
#                      client backend, in the middle of a write)
#                      kill -9: the postmaster's crash restart
#   restart            a clean restart (pg_ctl stop -m fast, start)
#   file_size_limit    prlimit --fsize on a client backend, the
#                      checkpointer or (wal) the WAL follower: its writes
#                      past the limit fail as on a full disk, until
#                      lift_limits() (called before every backup)
#   fill_tablespace    the tablespace on a tiny file system (root only:
#                      scripts/soak.sh mounts it) filled up; freed again by
#                      lift_limits().  A crash while it is full can leave a
#                      recovery that needs more space: PtrackSoak::Node
#                      frees the reserve file there and starts again
#   summary_memory     ptrack.wal_summary_memory at its minimum (4MB), or
#                      back to its default (wal)
#   full_page_writes   full_page_writes toggled; a crash fault turns it on
#                      again first (%CRASHES says why)
#   drop_slot          the WAL follower terminated and its replication slot
#                      dropped (wal)
#   standby_crash      (--standby) kill -9 of the standby's postmaster and
#                      children, start
#   failover           (--standby) the primary stopped (immediate or fast),
#                      the standby promoted and the clients sent to it; the
#                      old primary rewound with pg_rewind and started as the
#                      new standby, or replaced by a standby rebuilt from a
#                      base backup of the new primary
#
# The cluster is a hash shared with the driver:
#   { primary => $node, standby => $node or undef, run => $dir, log,
#     capture => 'hooks'|'wal', tiny => 1 if soak_tiny exists (tiny_dir: the
#     tiny file system's mount point),
#     new_standby => sub { ($name, $from_node) -> new standby node } }

package PtrackSoak::Faults;

use strict;
use warnings;

use Carp;
use Fcntl ();
use File::Path qw(rmtree);
use IPC::Run;
use Time::HiRes qw(sleep time);

use PtrackCluster qw(log_position rewind_from);
use PtrackSoak::Node;
use PtrackSoak::Workload qw(write_primary backup_lock);

my %WEIGHTS = (
	immediate_stop => 3,
	kill_postmaster => 3,
	kill_checkpointer => 2,
	kill_follower => 2,
	kill_backend => 3,
	restart => 1,
	file_size_limit => 2,
	fill_tablespace => 1.5,
	summary_memory => 1,
	full_page_writes => 1,
	drop_slot => 1.5,
	standby_crash => 2,
	failover => 2,
);

sub new
{
	my ($class, $cluster) = @_;
	return bless { cl => $cluster, limited => [], filled => 0, settings => {} }, $class;
}

# The faults that apply to this run, with their weights.
sub weights
{
	my ($self) = @_;
	my $cl = $self->{cl};
	my %w = %WEIGHTS;
	delete @w{qw(kill_follower summary_memory drop_slot)} unless $cl->{capture} eq 'wal';
	delete $w{fill_tablespace} unless $cl->{tiny};
	delete @w{qw(standby_crash failover)} unless $cl->{standby};
	return \%w;
}

# The faults that crash a server, now or at a later checkpoint.  No crash
# follows WAL written with full_page_writes off: PostgreSQL's BRIN redo
# (brin_xlog_insert_update() in brin_xlog.c, 15 to 18) takes the block
# number of the buffer it asked for without checking that the page was
# found, and with no full-page image a page that a later truncation removed
# is not found: the startup process dies of SIGSEGV and the cluster never
# recovers.  Such a fault first turns full_page_writes back on.
my %CRASHES = map { $_ => 1 }
  qw(immediate_stop kill_postmaster kill_checkpointer kill_follower kill_backend
  file_size_limit standby_crash failover);

# Injects fault $kind; returns a line saying what was done.  Dies if the
# cluster does not come back.
sub inject
{
	my ($self, $kind, $rng) = @_;
	my $sub = $self->can("fault_$kind") or croak "no fault $kind";
	my $first = '';
	if ($CRASHES{$kind} && $self->{settings}{fpw_off})
	{
		$self->_full_page_writes_on;
		$first = 'full_page_writes back on and two checkpoints first; ';
	}
	return $first . $sub->($self, $rng);
}

# --- helpers ----------------------------------------------------------------------

sub _postmaster_pid
{
	my ($node) = @_;
	open(my $fh, '<', $node->data_dir . '/postmaster.pid') or return undef;
	my $pid = <$fh>;
	close $fh;
	chomp $pid if defined $pid;
	return $pid && $pid =~ /^\d+$/ ? $pid : undef;
}

# The PIDs whose parent is $ppid (from /proc).
sub _children
{
	my ($ppid) = @_;
	my @kids;
	opendir(my $dh, '/proc') or return ();
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open(my $fh, '<', "/proc/$pid/stat") or next;
		my $stat = <$fh> // '';
		close $fh;
		# pid (comm) state ppid ...: comm may hold spaces and parentheses.
		my ($parent) = $stat =~ /\)\s+\S+\s+(\d+)/ or next;
		push @kids, $pid if $parent == $ppid;
	}
	closedir $dh;
	return @kids;
}

sub _wait_gone
{
	my (@pids) = @_;
	my $deadline = time + 60;
	while (time < $deadline)
	{
		@pids = grep { kill(0, $_) } @pids;
		return 1 unless @pids;
		sleep 0.05;
	}
	croak "processes @pids did not go away after kill -9";
}

# Starts $node (stopped, or killed) and waits until it accepts connections
# (and, for a primary, has left recovery).
sub start_node
{
	my ($node, $standby) = @_;
	$node->start(fail_ok => 1)
	  or croak 'the server ' . $node->name . ' did not start: see ' . $node->logfile;
	wait_ready($node, $standby);
	return;
}

sub wait_ready
{
	my ($node, $standby) = @_;
	my $want = $standby ? 'SELECT pg_is_in_recovery()' : 'SELECT NOT pg_is_in_recovery()';
	$node->poll_query_until('postgres', $want)
	  or croak 'the server ' . $node->name . ' is not ready: see ' . $node->logfile;
	return;
}

# kill -9 of $pid, a child of $node's postmaster; waits for the crash
# restart to end.
sub _kill_child
{
	my ($node, $pid, $standby) = @_;
	my $offset = log_position($node);
	kill('KILL', $pid) or return 0;
	$node->wait_for_log(qr/all server processes terminated; reinitializing/, $offset);
	my $ready = $standby ? qr/database system is ready to accept read.only connections/
	  : qr/database system is ready to accept connections/;
	$node->wait_crash_restart($offset, $ready);
	wait_ready($node, $standby);
	return 1;
}

sub _pid_of
{
	my ($node, $where) = @_;
	my $pid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE $where ORDER BY pid LIMIT 1");
	return $pid =~ /^\d+$/ ? $pid : undef;
}

# kill -9 of the postmaster, then of every process it started.
sub _kill_postmaster
{
	my ($node, $standby) = @_;
	my $pm = _postmaster_pid($node) // croak 'no postmaster.pid in ' . $node->data_dir;
	my @kids = _children($pm);
	$node->kill9;
	kill 'KILL', @kids if @kids;
	_wait_gone($pm, @kids);
	start_node($node, $standby);
	return scalar @kids;
}

# --- the faults -------------------------------------------------------------------

sub fault_immediate_stop
{
	my ($self) = @_;
	my $p = $self->{cl}{primary};
	$p->stop('immediate', fail_ok => 1);
	start_node($p);
	return 'pg_ctl stop -m immediate, start';
}

sub fault_kill_postmaster
{
	my ($self) = @_;
	my $n = _kill_postmaster($self->{cl}{primary});
	return "kill -9 of the postmaster and its $n children, start";
}

sub fault_restart
{
	my ($self) = @_;
	my $p = $self->{cl}{primary};
	$p->stop('fast', fail_ok => 1) or croak 'pg_ctl stop -m fast failed: see ' . $p->logfile;
	start_node($p);
	return 'pg_ctl stop -m fast, start';
}

sub _kill_process
{
	my ($self, $what, $where) = @_;
	my $p = $self->{cl}{primary};
	my $pid = _pid_of($p, $where) // return "no $what to kill";
	_kill_child($p, $pid) or return "$what (PID $pid) was gone";
	return "kill -9 of the $what (PID $pid), crash restart";
}

sub fault_kill_checkpointer
{
	my ($self) = @_;
	return $self->_kill_process('checkpointer', "backend_type = 'checkpointer'");
}

sub fault_kill_follower
{
	my ($self) = @_;
	return $self->_kill_process('WAL follower', "backend_type = 'ptrack WAL follower'");
}

sub fault_kill_backend
{
	my ($self) = @_;
	my $p = $self->{cl}{primary};
	# An active client backend (a write in progress), else any of them.
	my $pid = _pid_of($p, "backend_type = 'client backend' AND state = 'active' "
		  . "AND pid <> pg_backend_pid() AND datname <> 'postgres'")
	  // _pid_of($p, "backend_type = 'client backend' AND pid <> pg_backend_pid() "
		  . "AND datname <> 'postgres'")
	  // return 'no client backend to kill';
	my $query = $p->safe_psql('postgres',
		"SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 80) FROM pg_stat_activity WHERE pid = $pid");
	_kill_child($p, $pid) or return "client backend $pid was gone";
	return "kill -9 of client backend $pid ($query), crash restart";
}

sub fault_file_size_limit
{
	my ($self, $rng) = @_;
	my $p = $self->{cl}{primary};
	my %targets = (backend => 3, checkpointer => 1);
	$targets{follower} = 1 if $self->{cl}{capture} eq 'wal';
	my $target = $rng->weighted(\%targets);
	my ($pid, $limit);
	if ($target eq 'backend')
	{
		# 16 MB: the WAL segments can still be written, relation files
		# above that size cannot grow or be written beyond it.
		$pid = _pid_of($p, "backend_type = 'client backend' AND pid <> pg_backend_pid() "
			  . "AND datname = 'soak'");
		$limit = 16 * 1048576;
	}
	elsif ($target eq 'checkpointer')
	{
		$pid = _pid_of($p, "backend_type = 'checkpointer'");
		$limit = $rng->pick(1, 4, 16) * 1048576;
	}
	else
	{
		$pid = _pid_of($p, "backend_type = 'ptrack WAL follower'");
		$limit = $rng->pick(16, 64, 1024) * 1024;
	}
	return "no $target for a file size limit" unless $pid;
	_prlimit($pid, $limit) or return "prlimit on the $target (PID $pid) failed";
	push @{ $self->{limited} }, $pid;
	return "prlimit --fsize=$limit on the $target (PID $pid)";
}

sub _prlimit
{
	my ($pid, $limit) = @_;
	my ($out, $err) = ('', '');
	return IPC::Run::run([ 'prlimit', '--pid', $pid, "--fsize=$limit:" ], '>', \$out, '2>', \$err);
}

sub fault_fill_tablespace
{
	my ($self) = @_;
	my $p = $self->{cl}{primary};
	# A standby keeps its copy of soak_tiny in its own directory: after a
	# failover, filling it would fill the real disk, not the tiny one.
	my $loc = $p->safe_psql('soak', "SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = 'soak_tiny'");
	return 'skipped: soak_tiny of ' . $p->name . " lies in $loc, not on the tiny file system (a promoted standby's copy)"
	  unless index($loc, "$self->{cl}{tiny_dir}/") == 0;
	$p->safe_psql('soak', 'CREATE TABLE IF NOT EXISTS soak_fill (v text) TABLESPACE soak_tiny');
	my ($rc, $out, $err) = $p->psql('soak',
		"INSERT INTO soak_fill SELECT repeat(md5(g::text), 30) FROM generate_series(1, 200000) g");
	$self->{filled} = 1;
	my ($why) = $err =~ /ERROR:\s+(.*)/;
	return 'soak_tiny filled: ' . ($why // ($rc ? $err : 'the insert fit'));
}

# A recovery of $node needed the reserve (PtrackSoak::Node): on the primary,
# the filled tablespace is emptied and the reserve made again now, not at
# the next backup, so that a second crash before it finds a reserve too.
# Returns what it did, for the events log (undef on a standby).
sub space_freed
{
	my ($self, $node) = @_;
	my $p = $self->{cl}{primary};
	return undef unless $node->name eq $p->name;
	if ($self->{filled})
	{
		$p->safe_psql('soak', 'DROP TABLE IF EXISTS soak_fill');
		$self->{filled} = 0;
	}
	my $have = PtrackSoak::Node::make_reserve();
	return sprintf('soak_tiny emptied after that recovery; the reserve has %d MB again', $have / 1048576);
}

sub fault_summary_memory
{
	my ($self) = @_;
	my $on = !$self->{settings}{summary_memory};
	_set($self->{cl}{primary}, 'ptrack.wal_summary_memory', $on ? "'4MB'" : undef);
	$self->{settings}{summary_memory} = $on;
	return $on ? 'ptrack.wal_summary_memory = 4MB' : 'ptrack.wal_summary_memory back to its default';
}

sub fault_full_page_writes
{
	my ($self) = @_;
	return 'full_page_writes = on' if $self->_full_page_writes_on;
	# A limited checkpointer PANICs at its next checkpoint: that crash comes
	# before any WAL without full-page images (%CRASHES).
	$self->lift_limits if @{ $self->{limited} // [] };
	_set($self->{cl}{primary}, 'full_page_writes', 'off');
	$self->{settings}{fpw_off} = 1;
	return 'full_page_writes = off';
}

# full_page_writes back on, if it is off (returns whether it was): a
# checkpoint makes the checkpointer take the setting (it reloads before each
# one), the second one starts where every page's next change writes a
# full-page image.
sub _full_page_writes_on
{
	my ($self) = @_;
	return 0 unless $self->{settings}{fpw_off};
	my $p = $self->{cl}{primary};
	_set($p, 'full_page_writes', undef);
	$p->safe_psql('postgres', 'CHECKPOINT') for 1 .. 2;
	$self->{settings}{fpw_off} = 0;
	return 1;
}

# ALTER SYSTEM SET (or RESET when $value is undef) and a reload.
sub _set
{
	my ($node, $name, $value) = @_;
	$node->safe_psql('postgres', defined $value ? "ALTER SYSTEM SET $name = $value" : "ALTER SYSTEM RESET $name");
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	return;
}

sub fault_drop_slot
{
	my ($self) = @_;
	my $p = $self->{cl}{primary};
	my $pid = _pid_of($p, "backend_type = 'ptrack WAL follower'") // return 'no WAL follower running';
	$p->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	my $deadline = time + 10;
	while (time < $deadline)
	{
		my ($rc, $out, $err) = $p->psql('postgres',
			"SELECT pg_drop_replication_slot('ptrack_wal_follower')");
		return "WAL follower (PID $pid) terminated, its slot dropped" if $rc == 0;
		last if $err =~ /does not exist/;
		sleep 0.02;
	}
	return "WAL follower (PID $pid) terminated; its slot could not be dropped in time";
}

sub fault_standby_crash
{
	my ($self) = @_;
	my $s = $self->{cl}{standby};
	# Not between an ALTER DATABASE SET TABLESPACE and the standby's
	# restartpoint after it (PtrackSoak::Workload).
	my $lock = backup_lock($self->{cl}{run}, Fcntl::LOCK_EX());
	my $n = _kill_postmaster($s, 1);
	close $lock;
	return 'kill -9 of the standby ' . $s->name . " and its $n children, start";
}

sub fault_failover
{
	my ($self, $rng) = @_;
	my $cl = $self->{cl};
	my ($old, $new) = ($cl->{primary}, $cl->{standby});
	my $how = $rng->pick('immediate', 'fast');
	$self->lift_limits;
	# No ALTER DATABASE SET TABLESPACE while the nodes change, and pg_rewind
	# and pg_basebackup copy files as a backup does (PtrackSoak::Workload).
	my $lock = backup_lock($cl->{run}, Fcntl::LOCK_EX());
	$old->stop($how, fail_ok => 1);
	$new->promote;
	wait_ready($new);
	$cl->{primary} = $new;
	write_primary($cl->{run}, $new);
	my $what = 'primary ' . $old->name . " stopped ($how), standby " . $new->name . ' promoted';
	my $rewind = $rng->chance(0.5);
	if ($rewind)
	{
		# pg_rewind takes the source's timeline from its control file, which
		# a promotion updates only at its first checkpoint: before that it
		# finds both on the old timeline, says no rewind is required, and
		# the old primary cannot follow the new timeline.
		$new->safe_psql('postgres', 'CHECKPOINT');
		rewind_from($old, $new, test => 0);
		$old->enable_streaming($new);
		start_node($old, 1);
		# A rewound node that cannot follow the new timeline fails here,
		# not later in a client waiting for the standby.
		$new->wait_for_catchup($old->name, 'replay', $new->lsn('insert'));
		$cl->{standby} = $old;
		$what .= '; the old primary rewound (pg_rewind) and started as its standby';
	}
	else
	{
		$cl->{standby} = $cl->{new_standby}->($new);
		rmtree($old->basedir);
		$what .= '; the old primary replaced by ' . $cl->{standby}->name
		  . ', a standby rebuilt from a base backup of the new primary';
	}
	write_primary($cl->{run}, $new, $cl->{standby});
	close $lock;
	return $what;
}

# Lifts the file size limits and empties the filled tablespace: a backup
# needs a checkpoint that can write every file, and (wal) a follower that
# can write its summaries.
sub lift_limits
{
	my ($self) = @_;
	my $p = $self->{cl}{primary};
	for my $pid (@{ $self->{limited} })
	{
		_prlimit($pid, 'unlimited') if kill(0, $pid);
	}
	my $had_limits = @{ $self->{limited} };
	$self->{limited} = [];
	# A checkpointer that failed a write under its limit just before it
	# went may still PANIC: the checkpoint runs once the crash restart is
	# over (PtrackSoak::Node waits for it), so that the backup does not
	# race it.
	if ($self->{filled})
	{
		$p->safe_psql('soak', 'DROP TABLE IF EXISTS soak_fill');
		$self->{filled} = 0;
	}
	$p->safe_psql('postgres', 'CHECKPOINT') if $had_limits;
	PtrackSoak::Node::make_reserve() if $self->{cl}{tiny};
	if ($had_limits && $self->{cl}{capture} eq 'wal')
	{
		# A follower that could not write a summary retries after a pause.
		$p->poll_query_until('postgres',
			"SELECT off_reason IS NULL AND follower_pid IS NOT NULL FROM ptrack_status()")
		  or croak 'the WAL follower did not recover from the file size limit: '
		  . $p->safe_psql('postgres', 'SELECT off_reason FROM ptrack_status()');
	}
	return;
}

1;
