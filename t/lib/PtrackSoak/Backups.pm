# Copyright (c) the ptrack authors
#
# PtrackSoak::Backups -- the real client in the soak (scripts/soak.pl):
# pg_probackup, unmodified, taking FULL and PTRACK backups (--stream) of
# whichever node is the primary, and restoring a chain into a scratch
# directory.  One catalog, one instance ("soak"); the node's data directory
# is given to every backup (-D), so that the chain goes on after a failover
# to the standby.
#
#   my $pb = PtrackSoak::Backups->new($binary, "$run/catalog", $log);
#   $pb->init($node);
#   my $b = $pb->backup($node, 'PTRACK', $run);   # { ok, id, start_lsn, stop_lsn,
#                                           #   tli, status, out, refused }
#   $pb->restore($b->{id}, $pgdata, { old_location => new_location });
#   $pb->delete($full_id);                  # a chain, with its children

package PtrackSoak::Backups;

use strict;
use warnings;

use Carp;
use Fcntl ();
use IPC::Run;
use JSON::PP ();

use PtrackSoak::Workload ();

use constant INSTANCE => 'soak';

sub new
{
	my ($class, $binary, $catalog, $log) = @_;
	return bless { bin => $binary, catalog => $catalog, log => $log }, $class;
}

# Runs pg_probackup; returns (exit code, stdout and stderr together).
sub run
{
	my ($self, @args) = @_;
	my $out = '';
	IPC::Run::run([ $self->{bin}, @args ], '>&', \$out, IPC::Run::timeout(3600));
	my $rc = $? >> 8;
	print STDOUT "# pg_probackup @args: exit $rc\n$out";    # the driver's log file
	return ($rc, $out);
}

sub version
{
	my ($self) = @_;
	my (undef, $out) = $self->run('--version');
	chomp $out;
	return $out;
}

sub init
{
	my ($self, $node) = @_;
	my ($rc, $out) = $self->run('init', '-B', $self->{catalog});
	croak "pg_probackup init failed:\n$out" if $rc;
	($rc, $out) = $self->run('add-instance', '-B', $self->{catalog}, '-D', $node->data_dir,
		'--instance', INSTANCE);
	croak "pg_probackup add-instance failed:\n$out" if $rc;
	return;
}

# A backup of $node in $mode (FULL or PTRACK), holding the run directory's
# backup.lock (PtrackSoak::Workload) meanwhile.  refused is set when
# pg_probackup refused a PTRACK backup because tracking restarted after the
# parent's start (its "Create new full backup" error): the caller takes a
# FULL then.
sub backup
{
	my ($self, $node, $mode, $run) = @_;
	my $lock = PtrackSoak::Workload::backup_lock($run, Fcntl::LOCK_EX());
	my ($rc, $out) = $self->run('backup', '-B', $self->{catalog}, '--instance', INSTANCE,
		'-b', $mode, '--stream', '--temp-slot', '--no-sync', '--no-validate', '-j', '2',
		'-D', $node->data_dir, '-h', $node->host, '-p', $node->port, '-d', 'postgres');
	close $lock;
	my %b = (ok => $rc == 0, out => $out, mode => $mode);
	($b{id}) = $out =~ /INFO: Backup (\w+) completed/;
	($b{id}) = $out =~ /INFO: Backup start, pg_probackup version: .*?, instance: .*?, backup ID: (\w+)/
	  unless $b{id};
	$b{refused} = 1
	  if !$b{ok} && $out =~ /greater than Start LSN of previous backup|Create new full backup/i;
	if ($b{id})
	{
		my $info = $self->show($b{id});
		if ($info)
		{
			$b{start_lsn} = $info->{'start-lsn'};
			$b{stop_lsn} = $info->{'stop-lsn'};
			$b{tli} = $info->{'current-tli'} // $info->{tli};
			$b{status} = $info->{status};
			$b{parent} = $info->{'parent-backup-id'};
			$b{data_bytes} = $info->{'data-bytes'};
		}
	}
	return \%b;
}

# pg_probackup show of one backup, as a hashref (undef if unknown).
sub show
{
	my ($self, $id) = @_;
	my ($rc, $out) = $self->run('show', '-B', $self->{catalog}, '--instance', INSTANCE,
		'-i', $id, '--format=json');
	return undef if $rc;
	my $json = eval { JSON::PP::decode_json($out =~ s/^[^\[{]*//sr) } or return undef;
	my ($instance) = ref $json eq 'ARRAY' ? @$json : ($json);
	my $backups = $instance->{backups} // [];
	return $backups->[0];
}

# Restores backup $id (with its chain) into the empty directory $pgdata,
# each tablespace from its location on the source to the one %$ts_map
# gives.  Returns (exit code, output).
sub restore
{
	my ($self, $id, $pgdata, $ts_map) = @_;
	return $self->run('restore', '-B', $self->{catalog}, '--instance', INSTANCE, '-i', $id,
		'-D', $pgdata, '--no-sync', '-j', '2',
		map { ('-T', "$_=$ts_map->{$_}") } sort keys %$ts_map);
}

sub delete
{
	my ($self, $id) = @_;
	return $self->run('delete', '-B', $self->{catalog}, '--instance', INSTANCE, '-i', $id);
}

1;
