# Copyright (c) the ptrack authors

=pod

=head1 NAME

PtrackProbackup - the real client in the TAP tests: pg_probackup, or why a
test runs without it

=head1 SYNOPSIS

  use PtrackProbackup qw(pg_probackup);

  SKIP:
  {
      my $pgpro = pg_probackup('the FULL + PTRACK chain on a fresh standby');
      skip 'no pg_probackup', 4 unless $pgpro;
      my ($rc, $out) = $pgpro->run('init', '-B', $catalog);
      is($rc, 0, 'pg_probackup init') or diag $out;
      ... "archive_command = '\"" . $pgpro->path . "\" archive-push ...'"
  }

=head1 DESCRIPTION

The binary comes from PTRACK_PG_PROBACKUP (scripts/run-tests.sh sets it to
the one it built for the server under test from the vendored source, or the
one it was given; docs/operations.md, "Getting pg_probackup").

=over

=item pg_probackup($purpose)

An object for the pg_probackup of PTRACK_PG_PROBACKUP when that is an
executable; otherwise undef, after saying why in the test's output, where
prove shows it without -v: a C<diag> naming C<$purpose> (what the test then
leaves out) and how to run it.  When the environment asks for the real client
(CI=true, or PTRACK_REQUIRE_PG_PROBACKUP=1), a missing pg_probackup is a failed
test instead: the caller's skip then leaves out the rest, and the test fails.

=item $pgpro->run(@args)

Runs pg_probackup with C<@args> (15 minutes at most); returns its exit code
and its output (stdout and stderr together).

=item $pgpro->path

The binary, for commands the server runs (archive_command, restore_command).

=back

=cut

package PtrackProbackup;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;
use Test::More ();

our @EXPORT_OK = qw(pg_probackup);

sub _required
{
	return (($ENV{CI} // '') eq 'true') || (($ENV{PTRACK_REQUIRE_PG_PROBACKUP} // '') eq '1');
}

sub pg_probackup
{
	my ($purpose) = @_;
	my $path = $ENV{PTRACK_PG_PROBACKUP} // '';
	return bless { path => $path }, __PACKAGE__ if $path ne '' && -f $path && -x $path;
	my $why =
	  $path eq ''
	  ? 'PTRACK_PG_PROBACKUP is not set'
	  : "PTRACK_PG_PROBACKUP=$path is not an executable file";
	if (_required())
	{
		local $Test::Builder::Level = $Test::Builder::Level + 1;    # the caller's line
		Test::More::fail("$purpose needs pg_probackup, which CI (CI=true) or PTRACK_REQUIRE_PG_PROBACKUP=1 "
			  . "requires, but $why");
	}
	else
	{
		Test::More::diag("skipped: $purpose needs pg_probackup, and $why (scripts/run-tests.sh builds it "
			  . 'from the vendored source; or set PTRACK_PG_PROBACKUP=/path/to/pg_probackup, see '
			  . 'docs/operations.md, "Getting pg_probackup")');
	}
	return undef;
}

sub path
{
	my ($self) = @_;
	return $self->{path};
}

sub run
{
	my ($self, @args) = @_;
	my $out = '';
	IPC::Run::run([ $self->{path}, @args ], '>&', \$out, IPC::Run::timeout(900));
	return ($? >> 8, $out);
}

1;
