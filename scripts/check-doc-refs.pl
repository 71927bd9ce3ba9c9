#!/usr/bin/perl
# check-doc-refs.pl -- fails when a document or a comment names a file or a
# function that does not exist, so that the docs cannot drift from the code
# unnoticed (a renamed function, a moved file).
#
#   files      every path-like token ending in .cpp, .h, .pl, .pm, .sh, .sql or
#              .md, in the documents (README.md, docs/, bench/RESULTS.md) and
#              in the comments and strings of the sources (src/, include/, t/,
#              scripts/, bench/, debian/, the Makefile), must name a file of
#              the repository: a token with a slash must be the end of a
#              tracked path (src/pg/core/shared_state.h, ptrack/map.h), a
#              bare name the name of a tracked file.  #include lines are left
#              to the compiler; tokens with wildcards or variables are skipped.
#   functions  every `name()` in README.md and docs/*.md (a backquoted name
#              followed by parentheses, Class::name() included) must be
#              defined or called in the sources: `name(` occurs in src/,
#              include/, t/, scripts/ or the SQL scripts.
#   places     a function placed in a source file must be there: "`name()`
#              in path" and "`path` (`name()`, `other()`...)" (the phrasing
#              of the flows in docs/design.md; the path may go without its
#              backquotes) name a file that defines each function (a .cpp: a
#              line starting at column 0 with `name(`) or, for a header,
#              declares or defines it (`name(` outside its comments).
#   sections   every "design.md N.M" or "design.md section N" (also
#              "design.md, section", "sections", "Sections"), in the
#              documents and the sources, and every "Section(s) N.M" inside
#              docs/design.md itself, must name a heading of docs/design.md
#              ("## N. ..." or "### N.M ...").
#
# Names of PostgreSQL, pg_probackup and the C library that the documents cite
# are listed below (KNOWN_FILES, KNOWN_FUNCTIONS); keep those lists short and
# explicit.
#
# Usage: scripts/check-doc-refs.pl   (from the repository root; needs git)
use strict;
use warnings;

# Files outside this repository that the documents and comments cite: the
# PostgreSQL sources and headers, pg_probackup's, and files generated at run time.
my %KNOWN_FILES = map { $_ => 1 } qw(
  postgres.h fmgr.h funcapi.h miscadmin.h pgstat.h pg_control.h pg_crc32c.h
  xlog.h xlogreader.h xlogrecovery.h xlogutils.h xlog_internal.h xlogrecord.h
  bufpage.h relpath.h fd.h spin.h lwlock.h latch.h proc.h shmem.h ipc.h
  guc.h guc_tables.h timestamp.h memutils.h elog.h hsearch.h tuplestore.h
  builtins.h pg_lsn.h relfilenode.h bgworker.h slot.h atomics.h
  c.h postgres_fe.h postgres_ext.h pg_config.h
  Cluster.pm Utils.pm PostgreSQL/Test/Cluster.pm PostgreSQL/Test/Utils.pm
  lsn_scan.cpp fault_cost.cpp oracle.pl
);

# A path under one of PostgreSQL's include directories, or in its source tree
# (src/include/..., src/backend/...), is PostgreSQL's.
my $PG_PATH = qr{^(?:access|catalog|commands|common|lib|port|portability|postmaster|replication|
					storage|utils|executor|nodes|parser|tcop|src/(?:include|backend|bin|common|port))/}x;

# Functions of PostgreSQL, pg_probackup and libc that the documents name.
my %KNOWN_FUNCTIONS = map { $_ => 1 } qw(
  pg_drop_replication_slot pg_current_wal_lsn pg_current_wal_insert_lsn
  pg_last_wal_replay_lsn pg_switch_wal pg_backup_start pg_backup_stop
  pg_start_backup pg_stop_backup pg_promote pg_control_checkpoint
  pg_create_physical_replication_slot pg_stat_file pg_read_binary_file
  pg_ls_dir pg_walfile_name txid_current now count sum max min
  stat fsync rename unlink read write pread pwrite lseek open close
  ProcessSyncRequests BufferSync RelationCopyStorage smgrextend smgrwrite FuncnameGetCandidates
  mdwritev mdzeroextend log_newpages
);

sub git_files {
	my @files = split /\n/, `git ls-files`;
	die "check-doc-refs: git ls-files failed\n" if $? != 0;
	return grep { -f $_ } @files;
}

sub slurp {
	my ($path) = @_;
	open(my $fh, '<', $path) or die "check-doc-refs: cannot read $path: $!\n";
	local $/;
	my $text = <$fh>;
	close $fh;
	return $text;
}

my @tracked = git_files();
my (%by_name, %by_suffix);
for my $path (@tracked) {
	my @parts = split m{/}, $path;
	$by_name{ $parts[-1] } = 1;
	for my $i (0 .. $#parts) {
		$by_suffix{ join('/', @parts[ $i .. $#parts ]) } = 1;
	}
}

sub file_exists {
	my ($token) = @_;
	$token =~ s{^(\./|\.\./|/)+}{};
	return 1 if $KNOWN_FILES{$token} || $token =~ $PG_PATH;
	return $by_suffix{$token} if $token =~ m{/};
	return $by_name{$token};
}

my @problems;

# ---- files ---------------------------------------------------------------------

my @documents = grep { m{^(README\.md|docs/.*\.md|bench/RESULTS\.md)$} } @tracked;
my @sources = grep {
	m{^(src|include|t|scripts|bench|debian)/} || $_ eq 'Makefile'
} @tracked;
@sources = grep { !m{\.(md|out|sql|patch)$} && !m{^t/.*\.(conf)$} } @sources;

for my $path (@documents, @sources) {
	my $line_no = 0;
	for my $line (split /\n/, slurp($path)) {
		$line_no++;
		next if $line =~ /^\s*#\s*include\s/;
		while ($line =~ m{([A-Za-z0-9_.\-/*\$\{\}:]*[A-Za-z0-9_]\.(?:cpp|h|pl|pm|sh|sql|md))(?![A-Za-z0-9_])}g) {
			my $token = $1;
			next if $token =~ /[*\$\{\}]/;                 # a pattern or a variable
			$token =~ s/^.*://;                             # "file:line", "path:path"
			next if $token =~ m{^(https?:|//)} || $line =~ m{https?://\S*\Q$token\E};
			next if $token =~ m{^\.[a-z]+$};              # ".sql", a suffix
			push @problems, "$path:$line_no: names \"$token\", which is no file of the repository"
				unless file_exists($token);
		}
	}
}

# A function placed in a file: a source file must define it (a line starting
# at column 0 with `name(`), a header declare or define it (`name(` outside
# its comments).  A path that names no file, or several, is left to the file
# check above.
my %code_of;
sub code_without_comments {
	my ($file) = @_;
	return $code_of{$file} //= do {
		my $text = slurp($file);
		$text =~ s{/\*.*?\*/}{ }gs;
		$text =~ s{//[^\n]*}{}g;
		$text;
	};
}

sub check_place {
	my ($doc, $line_no, $name, $file) = @_;
	my @matches = grep { $_ eq $file || m{/\Q$file\E$} } @tracked;
	return unless @matches == 1;
	my $code = code_without_comments($matches[0]);
	my $found = $file =~ /\.h$/ ? $code =~ /\b\Q$name\E\s*\(/ : $code =~ /^[A-Za-z_].*\b\Q$name\E\s*\(/m;
	push @problems, "$doc:$line_no: places $name() in $file, which does not "
		. ($file =~ /\.h$/ ? "declare or define" : "define") . " it"
		unless $found;
}

# ---- functions -----------------------------------------------------------------

my $code = join("\n", map { slurp($_) } grep {
	m{^(src|include|t|scripts)/} || m{^ptrack--.*\.sql$}
} grep { !m{\.md$} } @tracked);
my %seen_in_code;

for my $path (grep { m{^(README\.md|docs/.*\.md)$} } @tracked) {
	my $line_no = 0;
	for my $line (split /\n/, slurp($path)) {
		$line_no++;
		while ($line =~ /`(?:[A-Za-z_][A-Za-z0-9_]*::)*([A-Za-z_][A-Za-z0-9_]*)\(\)`/g) {
			my $name = $1;
			next if $KNOWN_FUNCTIONS{$name};
			$seen_in_code{$name} //= ($code =~ /\b\Q$name\E\s*\(/) ? 1 : 0;
			push @problems, "$path:$line_no: names $name(), which the sources neither define nor call"
				unless $seen_in_code{$name};
		}
	}
}

# Places, over the whole text of each document (a phrase may run over a line
# break): "`name()` in path", "`path` (`name()`, `other()`...)".
my $FN = qr{`(?:[A-Za-z_][A-Za-z0-9_]*::)*([A-Za-z_][A-Za-z0-9_]*)\(\)`};
for my $path (grep { m{^(README\.md|docs/.*\.md)$} } @tracked) {
	my $text = slurp($path);
	my $line_of = sub { 1 + (substr($text, 0, $_[0]) =~ tr/\n//) };
	while ($text =~ m{$FN\s+in\s+`?([A-Za-z0-9_./]+\.(?:cpp|h))}g) {
		check_place($path, $line_of->($-[0]), $1, $2);
	}
	while ($text =~ m{(?<![A-Za-z0-9_./])`?([A-Za-z0-9_./]+\.(?:cpp|h))`?\s+\(((?:$FN(?:,\s+)?)+)}g) {
		my ($file, $list, $at) = ($1, $2, $-[0]);
		while ($list =~ /$FN/g) {
			check_place($path, $line_of->($at), $1, $file);
		}
	}
}

# ---- sections of docs/design.md ------------------------------------------------

my %section;
for my $line (split /\n/, slurp('docs/design.md')) {
	$section{$1} = 1 if $line =~ /^##\s+(\d+)\.\s/;
	$section{$1} = 1 if $line =~ /^###\s+(\d+\.\d+)\s/;
}
my $NUMS = qr{\d+(?:\.\d+)?(?:(?:\s*(?:-|,|and)\s*)\d+(?:\.\d+)?)*};
for my $path (@documents, @sources) {
	my $text = slurp($path);
	my $line_of = sub { 1 + (substr($text, 0, $_[0]) =~ tr/\n//) };
	my @refs;
	while ($text =~ m{design\.md,?\s+(?:[Ss]ections?\s+)?($NUMS)}g) {
		push @refs, [ $-[0], $1 ];
	}
	if ($path eq 'docs/design.md') {
		while ($text =~ m{\b[Ss]ections?\s+($NUMS)}g) {
			push @refs, [ $-[0], $1 ];
		}
	}
	for my $ref (@refs) {
		my ($at, $list) = @$ref;
		for my $n ($list =~ /(\d+(?:\.\d+)?)/g) {
			push @problems, "$path:" . $line_of->($at) . ": names design.md section $n, which docs/design.md has no heading for"
				unless $section{$n};
		}
	}
}

if (@problems) {
	print STDERR "check-doc-refs: $_\n" for @problems;
	print STDERR "check-doc-refs: ", scalar(@problems), " reference(s) to nothing: fix the text (or, for a name "
		. "outside this repository, add it to the lists in scripts/check-doc-refs.pl)\n";
	exit 1;
}
print STDERR "check-doc-refs: every file, function and design.md section the docs and comments name exists\n";
exit 0;
