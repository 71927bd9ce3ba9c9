# Copyright (c) the ptrack authors
#
# PtrackBackup.pm -- a minimal, honest incremental backup tool built on
# ptrack_get_pagemapset(), for the round-trip tests (t/003, t/014) and the
# README's main job (scripts/main-job.pl).  It does what a real tool
# (pg_probackup's ptrack mode) does, in as few moving parts as possible:
#
#   full_backup($node, $dir)                 pg_basebackup + a file listing
#   incremental_backup($node, $dir, $since, $prev_dir)
#                                            changed blocks since $since
#   restore($full_dir, $incr_dir, $target)   full + incremental -> data dir
#
# Both backups connect to database postgres as the node's default user (the
# test superuser) unless given user => $role and dbname => $db: docs/operations.md's
# backup role (section "A backup role without superuser") is all they need,
# with ptrack installed in $db (t/023_backup_role.pl).  The data directory
# is read directly, so the operating-system user must be able to read it.
#
# What checks ptrack's answer and the restored cluster is in PtrackVerify.pm
# (incremental_backup() calls its checks on what it reads; compare_clusters
# compares the restored cluster with its source).
#
# The one rule it relies on (docs/design.md section 1): a relation segment file
# without a pagemap row, and every block without its bit, is unchanged since
# $since.  Nothing here second-guesses ptrack (no "copy the tail just in
# case"): a missed block must show up as a mismatch, not be papered over.
#
# Backup layout
#   full:        $dir/data/           pg_basebackup -Fp -X stream output
#                $dir/tblspc/<oid>/   each tablespace (--tablespace-mapping)
#                $dir/manifest        listing: dirs, files + sizes, tablespaces
#   incremental: $dir/files/<path>    whole files (non-relation files, and
#                                     relation files new since the previous
#                                     backup)
#                $dir/delta/<path>    changed blocks of a relation segment
#                                     file: records of (uint32 BE block
#                                     number, 8192-byte page)
#                $dir/wal/            WAL segments from start to stop LSN
#                $dir/backup_label, $dir/tablespace_map (pg_backup_stop's)
#                $dir/manifest        the complete listing of the data
#                                     directory at backup time: restore
#                                     deletes everything not listed
#
# Manifest lines are tab-separated:
#   start_lsn <lsn> | since_lsn <lsn> | kind full|incremental
#   tablespace <oid> <location on the source>
#   dir <path>
#   file <size> <how> <path>     how: base (take it from the previous backup,
#                                cut/extended to <size>), whole, delta
# Paths are relative to the data directory and go through pg_tblspc/<oid>.
#
# WAL: the incremental must carry the WAL from its start LSN to its stop LSN.
# We copy it from the server's pg_wal after pg_backup_stop() (which switches
# to a new segment, so the last needed segment is complete), and keep it from
# being recycled meanwhile with a temporary physical replication slot created
# with immediately_reserve in the backup session, before pg_backup_start().
# That works on any cluster with wal_level >= replica and a free slot, needs
# no archive_mode/archive_command (and no restart to enable them), and cannot
# lose a segment to a checkpoint however long the copy takes; the slot
# disappears with the session even if the tool dies.  At restore the WAL goes
# into pg_wal next to backup_label, so the server replays it as it would a
# pg_basebackup -X stream backup: no restore_command, no recovery.signal, and
# it refuses to start ("WAL ends before end of online backup") if any is
# missing.
#
# From a hot standby (pg_is_in_recovery()), the same steps work with three
# differences, all handled in incremental_backup():
#   - pg_backup_start() makes a restartpoint instead of a checkpoint (a new
#     one only if a checkpoint record was replayed since the last), and
#     pg_backup_stop() writes no WAL and switches no segment: its stop LSN is
#     the standby's minRecoveryPoint, and the last segment is still being
#     filled by the WAL receiver.  We copy it as it is: every byte up to the
#     stop LSN was received and replayed before pg_backup_stop() returned,
#     and recovery stops at the first invalid record after it.
#   - pg_walfile_name() refuses to run during recovery (the timeline is
#     ambiguous), so the segment names are computed here from the
#     backup_label's START TIMELINE; a backup during which the standby moved
#     to another timeline is refused.
#   - global/pg_control is copied again after every other file, just before
#     pg_backup_stop(), as pg_basebackup does: the restored server takes the
#     end of a standby backup from pg_control's minRecoveryPoint, which must
#     not be older than any page copied (the standby raises it before
#     writing a page), and not newer than the stop LSN (whose WAL we carry).
# The WAL comes from the standby's own pg_wal, kept by the temporary slot
# created there (restartpoints honour slots as checkpoints do): the backup
# then needs nothing from the primary, which may be busy or unreachable.
#
# restore() takes one incremental or a chain of them (an array ref, oldest
# first, each taken since the start LSN of the one before).

package PtrackBackup;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use Fcntl qw(O_RDONLY O_WRONLY O_CREAT O_TRUNC SEEK_SET);
use File::Basename qw(dirname);
use File::Path qw(make_path remove_tree);
use IPC::Run;
use Time::HiRes ();

use PtrackUnits qw(BLCKSZ lsn_to_int);
use PtrackVerify
  qw(new_check_stats check_pagemap_row check_marked check_copied_page);

our @EXPORT_OK = qw(full_backup incremental_backup restore start_restored read_manifest);

# ---------------------------------------------------------------------------
# Which entries of a data directory a backup carries (the rules of
# PostgreSQL's basebackup.c, plus ptrack's own map file).
# ---------------------------------------------------------------------------

# Directories whose contents are never backed up (the directory itself is).
my %skip_contents = map { $_ => 1 } qw(pg_wal pg_stat_tmp pg_replslot
  pg_dynshmem pg_notify pg_serial pg_snapshots pg_subtrans);

# Files in the data directory's root that are never backed up.
my %skip_root_files = map { $_ => 1 } qw(postmaster.pid postmaster.opts
  backup_label tablespace_map backup_manifest postgresql.auto.conf.tmp
  current_logfiles.tmp);

sub _skip_entry
{
	my ($parent, $name) = @_;
	return 1 if $name =~ /^pg_internal\.init/;    # relcache, rebuilt at start
	return 1 if $name =~ /^pgsql_tmp/;            # temporary files
	if ($parent eq '')
	{
		return 1 if $skip_root_files{$name};
		# ptrack's own map (and its temp files): never trusted after a
		# restore anyway (a backup_label makes the server start a fresh map).
		return 1 if $name =~ /^(?:pg_)?ptrack/;
	}
	return 0;
}

# A directory holding relation files: global/, base/<db>/,
# pg_tblspc/<spc>/<version>/<db>/.
sub _is_relation_dir
{
	my ($rel) = @_;
	return $rel eq 'global'
	  || $rel =~ m{^base/\d+$}
	  || $rel =~ m{^pg_tblspc/\d+/[^/]+/\d+$};
}

my $relfile_re = qr/^(\d+)(?:_(fsm|vm|init))?(?:\.(\d+))?$/;
my $tempfile_re = qr/^t\d+_\d+(?:_(?:fsm|vm|init))?(?:\.\d+)?$/;

# Walks a data directory (following the pg_tblspc/<oid> symlinks only) and
# returns ({ path => { type => 'dir'|'file', size, relation => 0|1 } },
# { oid => location }).  Temporary relations and the non-init forks of
# unlogged relations are left out, as pg_basebackup does; entries that vanish
# during the walk are skipped.
sub _scan_datadir
{
	my ($root) = @_;
	my (%entries, %tablespaces);

	my $walk;
	$walk = sub {
		my ($rel) = @_;
		my $abs = $rel eq '' ? $root : "$root/$rel";
		my $dh;
		unless (opendir($dh, $abs))
		{
			return if $!{ENOENT};
			croak "could not open directory \"$abs\": $!";
		}
		my @names = sort grep { $_ ne '.' && $_ ne '..' } readdir($dh);
		closedir($dh);

		my $reldir = _is_relation_dir($rel);
		my %unlogged;
		if ($reldir)
		{
			for (@names) { $unlogged{$1} = 1 if /^(\d+)_init(?:\.\d+)?$/; }
		}

		for my $name (@names)
		{
			next if _skip_entry($rel, $name);
			my $path = $rel eq '' ? $name : "$rel/$name";
			my @st = lstat("$root/$path");
			next unless @st;    # vanished
			if (-l _)
			{
				if ($rel eq 'pg_tblspc' && $name =~ /^\d+$/)
				{
					my $target = readlink("$root/$path");
					next unless defined $target;
					$tablespaces{$name} = $target;
					$entries{$path} = { type => 'dir' };
					$walk->($path);
				}
				elsif ($rel eq '' && $name eq 'pg_wal')
				{
					$entries{$path} = { type => 'dir' };    # initdb -X
				}
				else
				{
					croak "unexpected symbolic link \"$root/$path\"";
				}
				next;
			}
			if (-d _)
			{
				$entries{$path} = { type => 'dir' };
				if ($rel eq '' && $skip_contents{$name})
				{
					$entries{'pg_wal/archive_status'} = { type => 'dir' }
					  if $name eq 'pg_wal';
					next;
				}
				$walk->($path);
				next;
			}
			next unless -f _;
			my $relation = 0;
			if ($reldir)
			{
				next if $name =~ $tempfile_re;
				if ($name =~ $relfile_re)
				{
					my ($node, $fork) = ($1, $2 // 'main');
					next if $unlogged{$node} && $fork ne 'init';
					$relation = 1;
				}
			}
			$entries{$path} =
			  { type => 'file', size => $st[7], relation => $relation };
		}
	};
	$walk->('');
	return (\%entries, \%tablespaces);
}

# ---------------------------------------------------------------------------
# Manifest
# ---------------------------------------------------------------------------

sub _write_manifest
{
	my ($file, $info) = @_;
	open(my $fh, '>', "$file.tmp") or croak "could not write $file: $!";
	print $fh "# ptrack test backup manifest 1\n";
	for my $k (qw(kind start_lsn stop_lsn since_lsn))
	{
		print $fh "$k\t$info->{$k}\n" if defined $info->{$k};
	}
	for my $oid (sort keys %{ $info->{tablespaces} })
	{
		print $fh "tablespace\t$oid\t$info->{tablespaces}{$oid}\n";
	}
	my $files = $info->{files};
	for my $path (sort keys %$files)
	{
		my $e = $files->{$path};
		croak "path with a tab or newline: $path" if $path =~ /[\t\n]/;
		if ($e->{type} eq 'dir')
		{
			print $fh "dir\t$path\n";
		}
		else
		{
			print $fh "file\t$e->{size}\t$e->{how}\t$path\n";
		}
	}
	close($fh) or croak "could not write $file: $!";
	rename("$file.tmp", $file) or croak "could not rename $file: $!";
	return;
}

sub read_manifest
{
	my ($dir) = @_;
	my %info = (tablespaces => {}, files => {});
	open(my $fh, '<', "$dir/manifest")
	  or croak "could not read $dir/manifest: $!";
	while (my $line = <$fh>)
	{
		chomp $line;
		next if $line =~ /^#/ || $line eq '';
		my @f = split /\t/, $line, -1;
		if ($f[0] eq 'tablespace')
		{
			$info{tablespaces}{ $f[1] } = $f[2];
		}
		elsif ($f[0] eq 'dir')
		{
			$info{files}{ $f[1] } = { type => 'dir' };
		}
		elsif ($f[0] eq 'file')
		{
			$info{files}{ $f[3] } =
			  { type => 'file', size => $f[1], how => $f[2] };
		}
		else
		{
			$info{ $f[0] } = $f[1];
		}
	}
	close($fh);
	return \%info;
}

# ---------------------------------------------------------------------------
# Small file helpers
# ---------------------------------------------------------------------------

# Copies a file whole; returns the number of bytes copied, or undef if the
# source vanished.
sub _copy_file
{
	my ($from, $to) = @_;
	my $in;
	unless (sysopen($in, $from, O_RDONLY))
	{
		return undef if $!{ENOENT};
		croak "could not open \"$from\": $!";
	}
	binmode $in;
	make_path(dirname($to));
	sysopen(my $out, $to, O_WRONLY | O_CREAT | O_TRUNC, 0600)
	  or croak "could not create \"$to\": $!";
	binmode $out;
	my $total = 0;
	while (1)
	{
		my $n = sysread($in, my $buf, 1 << 20);
		croak "could not read \"$from\": $!" unless defined $n;
		last if $n == 0;
		my $off = 0;
		while ($off < $n)
		{
			my $w = syswrite($out, $buf, $n - $off, $off);
			croak "could not write \"$to\": $!" unless defined $w;
			$off += $w;
		}
		$total += $n;
	}
	close($out) or croak "could not write \"$to\": $!";
	close($in);
	return $total;
}

sub _write_file
{
	my ($file, $content) = @_;
	make_path(dirname($file));
	open(my $fh, '>', $file) or croak "could not write \"$file\": $!";
	binmode $fh;
	print $fh $content;
	close($fh) or croak "could not write \"$file\": $!";
	return;
}

sub _read_file
{
	my ($file) = @_;
	open(my $fh, '<', $file) or croak "could not read \"$file\": $!";
	binmode $fh;
	local $/;
	my $c = <$fh>;
	close($fh);
	return $c;
}

# ---------------------------------------------------------------------------
# One psql session driven through pipes.  A non-exclusive backup belongs to
# the session that started it, so the whole incremental runs in one of
# these.  ON_ERROR_STOP stays off so that an error is reported by query()
# (from psql's stderr) instead of killing the session.
# ---------------------------------------------------------------------------

package PtrackBackup::Session;

use Carp;

sub new
{
	my ($class, $node, $dbname, $user) = @_;
	my $psql =
	  $node->can('installed_command')
	  ? $node->installed_command('psql')
	  : 'psql';
	my $self = bless { in => '', out => '', err => '', n => 0 }, $class;
	$self->{timer} = IPC::Run::timeout(3600);
	$self->{run} = IPC::Run::start(
		[
			$psql, '-X', '-A', '-t', '-q', '-F', "\t",
			'-v', 'ON_ERROR_STOP=0',
			'-d', PtrackBackup::_connstr($node, $dbname, $user)
		],
		'<', \$self->{in}, '>', \$self->{out}, '2>', \$self->{err},
		$self->{timer});
	$self->query('SET client_min_messages = warning');
	return $self;
}

# Runs one SQL statement; returns its rows as array refs.  Dies on an ERROR.
sub query
{
	my ($self, $sql) = @_;
	my $mark = 'ptrack-backup-session-' . ++$self->{n};
	$self->{out} = '';
	$self->{err} = '';
	$self->{in} .= "$sql\n;\n\\echo $mark\n\\warn $mark\n";
	$self->{timer}->start(3600);
	while ($self->{out} !~ /^\Q$mark\E\n/m || $self->{err} !~ /^\Q$mark\E\n/m)
	{
		croak "psql exited during \"$sql\": $self->{err}"
		  unless $self->{run}->pumpable;
		$self->{run}->pump;
	}
	(my $out = $self->{out}) =~ s/^\Q$mark\E\n//m;
	(my $err = $self->{err}) =~ s/^\Q$mark\E\n//m;
	croak "query failed: $sql\n$err" if $err =~ /(ERROR|FATAL|PANIC):/;
	return [ map { [ split /\t/, $_, -1 ] } split /\n/, $out ];
}

sub quit
{
	my ($self) = @_;
	$self->{done} = 1;
	$self->{in} .= "\\q\n";
	$self->{run}->finish;
	return;
}

# A session dropped without quit(), because a query failed (a missing
# privilege, say) and the backup croaked: end psql now, not at the script's
# exit, so that its backend ends, which aborts the backup it started and
# drops its temporary slot.
sub DESTROY
{
	my ($self) = @_;
	return if $self->{done} || !$self->{run};
	local ($@, $?);
	$self->{done} = 1;
	$self->{in} .= "\\q\n";
	eval { $self->{timer}->start(60); $self->{run}->finish; 1 }
	  or eval { $self->{run}->kill_kill; 1 };
	return;
}

package PtrackBackup;

# The libpq connection string for $dbname (default postgres) as $user
# (default: the node's, i.e. the test superuser).
sub _connstr
{
	my ($node, $dbname, $user) = @_;
	my $c = $node->connstr($dbname // 'postgres');
	$c .= " user='$user'" if defined $user;
	return $c;
}

# ---------------------------------------------------------------------------
# Full backup
# ---------------------------------------------------------------------------

# Takes a full backup of $node into $dir; returns its start LSN.  Options:
# user, dbname (see the header comment).
sub full_backup
{
	my ($node, $dir, %opt) = @_;
	my $connstr = _connstr($node, $opt{dbname}, $opt{user});
	croak "\"$dir\" exists" if -e $dir;
	make_path("$dir/tblspc");

	my @map;
	my $spcs = $node->safe_psql('postgres',
		"SELECT oid, pg_tablespace_location(oid) FROM pg_tablespace "
		  . "WHERE spcname NOT IN ('pg_default', 'pg_global')",
		connstr => $connstr);
	for my $line (split /\n/, $spcs)
	{
		my ($oid, $loc) = split /\|/, $line, 2;
		$loc =~ s/=/\\=/g;    # pg_basebackup's escape for OLDDIR=NEWDIR
		push @map, "--tablespace-mapping=$loc=$dir/tblspc/$oid";
	}
	my $pg_basebackup =
	  $node->can('installed_command')
	  ? $node->installed_command('pg_basebackup')
	  : 'pg_basebackup';
	my ($out, $err);
	IPC::Run::run(
		[
			$pg_basebackup, '-D', "$dir/data", '-X', 'stream',
			'-c', 'fast', '--no-sync', '--no-manifest',
			'-d', $connstr, @map
		],
		'>', \$out, '2>', \$err)
	  or croak "pg_basebackup failed: $err";

	my $label = _read_file("$dir/data/backup_label");
	$label =~ /^START WAL LOCATION: ([0-9A-F]+\/[0-9A-F]+)/m
	  or croak "no START WAL LOCATION in backup_label";
	my $start = $1;

	my ($entries, $tablespaces) = _scan_datadir("$dir/data");
	$_->{how} = 'base' for grep { $_->{type} eq 'file' } values %$entries;
	_write_manifest(
		"$dir/manifest",
		{
			kind => 'full',
			start_lsn => $start,
			tablespaces => $tablespaces,
			files => $entries
		});
	return $start;
}

# ---------------------------------------------------------------------------
# Incremental backup
# ---------------------------------------------------------------------------

# Takes an incremental backup of $node into $dir, holding every block changed
# since $since_lsn (the start LSN of the backup in $prev_dir, whose manifest
# says which files it has).  Returns a hash of statistics:
#   start_lsn stop_lsn     of this backup
#   files                  files in the listing
#   db_bytes               their total size (what a full backup copies)
#   whole_files whole_bytes          copied whole
#   delta_files changed_pages        relation files copied block by block
#   unchanged_files                  relation files without a pagemap row
#   bytes_copied           whole_bytes + changed_pages * 8 KB
#   wal_segments wal_bytes
#   pagemap_rows pagemap_pages       what ptrack_get_pagemapset returned
#   pagemap                { path => pagecount }
#   pagemapset_ms          server-side time of the ptrack_get_pagemapset
#                          call alone (count(*) over it, no output), the
#                          first call in the backup's session
#   pagemapset_warm_ms     the same, called again in that session
#   unknown_examples       the first few rows naming no permanent relation
#                          file, with what each listing and the disk say
#   elapsed_s
# and the verdicts of PtrackVerify's checks on ptrack's answer
# (pagecount_mismatch, unknown_pagemap_paths, unmarked_new_blocks,
# unmarked_examples, old_lsn_pages: see PtrackVerify.pm).
# Options: filter_pagemap => sub { my ($path, $bits) = @_; ... return $bits }
# lets a test damage the pagemap on purpose (a negative control);
# after_listing => sub { ... } runs between the listing and the
# ptrack_get_pagemapset() call, to force what a concurrent session could do
# there; user and dbname: see the header comment.
sub incremental_backup
{
	my ($node, $dir, $since, $prev_dir, %opt) = @_;
	croak "\"$dir\" exists" if -e $dir;
	my $t_begin = Time::HiRes::time();
	my $prev = read_manifest($prev_dir);
	my $since_int = lsn_to_int($since);
	my $datadir = $node->data_dir;
	make_path("$dir/files", "$dir/delta", "$dir/wal");

	my %st = (
		(
			map { $_ => 0 }
			  qw(files db_bytes whole_files whole_bytes delta_files
			  changed_pages unchanged_files wal_segments wal_bytes
			  pagemap_rows pagemap_pages vanished_files)
		),
		new_check_stats());

	my $dbname = $opt{dbname} // 'postgres';
	my $s = PtrackBackup::Session->new($node, $dbname, $opt{user});
	my $ns = $s->query(
		"SELECT quote_ident(n.nspname) FROM pg_extension e "
		  . "JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'ptrack'"
	)->[0][0];
	croak "extension ptrack is not installed in database $dbname"
	  unless defined $ns;

	my $in_recovery = $s->query('SELECT pg_is_in_recovery()')->[0][0] eq 't';

	# Keep the WAL from here on (see the header comment).
	$s->query("SELECT pg_create_physical_replication_slot("
		  . "'ptrack_backup_' || pg_backend_pid(), true, true)");
	my $start = $s->query("SELECT pg_backup_start('ptrack incremental', true)")
	  ->[0][0];

	# The listing comes before the query: every block in it that lies beyond
	# what the previous backup had was extended before the query.
	my ($entries, $tablespaces) = _scan_datadir($datadir);
	$opt{after_listing}->() if $opt{after_listing};

	# The time of ptrack_get_pagemapset alone, measured by the server: t0 is
	# taken before the function runs (the call depends on it through
	# LATERAL) and t1 after the aggregate has consumed its last row.
	# Timed twice: the first call in a session is what a backup tool pays
	# (a new backend touching the shared map for the first time); the second
	# shows the cost of the walk and probes alone.
	my $timed_sql =
	    "SELECT b.files, b.pages, "
	  . "round((extract(epoch FROM b.t1 - a.t0) * 1000)::numeric, 3) "
	  . "FROM (SELECT clock_timestamp() AS t0 OFFSET 0) a, LATERAL "
	  . "(SELECT count(*) AS files, coalesce(sum(pagecount), 0) AS pages, "
	  . "clock_timestamp() AS t1 FROM $ns.ptrack_get_pagemapset("
	  . "CASE WHEN a.t0 IS NOT NULL THEN '$since'::pg_lsn END)) b";
	$st{pagemapset_ms} = $s->query($timed_sql)->[0][2] + 0;
	$st{pagemapset_warm_ms} = $s->query($timed_sql)->[0][2] + 0;

	my %bits;    # path => string of '0'/'1', one per block
	my $rows = $s->query("SELECT path, pagecount, encode(pagemap, 'hex') "
		  . "FROM $ns.ptrack_get_pagemapset('$since'::pg_lsn)");
	for my $r (@$rows)
	{
		my ($path, $count, $hex) = @$r;
		my $b = unpack('b*', pack('H*', $hex));
		$b = $opt{filter_pagemap}->($path, $b) if $opt{filter_pagemap};
		check_pagemap_row($path, $count, $b, \%st);
		$st{pagemap_rows}++;
		$st{pagemap_pages} += $count;
		$st{pagemap}{$path} = $count;
		$bits{$path} = $b;
	}

	# Every row must name a permanent relation file.  The listing was taken
	# before the query, so a file created in between (autovacuum's first
	# VACUUM of a table creates its _fsm and _vm forks) is rightly listed by
	# ptrack and missing from it: such paths are looked up in a second
	# listing, taken now.  A path that is a permanent relation file in
	# neither is one ptrack must not list (a temporary or unlogged fork, a
	# non-relation file, a file that never existed).
	my @not_listed =
	  grep { !($entries->{$_} && $entries->{$_}{relation}) } sort keys %bits;
	if (@not_listed)
	{
		my ($again) = _scan_datadir($datadir);
		for my $path (@not_listed)
		{
			next if $again->{$path} && $again->{$path}{relation};
			$st{unknown_pagemap_paths}++;
			push @{ $st{unknown_examples} },
			  "$path ($st{pagemap}{$path} blocks listed): listing before the "
			  . 'query: ' . _listed_as($entries, $path)
			  . '; listing after it: ' . _listed_as($again, $path)
			  . '; on disk now: '
			  . (-e "$datadir/$path" ? (-s _) . ' bytes' : 'absent')
			  if @{ $st{unknown_examples} } < 10;
		}
	}

	my %files;
	for my $path (sort keys %$entries)
	{
		my $e = $entries->{$path};
		if ($e->{type} eq 'dir')
		{
			$files{$path} = { type => 'dir' };
			next;
		}
		$st{files}++;
		$st{db_bytes} += $e->{size};
		my $old = $prev->{files}{$path};
		if (!$e->{relation} || !$old || $old->{type} ne 'file')
		{
			if ($e->{relation})
			{
				check_marked($datadir, $path, 0, $e->{size}, $bits{$path},
					\%st);
			}
			my $n = _copy_file("$datadir/$path", "$dir/files/$path");
			if (!defined $n)
			{
				$st{vanished_files}++;
				next;
			}
			$files{$path} = { type => 'file', size => $n, how => 'whole' };
			$st{whole_files}++;
			$st{whole_bytes} += $n;
			next;
		}

		check_marked($datadir, $path, $old->{size}, $e->{size},
			$bits{$path}, \%st);
		my $b = $bits{$path};
		if (!defined $b)
		{
			$files{$path} = { type => 'file', size => $e->{size}, how => 'base' };
			$st{unchanged_files}++;
			next;
		}
		my $pages = _copy_blocks("$datadir/$path", "$dir/delta/$path", $b,
			$e->{size},
			sub { check_copied_page($path, $_[0], $since_int, \%st) });
		if (!defined $pages)
		{
			$st{vanished_files}++;
			next;
		}
		$files{$path} = { type => 'file', size => $e->{size}, how => 'delta' };
		$st{delta_files}++;
		$st{changed_pages} += $pages;
	}

	# From a standby, pg_control last (see the header comment).
	if ($in_recovery && $files{'global/pg_control'})
	{
		my $n = _copy_file("$datadir/global/pg_control",
			"$dir/files/global/pg_control");
		croak 'global/pg_control is gone' unless defined $n;
		$st{whole_bytes} += $n - $files{'global/pg_control'}{size};
		$files{'global/pg_control'}{size} = $n;
	}

	# wait_for_archive = false: the WAL is copied below, not taken from an
	# archive, so a slow or broken archive_command must not hold us up.
	# labelfile and spcmapfile are multi-line text, which the session's
	# tab/newline framing cannot carry: fetch their exact bytes in hex.
	my $stop = $s->query(
		"SELECT lsn, encode(textsend(labelfile), 'hex'), "
		  . "encode(textsend(coalesce(spcmapfile, '')), 'hex') "
		  . "FROM pg_backup_stop(false)")->[0];
	my ($stop_lsn, $label, $spcmap) =
	  ($stop->[0], pack('H*', $stop->[1]), pack('H*', $stop->[2]));

	# WAL from the start segment through the stop segment, and the
	# timeline history files.
	my $segs = $in_recovery
	  ? _standby_segments($s, $label, $start, $stop_lsn)
	  : $s->query(
		"SELECT DISTINCT pg_walfile_name('$start'::pg_lsn + g * s.size) AS f "
		  . "FROM (SELECT setting::numeric AS size FROM pg_settings "
		  . "WHERE name = 'wal_segment_size') s, "
		  . "generate_series(0, ceil((('$stop_lsn'::pg_lsn - '$start'::pg_lsn) "
		  . "/ s.size))::int + 1) g "
		  . "WHERE pg_walfile_name('$start'::pg_lsn + g * s.size) "
		  . "<= pg_walfile_name('$stop_lsn') ORDER BY 1");
	for my $seg (map { $_->[0] } @$segs)
	{
		my $n = _copy_file("$datadir/pg_wal/$seg", "$dir/wal/$seg");
		croak "WAL segment $seg is gone" unless defined $n;
		$st{wal_segments}++;
		$st{wal_bytes} += $n;
	}
	opendir(my $wd, "$datadir/pg_wal") or croak "pg_wal: $!";
	for my $h (grep { /^[0-9A-F]{8}\.history$/ } readdir($wd))
	{
		my $n = _copy_file("$datadir/pg_wal/$h", "$dir/wal/$h");
		$st{wal_bytes} += $n // 0;
	}
	closedir($wd);
	$s->query("SELECT pg_drop_replication_slot('ptrack_backup_' || pg_backend_pid())");
	$s->quit;

	_write_file("$dir/backup_label", $label);
	_write_file("$dir/tablespace_map", $spcmap) if $spcmap ne '';
	_write_manifest(
		"$dir/manifest",
		{
			kind => 'incremental',
			start_lsn => $start,
			stop_lsn => $stop_lsn,
			since_lsn => $since,
			tablespaces => $tablespaces,
			files => \%files
		});

	$st{start_lsn} = $start;
	$st{stop_lsn} = $stop_lsn;
	$st{bytes_copied} = $st{whole_bytes} + $st{changed_pages} * BLCKSZ;
	$st{elapsed_s} = Time::HiRes::time() - $t_begin;
	return \%st;
}

# The WAL segment files from $start to $stop on a standby, as the rows
# [ name ] that the pg_walfile_name() query gives on a primary: from the
# segment holding $start through the one holding the last byte before $stop.
sub _standby_segments
{
	my ($s, $label, $start, $stop) = @_;
	$label =~ /^START TIMELINE: (\d+)$/m
	  or croak "no START TIMELINE in the backup label";
	my $tli = $1;
	my ($now_tli, $seg_size) = @{
		$s->query("SELECT (SELECT min_recovery_end_timeline "
			  . "FROM pg_control_recovery()), setting::bigint "
			  . "FROM pg_settings WHERE name = 'wal_segment_size'")->[0]
	};
	croak "the standby moved from timeline $tli to $now_tli during the backup"
	  if $now_tli != 0 && $now_tli != $tli;
	my $per_id = int(4294967296 / $seg_size);
	my @names;
	for my $seg (int(lsn_to_int($start) / $seg_size)
		.. int((lsn_to_int($stop) - 1) / $seg_size))
	{
		push @names,
		  [ sprintf('%08X%08X%08X', $tli, int($seg / $per_id), $seg % $per_id) ];
	}
	return \@names;
}

# What a listing of _scan_datadir() says about $path, for a diagnostic.
sub _listed_as
{
	my ($entries, $path) = @_;
	my $e = $entries->{$path};
	return 'absent (or a temporary or unlogged fork, which it leaves out)'
	  unless $e;
	return 'a directory' if $e->{type} eq 'dir';
	return ($e->{relation} ? 'a relation file' : 'a non-relation file')
	  . " of $e->{size} bytes";
}

# Copies the blocks whose bit is set and that lie below $size; returns the
# number copied, or undef if the file vanished.  A block beyond the file's
# current end (it was truncated after the listing) is skipped: WAL replay
# truncates it.  Each page copied is shown to $on_page->($page) first.
sub _copy_blocks
{
	my ($from, $to, $bits, $size, $on_page) = @_;
	my $in;
	unless (sysopen($in, $from, O_RDONLY))
	{
		return undef if $!{ENOENT};
		croak "could not open \"$from\": $!";
	}
	binmode $in;
	make_path(dirname($to));
	sysopen(my $out, $to, O_WRONLY | O_CREAT | O_TRUNC, 0600)
	  or croak "could not create \"$to\": $!";
	binmode $out;
	my $nblocks = int(($size + BLCKSZ - 1) / BLCKSZ);
	my $copied = 0;
	my $blk = -1;
	while (($blk = index($bits, '1', $blk + 1)) >= 0)
	{
		last if $blk >= $nblocks;
		sysseek($in, $blk * BLCKSZ, SEEK_SET)
		  or croak "could not seek in \"$from\": $!";
		my $n = sysread($in, my $page, BLCKSZ);
		croak "could not read \"$from\": $!" unless defined $n;
		last if $n < BLCKSZ;    # truncated meanwhile
		$on_page->($page);
		my $rec = pack('N', $blk) . $page;
		syswrite($out, $rec) == length($rec)
		  or croak "could not write \"$to\": $!";
		$copied++;
	}
	close($out) or croak "could not write \"$to\": $!";
	close($in);
	return $copied;
}

# ---------------------------------------------------------------------------
# Restore
# ---------------------------------------------------------------------------

# Creates the directory of tablespace $oid under $tsroot and points
# $target/pg_tblspc/$oid at it.
sub _make_tablespace
{
	my ($target, $tsroot, $oid) = @_;
	make_path("$tsroot/$oid", "$target/pg_tblspc", { mode => 0700 });
	chmod 0700, "$tsroot/$oid";
	symlink("$tsroot/$oid", "$target/pg_tblspc/$oid")
	  or croak "could not link pg_tblspc/$oid: $!";
	return;
}

# Writes the changed blocks of a delta file into $file.
sub _apply_delta
{
	my ($delta, $file) = @_;
	sysopen(my $in, $delta, O_RDONLY) or croak "could not open \"$delta\": $!";
	binmode $in;
	sysopen(my $out, $file, O_WRONLY) or croak "could not open \"$file\": $!";
	binmode $out;
	my $pages = 0;
	while (1)
	{
		my $n = sysread($in, my $rec, 4 + BLCKSZ);
		croak "could not read \"$delta\": $!" unless defined $n;
		last if $n == 0;
		croak "\"$delta\" is truncated" unless $n == 4 + BLCKSZ;
		my $blk = unpack('N', $rec);
		sysseek($out, $blk * BLCKSZ, SEEK_SET)
		  or croak "could not seek in \"$file\": $!";
		syswrite($out, $rec, BLCKSZ, 4) == BLCKSZ
		  or croak "could not write \"$file\": $!";
		$pages++;
	}
	close($out) or croak "could not write \"$file\": $!";
	close($in);
	return $pages;
}

# Restores the full backup in $full_dir, and the incremental in $incr_dir on
# top of it (if given; an array ref: a chain of incrementals, applied in
# order), into the new data directory $target.  Tablespaces go
# to <tablespace_dir>/<oid> (default "${target}_tblspc").  The result starts
# like a pg_basebackup -X stream restore: backup_label and all needed WAL in
# pg_wal, no recovery.signal.  Returns { files, bytes, pages }.
sub restore
{
	my ($full_dir, $incr_dir, $target, %opt) = @_;
	my $tsroot = $opt{tablespace_dir} // "${target}_tblspc";
	if (-e $target)
	{
		opendir(my $d, $target) or croak "\"$target\": $!";
		croak "\"$target\" is not empty"
		  if grep { $_ ne '.' && $_ ne '..' } readdir($d);
		closedir($d);
	}
	croak "\"$tsroot\" exists" if -e $tsroot;
	make_path($target);
	chmod 0700, $target;
	my %st = (files => 0, bytes => 0, pages => 0);

	# 1. The full backup, as listed.
	my $full = read_manifest($full_dir);
	_make_tablespace($target, $tsroot, $_) for keys %{ $full->{tablespaces} };
	for my $path (sort keys %{ $full->{files} })
	{
		my $e = $full->{files}{$path};
		if ($e->{type} eq 'dir')
		{
			make_path("$target/$path", { mode => 0700 })
			  unless $path =~ m{^pg_tblspc/\d+$};
			next;
		}
		my $n = _copy_file("$full_dir/data/$path", "$target/$path");
		croak "\"$path\" is missing from the full backup" unless defined $n;
	}

	my $wal_from = "$full_dir/data/pg_wal";
	my $label_from = "$full_dir/data";
	# $incr_dir: one incremental, or a chain of them (array ref, in order).
	my @chain =
	  ref $incr_dir eq 'ARRAY' ? @$incr_dir
	  : defined $incr_dir ? ($incr_dir)
	  : ();
	my $prev = $full;
	for my $incr_dir (@chain)
	{
		my $inc = read_manifest($incr_dir);
		my $files = $inc->{files};

		# 2. Whatever the incremental does not list is gone: deleted files,
		# dropped databases and tablespaces.
		for my $oid (keys %{ $prev->{tablespaces} })
		{
			next if exists $inc->{tablespaces}{$oid};
			unlink("$target/pg_tblspc/$oid");
			remove_tree("$tsroot/$oid");
		}
		for my $path (reverse sort keys %{ $prev->{files} })
		{
			my $e = $prev->{files}{$path};
			next if $files->{$path} && $files->{$path}{type} eq $e->{type};
			next if $path =~ m{^pg_tblspc/\d+(?:/|$)}
			  && !-e "$target/pg_tblspc/" . (split m{/}, $path)[1];
			if ($e->{type} eq 'dir') { remove_tree("$target/$path") }
			else { unlink("$target/$path") or croak "unlink $path: $!" }
		}
		for my $oid (keys %{ $inc->{tablespaces} })
		{
			_make_tablespace($target, $tsroot, $oid)
			  unless exists $prev->{tablespaces}{$oid};
		}

		# 3. The incremental's files.
		for my $path (sort keys %$files)
		{
			my $e = $files->{$path};
			if ($e->{type} eq 'dir')
			{
				make_path("$target/$path", { mode => 0700 })
				  unless $path =~ m{^pg_tblspc/\d+$};
				next;
			}
			$st{files}++;
			if ($e->{how} eq 'whole')
			{
				my $n = _copy_file("$incr_dir/files/$path", "$target/$path");
				croak "\"$path\" is missing from the incremental"
				  unless defined $n;
				croak "\"$path\": $n bytes, listed $e->{size}"
				  unless $n == $e->{size};
				$st{bytes} += $n;
				next;
			}
			croak "\"$path\" is not in the previous backup"
			  unless -f "$target/$path";
			truncate("$target/$path", $e->{size})
			  or croak "could not truncate \"$path\": $!";
			if ($e->{how} eq 'delta')
			{
				my $p = _apply_delta("$incr_dir/delta/$path", "$target/$path");
				$st{pages} += $p;
				$st{bytes} += $p * BLCKSZ;
			}
		}
		$wal_from = "$incr_dir/wal";
		$label_from = $incr_dir;
		$prev = $inc;
	}

	# 4. WAL, backup_label, tablespace_map (with the new locations).
	remove_tree("$target/pg_wal");
	make_path("$target/pg_wal/archive_status", { mode => 0700 });
	opendir(my $wd, $wal_from) or croak "\"$wal_from\": $!";
	for my $f (grep { -f "$wal_from/$_" } readdir($wd))
	{
		_copy_file("$wal_from/$f", "$target/pg_wal/$f");
	}
	closedir($wd);
	_copy_file("$label_from/backup_label", "$target/backup_label")
	  // croak "no backup_label in $label_from";
	if (-f "$label_from/tablespace_map")
	{
		my $map = '';
		for my $line (split /\n/, _read_file("$label_from/tablespace_map"))
		{
			my ($oid) = $line =~ /^(\d+) / or croak "bad tablespace_map line";
			(my $loc = "$tsroot/$oid") =~ s/([\\\n\r])/\\$1/g;
			$map .= "$oid $loc\n";
		}
		_write_file("$target/tablespace_map", $map);
	}
	return \%st;
}


# Starts a node whose data directory restore() filled (its postgresql.conf is
# the source's): points it at its own port and socket or address, starts it
# and waits until recovery is over.  With fail_ok => 1, returns 0 instead of
# dying (or bailing out) when it does not start or does not finish recovery.
sub start_restored
{
	my ($node, %opt) = @_;
	my $host = $node->host;
	$node->append_conf('postgresql.conf',
		'port = ' . $node->port . "\n"
		  . ($host =~ m{^/}
			? "unix_socket_directories = '$host'\nlisten_addresses = ''"
			: "listen_addresses = '$host'\nunix_socket_directories = ''"));
	if ($opt{fail_ok})
	{
		return 0 unless $node->start(fail_ok => 1);
		return $node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()') ? 1 : 0;
	}
	$node->start;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or croak 'the restored cluster did not finish recovery';
	return 1;
}

1;
