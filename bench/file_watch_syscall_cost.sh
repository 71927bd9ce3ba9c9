#!/usr/bin/env bash
#
# file_watch_syscall_cost.sh -- what an inotify watch adds to one 8 KB
# pwrite() of a relation file: the kernel-side cost the WAL follower's file
# watch (src/pg/capture/wal/growth_watch.h) puts on every write of a
# PostgreSQL backend, the checkpointer and the background writer.
#
# pgbench runs on this shared 2-core machine differ by 10-30% between
# identical runs (bench/file_watch_write_cost.sh), far more than this cost,
# so it is measured where it is paid: a small C program times N pwrite()s
# of 8 KB (page cache, no fsync) into files of one directory, with no watch
# and with a watch of the directory (the follower's mask for relation
# directories), drained by read() every 1000 writes (the follower drains
# every 50 ms at least) -- the drain is inside the timed loop, so the
# figure is an upper bound of the writer's cost plus the reader's.  Two
# patterns: every write to the same file (the kernel merges an event with
# the one queued just before it: the checkpointer writing a file's blocks
# in order) and writes alternating between two files (no merging: backends
# evicting buffers of different relations).  Alternating rounds (no watch,
# watch, no watch, ...); the median ns per write of each.
#
# Usage: bench/file_watch_syscall_cost.sh [--writes N] [--rounds N]
#   (defaults 200000 writes, 7 rounds; needs cc and Linux)
set -euo pipefail
export LC_ALL=C
writes=200000
rounds=7
while [ $# -gt 0 ]; do
    case $1 in
        --writes) writes=${2:?}; shift ;;
        --rounds) rounds=${2:?}; shift ;;
        *) echo "usage: $0 [--writes N] [--rounds N]" >&2; exit 1 ;;
    esac
    shift
done
work=$(mktemp -d "${TMPDIR:-/tmp}/file_watch_syscall_cost.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/cost.c" <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* ns per pwrite() of 8 KB: `files` files used in turn, watched or not. */
static double run(const char* dir, int files, int watched, long writes)
{
    char path[2][4096], page[8192], buf[65536];
    int fd[2];
    memset(page, 0, sizeof(page));
    for (int i = 0; i < 2; ++i) {
        snprintf(path[i], sizeof(path[i]), "%s/1634%d", dir, i);
        fd[i] = open(path[i], O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (fd[i] < 0 || ftruncate(fd[i], 8192L * 1024) != 0) { perror("open"); exit(1); }
    }
    int in = -1;
    if (watched) {
        in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if (in < 0 || inotify_add_watch(in, dir, IN_MODIFY | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR) < 0) {
            perror("inotify"); exit(1);
        }
    }
    double t0 = now_ns();
    for (long w = 0; w < writes; ++w) {
        if (pwrite(fd[w % files], page, sizeof(page), 8192L * (w % 1024)) != sizeof(page)) { perror("pwrite"); exit(1); }
        if (in >= 0 && w % 1000 == 999)
            while (read(in, buf, sizeof(buf)) > 0) {}
    }
    double t1 = now_ns();
    if (in >= 0) close(in);
    for (int i = 0; i < 2; ++i) { close(fd[i]); unlink(path[i]); }
    return (t1 - t0) / writes;
}

static int cmp(const void* a, const void* b)
{
    double x = *(const double*) a, y = *(const double*) b;
    return x < y ? -1 : x > y;
}

int main(int argc, char** argv)
{
    const char* dir = argv[1];
    long writes = atol(argv[2]);
    int rounds = atoi(argv[3]);
    for (int files = 1; files <= 2; ++files) {
        double off[64], on[64];
        for (int r = 0; r < rounds && r < 64; ++r) {
            off[r] = run(dir, files, 0, writes);
            on[r] = run(dir, files, 1, writes);
        }
        qsort(off, rounds, sizeof(double), cmp);
        qsort(on, rounds, sizeof(double), cmp);
        printf("| %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %+.0f |\n",
               files == 1 ? "one file (events merge)" : "two files in turn (no merging)",
               off[rounds / 2], off[0], off[rounds - 1], on[rounds / 2], on[0], on[rounds - 1],
               on[rounds / 2] - off[rounds / 2]);
    }
    return 0;
}
EOF
cc -O2 -o "$work/cost" "$work/cost.c"
mkdir "$work/dir"
echo "# file_watch_syscall_cost.sh: ns per 8 KB pwrite(), without and with an inotify watch of the directory"
echo "command:    $0 --writes $writes --rounds $rounds"
echo "date:       $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine:    $(nproc) CPUs, kernel $(uname -r), $(findmnt -n -o FSTYPE -T "$work") file system"
echo "load avg:   $(cut -d' ' -f1-3 /proc/loadavg) (at start)"
echo
echo "| pattern | no watch, ns per write (median, range) | watched, drained every 1000 writes | difference, ns |"
echo "|---|---:|---:|---:|"
"$work/cost" "$work/dir" "$writes" "$rounds"
echo "load avg:   $(cut -d' ' -f1-3 /proc/loadavg) (at the end)"
