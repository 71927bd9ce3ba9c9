/*
 * follower.cpp -- the WAL follower's shared state (follower.h): the structs
 * every part of it reads, the WAL reader it opens and closes and where that
 * reader gets its pages, and the problems it publishes for backends
 * (FollowerStartError, shared_state.h).
 *
 * These sit beneath every other file of the follower because all of them
 * use them: the reading loop and the cuts read WAL with the same reader,
 * the start, the summaries and the cuts publish problems, which the
 * backends' side (capture_wal.cpp) reads.
 */
extern "C" {
#include "postgres.h"

#include <unistd.h>

#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogrecovery.h"
#include "access/xlogutils.h"
#include "storage/spin.h"
#include "utils/memutils.h"
}

#include "capture/wal/follower.h"
#include "capture/wal/inplace_reader.h"
#include "capture/wal_archive.h"
#include "compat/compat.h"

namespace ptrack::pg::wal_follower {

Summaries summaries;
Follower follower;
int wal_batch_delay_ms = 0;
int wal_reader_mode = kWalReaderInplace;

TimeLineID current_timeline()
{
    TimeLineID tli = 0;
    if (RecoveryInProgress())
        (void) GetXLogReplayRecPtr(&tli);
    else
        tli = GetWALInsertionTimeLine();
    return tli;
}

namespace {

/*
 * The reader's page_read callback: up to XLOG_BLCKSZ bytes of the WAL page
 * at `page` into `buf`, at least `req_len` of them; -1, with end_of_wal set,
 * when the WAL flushed does not reach page + req_len yet.
 *
 * During recovery and on a historical timeline it is xlogutils.c's no-wait
 * reader, which reads up to the replay position and follows the timeline
 * history.  On a primary reading its current timeline, which is where the
 * follower spends its time, it reads the same bytes up to the flush
 * position, taking them from the WAL buffers in shared memory while they
 * still hold them (wal_read_from_buffers(), as the walsender does) and from
 * the segment files for the rest: the WAL the follower reads was written a
 * moment ago, so the buffers usually hold it, and a read there is a copy
 * from shared memory instead of a system call.  The bytes are checked the
 * same way whatever their source: xlogreader verifies each page header and
 * each record's CRC.
 *
 * The reader's segment file (seg.ws_file) must stay the file of
 * seg.ws_segno, which xlogreader sets to the page's segment after every
 * page read, and which WALRead() trusts: a page of another segment served
 * from the buffers closes the file first.
 */
int read_page(XLogReaderState* state, XLogRecPtr page, int req_len, XLogRecPtr target_record, char* buf)
{
    if (RecoveryInProgress())
        return read_local_xlog_page_no_wait(state, page, req_len, target_record, buf);
    TimeLineID tli = 0;
    const XLogRecPtr flushed = GetFlushRecPtr(&tli);
    XLogReadDetermineTimeline(state, page, req_len, tli);
    if (state->currTLI != tli)
        return read_local_xlog_page_no_wait(state, page, req_len, target_record, buf);
    if (page + static_cast<XLogRecPtr>(req_len) > flushed) {
        static_cast<ReadLocalXLogPageNoWaitPrivate*>(state->private_data)->end_of_wal = true;
        return -1;
    }
    const Size count = Min(static_cast<Size>(XLOG_BLCKSZ), static_cast<Size>(flushed - page));
    const Size from_buffers = wal_read_from_buffers(buf, page, count, tli);
    if (from_buffers < count) {
        WALReadError error;
        if (!WALRead(state, buf + from_buffers, page + from_buffers, count - from_buffers, tli, &error))
            WALReadRaiseError(&error);
    } else if (state->seg.ws_file >= 0 && !XLByteInSeg(page, state->seg.ws_segno, state->segcxt.ws_segsize)) {
        state->routine.segment_close(state);
    }
    return static_cast<int>(count);
}

}  // namespace

void open_reader()
{
    XLogReaderRoutine routine{};
    routine.page_read = read_page;
    routine.segment_open = archive_segment_open; /* pg_wal, else the archive below its limit (wal_archive.h) */
    routine.segment_close = wal_segment_close;
    MemoryContext old = MemoryContextSwitchTo(follower.cxt);
    follower.page = static_cast<ReadLocalXLogPageNoWaitPrivate*>(palloc0(sizeof(ReadLocalXLogPageNoWaitPrivate)));
    follower.reader = XLogReaderAllocate(wal_segment_size, NULL, &routine, follower.page);
    MemoryContextSwitchTo(old);
    if (follower.reader == NULL)
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory"),
                        errdetail("ptrack could not allocate a WAL reading processor.")));
    /* Never another cluster's WAL, e.g. from a misconfigured archive: long page headers must carry ours. */
    follower.reader->system_identifier = GetSystemIdentifier();
}

/* Frees the readers and their open segments (also after an ERROR). */
void close_reader()
{
    inplace_close();
    if (follower.reader != NULL && follower.reader->seg.ws_file >= 0)
        close(follower.reader->seg.ws_file);
    follower.reader = NULL;
    follower.page = NULL;
    MemoryContextReset(follower.cxt);
}

/* Publishes a problem in `e` (shared_state.h), timed now: `message` and `hint` ("" if none). */
void publish_problem(FollowerStartError& e, int sqlerrcode, const char* message, const char* hint)
{
    const TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&e.mutex);
    e.time = now;
    e.sqlerrcode = sqlerrcode;
    strlcpy(e.message, message, sizeof(e.message));
    strlcpy(e.hint, hint, sizeof(e.hint));
    SpinLockRelease(&e.mutex);
}

/* The problem in `e` is over. */
void clear_problem(FollowerStartError& e)
{
    SpinLockAcquire(&e.mutex);
    e.time = 0;
    SpinLockRelease(&e.mutex);
}

/*
 * The problem published in `e` (the reason the follower cannot start, or
 * the summary it cannot write), copied under its spinlock into `message`
 * and `hint` (sizeof the fields): its time, 0 if none.
 */
TimestampTz read_problem(FollowerStartError& e, char* message, char* hint)
{
    SpinLockAcquire(&e.mutex);
    const TimestampTz since = e.time;
    memcpy(message, e.message, sizeof(e.message));
    memcpy(hint, e.hint, sizeof(e.hint));
    SpinLockRelease(&e.mutex);
    message[sizeof(e.message) - 1] = '\0';
    hint[sizeof(e.hint) - 1] = '\0';
    return since;
}

/* The reason the follower cannot start, stated by itself (hold_summaries()): `message` and `hint` ("" if none). */
void record_start_reason(int sqlerrcode, const char* message, const char* hint)
{
    publish_problem(shared->follower_start_error, sqlerrcode, message, hint);
}

/* The follower has started: nothing prevents it any more. */
void clear_start_error()
{
    clear_problem(shared->follower_start_error);
}

}  // namespace ptrack::pg::wal_follower
