#!/usr/bin/perl
# check-layers.pl -- fails when the code's dependencies run in a circle.
#
# The tree is layered (docs/design.md section 7.1): src/pg/ptrack.cpp on top,
# then the folders of src/pg, then the engine (src/engine, include/ptrack).
# Every include and every call must run downward: a cycle means two files
# (or two folders) can only be understood together, and the layering the
# folders show would be false.  Checked at two levels:
#
#   includes  each `#include "..."` that resolves to a file of the project
#             (next to the includer, under src/pg, or under include/) is an
#             edge from the includer's module to the included one's;
#   link      with --objects (the Makefile passes it after linking), each
#             symbol an object file imports (nm -u) that exactly one other
#             object file of the project defines is an edge between them.
#
# A module is a header and its source file together (src/pg/core/shared_state.h
# and src/pg/core/shared_state.cpp; include/ptrack/map.h and src/engine/map.cpp); a folder is
# the module's directory (engine for the engine).  A cycle among modules, or
# among folders, fails the check and is printed with the edges that make it.
#
# Usage: scripts/check-layers.pl [--objects]   (from the repository root)
use strict;
use warnings;

my $with_objects = grep { $_ eq '--objects' } @ARGV;

# Every .h and .cpp file under `dir`, recursively.
sub files_under {
	my ($dir) = @_;
	my @out;
	opendir(my $dh, $dir) or return ();
	for my $name (sort readdir $dh) {
		next if $name =~ /^\./;
		my $path = "$dir/$name";
		if (-d $path) { push @out, files_under($path); }
		elsif ($name =~ /\.(h|cpp)$/) { push @out, $path; }
	}
	closedir $dh;
	return @out;
}

# The module of a path: "engine/x" for the engine, "pg/dir/x" under src/pg.
sub module_of {
	my ($path) = @_;
	return "engine/$1" if $path =~ m{^(?:include/ptrack|src/engine)/([^/]+)\.(?:h|cpp|o)$};
	return "pg/$1" if $path =~ m{^src/pg/(.+)\.(?:h|cpp|o)$};
	return undef;
}

sub folder_of {
	my ($module) = @_;
	(my $folder = $module) =~ s{/[^/]+$}{};
	return $folder;
}

# Strongly connected components with more than one member (Tarjan), each
# as [one cycle through it (a list of nodes), its number of members].
sub cycles {
	my ($edges) = @_;
	my (%index, %low, %on, @stack, @found);
	my $next = 0;
	my $visit;
	$visit = sub {
		my ($v) = @_;
		$index{$v} = $low{$v} = $next++;
		push @stack, $v;
		$on{$v} = 1;
		for my $w (sort keys %{ $edges->{$v} || {} }) {
			if (!defined $index{$w}) {
				$visit->($w);
				$low{$v} = $low{$w} if $low{$w} < $low{$v};
			} elsif ($on{$w}) {
				$low{$v} = $index{$w} if $index{$w} < $low{$v};
			}
		}
		if ($low{$v} == $index{$v}) {
			my @scc;
			while (1) {
				my $w = pop @stack;
				$on{$w} = 0;
				push @scc, $w;
				last if $w eq $v;
			}
			push @found, [ cycle_in(\@scc, $edges), scalar @scc ] if @scc > 1;
		}
	};
	$visit->($_) for grep { !defined $index{$_} } sort keys %$edges;
	return @found;
}

# One cycle inside a component: breadth-first from its first node back to it.
sub cycle_in {
	my ($scc, $edges) = @_;
	my %member = map { $_ => 1 } @$scc;
	my $start = (sort @$scc)[0];
	my %prev;
	my @queue = ($start);
	while (@queue) {
		my $v = shift @queue;
		for my $w (sort keys %{ $edges->{$v} }) {
			next unless $member{$w};
			if ($w eq $start) {
				my @path = ($v);
				unshift @path, $prev{ $path[0] } while defined $prev{ $path[0] };
				return [ @path, $start ];
			}
			next if exists $prev{$w} || $w eq $start;
			$prev{$w} = $v;
			push @queue, $w;
		}
	}
	return [ @$scc ];
}

# Reports the cycles of a graph whose edges carry their reasons; returns their number.
sub report {
	my ($what, $edges) = @_;
	my $bad = 0;
	for my $found (cycles($edges)) {
		my ($cycle, $members) = @$found;
		$bad++;
		print STDERR "check-layers: $what cycle: ", join(' -> ', @$cycle),
			($members > @$cycle - 1 ? " (one of the loops among $members)" : ''), "\n";
		for my $i (0 .. $#$cycle - 1) {
			my ($a, $b) = @$cycle[ $i, $i + 1 ];
			my @why = sort keys %{ $edges->{$a}{$b} };
			splice(@why, 3, @why - 3, '...') if @why > 3;
			print STDERR "    $a -> $b: ", join('; ', @why), "\n";
		}
	}
	return $bad;
}

# Adds the edge a -> b (and its folder edge) with a reason, unless a module is its own.
sub add_edge {
	my ($modules, $folders, $a, $b, $why) = @_;
	return if $a eq $b;
	$modules->{$a}{$b}{$why} = 1;
	$modules->{$b} ||= {};
	my ($fa, $fb) = (folder_of($a), folder_of($b));
	$folders->{$fb} ||= {};
	$folders->{$fa}{$fb}{"$a -> $b"} = 1 if $fa ne $fb;
}

my @files = (files_under('src/pg'), files_under('src/engine'), files_under('include/ptrack'));
die "check-layers: no sources found (run from the repository root)\n" unless @files;
my %is_file = map { $_ => 1 } @files;

my (%modules, %folders);
my $include_edges = 0;
for my $file (@files) {
	my $from = module_of($file) or next;
	$modules{$from} ||= {};
	$folders{ folder_of($from) } ||= {};
	open(my $fh, '<', $file) or die "check-layers: cannot read $file: $!\n";
	(my $dir = $file) =~ s{/[^/]+$}{};
	while (my $line = <$fh>) {
		next unless $line =~ /^\s*#\s*include\s+"([^"]+)"/;
		my $target = $1;
		my ($found) = grep { $is_file{$_} } ("$dir/$target", "src/pg/$target", "include/$target");
		next unless $found;
		my $to = module_of($found) or next;
		add_edge(\%modules, \%folders, $from, $to, "$file includes \"$target\"");
		$include_edges++;
	}
	close $fh;
}
my $bad = report('include', \%modules) + report('include (folders)', \%folders);

my $link_edges = 0;
if ($with_objects) {
	my @objects = grep { -e $_ } map { (my $o = $_) =~ s/\.cpp$/.o/; $o } grep { /\.cpp$/ } @files;
	my (%definer, %imports);
	for my $object (@objects) {
		my $module = module_of($object);
		for my $line (`nm -g '$object'`) {
			if ($line =~ /^\s+U\s+(\S+)/) {
				push @{ $imports{$module} }, $1;
			} elsif ($line =~ /^[0-9a-f]+\s+[TDBR]\s+(\S+)/) {
				$definer{$1}{$module} = 1;
			}
		}
		die "check-layers: nm failed on $object\n" if $? != 0;
	}
	my (%lmodules, %lfolders);
	for my $module (sort keys %imports) {
		$lmodules{$module} ||= {};
		for my $symbol (@{ $imports{$module} }) {
			my @by = keys %{ $definer{$symbol} || {} };
			next unless @by == 1;
			(my $name = `echo '$symbol' | c++filt`) =~ s/\(.*//s;
			chomp $name;
			add_edge(\%lmodules, \%lfolders, $module, $by[0], "calls $name");
			$link_edges++;
		}
	}
	$bad += report('link', \%lmodules) + report('link (folders)', \%lfolders);
	print STDERR "check-layers: link: ", scalar(@objects), " objects, $link_edges imports between them\n"
		unless $bad;
}

exit 1 if $bad;
print STDERR "check-layers: ", scalar(@files), " files, $include_edges includes",
	($with_objects ? ", the calls between objects" : ''), ": no cycle among files or folders\n";
exit 0;
