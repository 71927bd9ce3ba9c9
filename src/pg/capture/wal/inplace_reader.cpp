/*
 * inplace_reader.cpp -- the WAL follower's in-place record reader
 * (inplace_reader.h).  Written from the layouts of access/xlogrecord.h and
 * access/xlog_internal.h and the rules xlogreader.c applies to them; what a
 * record looks like in the files:
 *
 *   A segment is a run of XLOG_BLCKSZ pages, each opening with a page header
 *   (the long one on a segment's first page).  A record begins MAXALIGNed
 *   anywhere after a page header, and runs on over as many pages as it needs:
 *   every page it continues on has XLP_FIRST_IS_CONTRECORD set and xlp_rem_len
 *   the bytes of the record still to come.  A record that ends exactly at a
 *   page's end leaves the next record to begin after the next page header.
 *   The next record begins at the record's end MAXALIGNed, or at the next
 *   segment's start after XLOG_SWITCH (the rest of that segment is padding).
 *
 *   A record is its 24-byte header (XLogRecord), then the block headers (one
 *   per block reference, in increasing block id order: id, fork and flags,
 *   data length, an image header if any, the relation unless
 *   BKPBLOCK_SAME_REL, the block number; then the origin and top-level xid
 *   if any, then the main data's length), then the block images and data,
 *   then the main data: its last main_data_len bytes.  The lengths the
 *   headers give must add up to the record's length exactly.  xl_crc is the
 *   CRC-32C of everything after the header, then of the header up to xl_crc.
 *
 * How it reads: the segment file of the current timeline is read with
 * pread in chunks of kChunkBytes into one buffer, never past the limit
 * (bytes past the flush position may still change); a record is walked page
 * by page where it lies in that buffer.  The block headers are parsed in
 * place when the record's first kAreaBytes lie in one page, else from a
 * copy of those bytes.  The main data points into the buffer when it lies
 * in one page MAXALIGNed, else it is copied to a buffer of its own; it is
 * MAXALIGNed either way, as in xlogreader's decode buffer (xact records are
 * parsed through struct pointers).  The CRC covers every byte once.
 *
 * Reading with pread, not by mapping the segment files: a mapping spares
 * the copy out of the page cache, but every page of a segment mapped afresh
 * costs a page fault and a page table entry, and under a hypervisor that
 * shadows the guest's page tables that costs more than the copy (twice the
 * follower's CPU on update-heavy WAL: bench/RESULTS.md, "pread or mmap").
 * pread's cost is the copy, the same on every machine, and a read that
 * fails is an error code, never a signal.
 */
extern "C" {
#include "postgres.h"

#include <fcntl.h>
#include <stdarg.h>
#include <unistd.h>

#include "access/rmgr.h"
#include "access/xlog_internal.h"
#include "access/xlogrecord.h"
#include "catalog/pg_control.h"
#include "pgstat.h"
#include "port/pg_crc32c.h"
#include "utils/wait_event.h"
}

#include "capture/wal/inplace_reader.h"
#include "compat/compat.h"
#include "core/shared_state.h"

namespace ptrack::pg {

namespace {

constexpr uint32_t kPage = XLOG_BLCKSZ;

/* Bytes of WAL read at a time: a few dozen pages per system call. */
constexpr uint32_t kChunkBytes = 128 * 1024;
static_assert(kChunkBytes % XLOG_BLCKSZ == 0, "whole pages per read");

/*
 * The most a record's block headers take: 33 block references of at most
 * 27 bytes (4 of header, 5 of image header, 2 of compression header, 12 of
 * relation, 4 of block number), the origin (3), the top-level xid (5) and
 * the main data's length (5): 904.
 */
constexpr uint32_t kAreaBytes = 1024;
static_assert((XLR_MAX_BLOCK_ID + 1) * 27 + 13 <= kAreaBytes, "block headers fit in the parsed area");

/* The longest record read here (PostgreSQL 16+'s XLogRecordMaxSize); a longer one goes to xlogreader. */
constexpr uint32_t kMaxRecordBytes = 1020 * 1024 * 1024;

/* Main data this long or shorter needs no growth of its buffer. */
constexpr uint32_t kInitialMainDataBytes = 8192;

struct Reader {
    /* Where it stands. */
    Lsn pos;          /* the end of the last record read: where the next one may begin */
    Lsn prev_start;   /* where that record begins: the next one's xl_prev */
    TimeLineID tli;   /* the timeline whose segment files it reads */
    uint64 system_id; /* this cluster's, in every long page header */
    uint32 segment_bytes;
    Lsn limit; /* of the current inplace_read() */
    /* The last page header checked, and its timeline (never going back). */
    Lsn checked_page;
    TimeLineID page_tli;
    /* The open segment file. */
    int fd;
    XLogSegNo segno;
    /* The WAL [buf_start, buf_end) of segment `segno`, read while it was below the limit. */
    unsigned char* buf;
    Lsn buf_start, buf_end;
    /* Main data copied because it crosses pages or is not MAXALIGNed. */
    char* main_data;
    uint32 main_data_cap;
    /* After kNotHandled. */
    char why[200];
    bool read_failed; /* ... because its segment file could not be opened or read */
};

Reader reader = {.fd = -1};

/* The first bytes of a record's body, when they cross a page; MAXALIGNed for the parse's loads. */
union {
    unsigned char bytes[kAreaBytes];
    double align;
} area;

InplaceRead not_handled(const char* format, ...) pg_attribute_printf(1, 2);

/* kNotHandled, with the reason; the reader stays where it stands, before the record. */
InplaceRead not_handled(const char* format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(reader.why, sizeof(reader.why), format, args);
    va_end(args);
    return InplaceRead::kNotHandled;
}

template <typename T> T load(const unsigned char* p)
{
    T value;
    memcpy(&value, p, sizeof(value));
    return value;
}

uint32 page_header_bytes(Lsn page)
{
    return page % reader.segment_bytes == 0 ? SizeOfXLogLongPHD : SizeOfXLogShortPHD;
}

void forget_buffer()
{
    reader.buf_start = reader.buf_end = 0;
}

/* Closes the segment file and forgets what the buffer holds. */
void drop_segment()
{
    if (reader.fd >= 0)
        close(reader.fd);
    reader.fd = -1;
    forget_buffer();
}

/*
 * The page at `page`, whose bytes [page, page + upto) (upto <= kPage) are
 * in the buffer; nullptr with *status kEnd when they are not all below the
 * limit, kNotHandled when they cannot be read.  The pointer is valid until
 * the next call.
 */
const unsigned char* page_bytes(Lsn page, uint32 upto, InplaceRead* status)
{
    if (page + upto > reader.limit) {
        *status = InplaceRead::kEnd;
        return nullptr;
    }
    if (page >= reader.buf_start && page + upto <= reader.buf_end)
        return reader.buf + (page - reader.buf_start);
    if (reader.buf == nullptr) {
        reader.buf = static_cast<unsigned char*>(malloc(kChunkBytes));
        if (reader.buf == nullptr) {
            *status = not_handled("out of memory for its read buffer");
            return nullptr;
        }
    }
    XLogSegNo segno;
    XLByteToSeg(page, segno, reader.segment_bytes);
    if (reader.fd < 0 || segno != reader.segno) {
        drop_segment();
        char path[MAXPGPATH];
        XLogFilePath(path, reader.tli, segno, reader.segment_bytes);
        reader.fd = open(path, O_RDONLY | PG_BINARY, 0);
        if (reader.fd < 0) {
            *status = not_handled("could not open file \"%s\": %s", path, strerror(errno));
            reader.read_failed = true;
            return nullptr;
        }
        reader.segno = segno;
    }
    const Lsn segment_end = page - XLogSegmentOffset(page, reader.segment_bytes) + reader.segment_bytes;
    const Lsn to = Min(Min(segment_end, page + kChunkBytes), reader.limit);
    const size_t want = static_cast<size_t>(to - page);
    const off_t offset = static_cast<off_t>(XLogSegmentOffset(page, reader.segment_bytes));
    size_t got = 0;
    forget_buffer();
    pgstat_report_wait_start(WAIT_EVENT_WAL_READ);
    while (got < want) {
        const ssize_t n = pread(reader.fd, reader.buf + got, want - got, offset + static_cast<off_t>(got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            const int saved = errno;
            pgstat_report_wait_end();
            char name[MAXFNAMELEN];
            XLogFileName(name, reader.tli, reader.segno, reader.segment_bytes);
            *status =
                not_handled("could not read its segment file %s at offset %lld: %s", name,
                            static_cast<long long>(offset + got), n < 0 ? strerror(saved) : "the file ends there");
            reader.read_failed = true;
            return nullptr;
        }
        got += static_cast<size_t>(n);
    }
    pgstat_report_wait_end();
    reader.buf_start = page;
    reader.buf_end = to;
    if (upto > want) {
        *status = InplaceRead::kEnd; /* not reached: to >= page + upto */
        return nullptr;
    }
    return reader.buf;
}

/* True if `p` is a valid header of the page at `page`, as xlogreader requires; else *status is kNotHandled. */
bool page_header_ok(const unsigned char* p, Lsn page, InplaceRead* status)
{
    if (page == reader.checked_page)
        return true;
    const auto header = load<XLogPageHeaderData>(p);
    if (header.xlp_magic != XLOG_PAGE_MAGIC) {
        *status = not_handled("invalid magic number %04X in the page header at %X/%X", header.xlp_magic,
                              PTRACK_LSN_ARGS(page));
        return false;
    }
    if ((header.xlp_info & ~XLP_ALL_FLAGS) != 0 || (header.xlp_info & XLP_FIRST_IS_OVERWRITE_CONTRECORD) != 0) {
        *status = not_handled("page header info bits %04X at %X/%X", header.xlp_info, PTRACK_LSN_ARGS(page));
        return false;
    }
    const bool long_header = page % reader.segment_bytes == 0;
    if (((header.xlp_info & XLP_LONG_HEADER) != 0) != long_header) {
        *status = not_handled("page header info bits %04X at segment offset %u", header.xlp_info,
                              static_cast<uint32>(XLogSegmentOffset(page, reader.segment_bytes)));
        return false;
    }
    if (long_header) {
        const auto long_page = load<XLogLongPageHeaderData>(p);
        if (long_page.xlp_sysid != reader.system_id || long_page.xlp_seg_size != reader.segment_bytes ||
            long_page.xlp_xlog_blcksz != XLOG_BLCKSZ) {
            *status = not_handled("the long page header at %X/%X is not this cluster's", PTRACK_LSN_ARGS(page));
            return false;
        }
    }
    if (header.xlp_pageaddr != page) {
        *status = not_handled("unexpected page address %X/%X in the page at %X/%X",
                              PTRACK_LSN_ARGS(header.xlp_pageaddr), PTRACK_LSN_ARGS(page));
        return false;
    }
    if (header.xlp_tli > reader.tli || (page > reader.checked_page && header.xlp_tli < reader.page_tli)) {
        *status = not_handled("page at %X/%X of timeline %u after timeline %u, reading timeline %u",
                              PTRACK_LSN_ARGS(page), header.xlp_tli, reader.page_tli, reader.tli);
        return false;
    }
    reader.checked_page = page;
    reader.page_tli = header.xlp_tli;
    return true;
}

/*
 * Checks that the page at `page` (header at `p`) continues a record with
 * `left` bytes still to come.
 */
bool continues_record(const unsigned char* p, Lsn page, uint32 left, InplaceRead* status)
{
    if (!page_header_ok(p, page, status))
        return false;
    const auto header = load<XLogPageHeaderData>(p);
    if ((header.xlp_info & XLP_FIRST_IS_CONTRECORD) == 0 || header.xlp_rem_len != left) {
        *status = not_handled("the page at %X/%X does not continue the record (info %04X, %u bytes left, "
                              "%u expected)",
                              PTRACK_LSN_ARGS(page), header.xlp_info, header.xlp_rem_len, left);
        return false;
    }
    return true;
}

/*
 * A record of `total` bytes that begins at `offset` in the page at `page`,
 * and does not end below the limit: whether every later page it
 * runs on that lies below the limit continues it.  One that does not is
 * where a crash cut the record short and the WAL written after recovery
 * overwrote its continuation (XLP_FIRST_IS_OVERWRITE_CONTRECORD,
 * xlogrecovery.c): no more WAL will ever complete that record, so waiting
 * for it would stall the follower; it is not handled, and xlogreader skips
 * the aborted record.
 */
bool flushed_pages_continue(Lsn page, uint32 offset, uint32 total, InplaceRead* status)
{
    uint32 left = total - Min(total, kPage - offset);
    for (Lsn next = page + kPage; left > 0; next += kPage) {
        const uint32 header_bytes = page_header_bytes(next);
        if (next + header_bytes > reader.limit)
            return true;
        const unsigned char* p = page_bytes(next, header_bytes, status);
        if (p == nullptr || !continues_record(p, next, left, status))
            return false;
        left -= Min(left, kPage - header_bytes);
    }
    return true;
}

/* Where a record of `length` bytes that begins at `start` ends (before MAXALIGN), over the page headers. */
Lsn raw_end(Lsn start, uint32 length)
{
    const uint32 first = kPage - static_cast<uint32>(start % kPage);
    if (length <= first)
        return start + length;
    uint64 left = length - first;
    Lsn page = start + first;
    for (;;) {
        const uint32 room = kPage - page_header_bytes(page);
        if (left <= room)
            return page + page_header_bytes(page) + left;
        left -= room;
        page += kPage;
    }
}

/*
 * The block headers at `a` (the first `len` bytes of a body of `body_len`
 * bytes) into `view`, with the main data's length; checks them as
 * DecodeXLogRecord() does.  kRecord, or kNotHandled.
 */
InplaceRead parse_block_headers(const unsigned char* a, uint32 len, uint32 body_len, WalRecordView* view)
{
    uint32 at = 0;
    uint64 data_total = 0;
    int last_id = -1;
    const unsigned char* rel = nullptr;
    view->block_count = 0;
    view->main_data_len = 0;
#define NEED(n)                                                                                                        \
    do {                                                                                                               \
        if (at + (n) > len)                                                                                            \
            return not_handled("its block headers run past %u bytes of its %u", len, body_len);                        \
    } while (0)
    while (body_len - at > data_total) {
        NEED(1);
        const uint8 id = a[at];
        if (id == XLR_BLOCK_ID_DATA_SHORT) {
            NEED(2);
            view->main_data_len = a[at + 1];
            data_total += view->main_data_len;
            at += 2;
            break; /* the main data comes last */
        }
        if (id == XLR_BLOCK_ID_DATA_LONG) {
            NEED(5);
            view->main_data_len = load<uint32>(a + at + 1);
            data_total += view->main_data_len;
            at += 5;
            break;
        }
        if (id == XLR_BLOCK_ID_ORIGIN) {
            NEED(1 + sizeof(RepOriginId));
            at += 1 + sizeof(RepOriginId);
            continue;
        }
        if (id == XLR_BLOCK_ID_TOPLEVEL_XID) {
            NEED(1 + sizeof(TransactionId));
            at += 1 + sizeof(TransactionId);
            continue;
        }
        if (id > XLR_MAX_BLOCK_ID)
            return not_handled("invalid block id %u", id);
        if (id <= last_id)
            return not_handled("out-of-order block id %u", id);
        last_id = id;
        NEED(SizeOfXLogRecordBlockHeader);
        const uint8 fork_flags = a[at + 1];
        const uint16 data_length = load<uint16>(a + at + 2);
        at += SizeOfXLogRecordBlockHeader;
        if (((fork_flags & BKPBLOCK_HAS_DATA) != 0) != (data_length != 0))
            return not_handled("block id %u: BKPBLOCK_HAS_DATA does not match data length %u", id, data_length);
        data_total += data_length;
        if (fork_flags & BKPBLOCK_HAS_IMAGE) {
            NEED(SizeOfXLogRecordBlockImageHeader);
            const uint16 image_length = load<uint16>(a + at);
            const uint16 hole_offset = load<uint16>(a + at + 2);
            const uint8 image_info = a[at + 4];
            at += SizeOfXLogRecordBlockImageHeader;
            uint16 hole_length;
            if (BKPIMAGE_COMPRESSED(image_info)) {
                hole_length = 0;
                if (image_info & BKPIMAGE_HAS_HOLE) {
                    NEED(SizeOfXLogRecordBlockCompressHeader);
                    hole_length = load<uint16>(a + at);
                    at += SizeOfXLogRecordBlockCompressHeader;
                }
            } else {
                hole_length = static_cast<uint16>(BLCKSZ - image_length);
            }
            data_total += image_length;
            const bool has_hole = (image_info & BKPIMAGE_HAS_HOLE) != 0;
            if ((has_hole && (hole_offset == 0 || hole_length == 0 || image_length == BLCKSZ)) ||
                (!has_hole && (hole_offset != 0 || hole_length != 0)) ||
                (BKPIMAGE_COMPRESSED(image_info) && image_length == BLCKSZ) ||
                (!has_hole && !BKPIMAGE_COMPRESSED(image_info) && image_length != BLCKSZ))
                return not_handled("block id %u: inconsistent image header (length %u, hole %u+%u, info %02X)", id,
                                   image_length, hole_offset, hole_length, image_info);
        }
        if (!(fork_flags & BKPBLOCK_SAME_REL)) {
            NEED(3 * sizeof(Oid));
            rel = a + at;
            at += 3 * sizeof(Oid);
        } else if (rel == nullptr) {
            return not_handled("block id %u: BKPBLOCK_SAME_REL without a relation before", id);
        }
        NEED(sizeof(::BlockNumber));
        WalBlockRef& ref = view->blocks[view->block_count++];
        ref.id = id;
        ref.rel.spc_oid = load<uint32>(rel);
        ref.rel.db_oid = load<uint32>(rel + sizeof(Oid));
        ref.rel.relfilenode = load<uint32>(rel + 2 * sizeof(Oid));
        ref.rel.fork = static_cast<uint8_t>(fork_flags & BKPBLOCK_FORK_MASK);
        ref.block = load<uint32>(a + at);
        at += sizeof(::BlockNumber);
    }
#undef NEED
    if (at + data_total != body_len)
        return not_handled("its block headers (%u bytes) and data (%llu bytes) do not add up to its body "
                           "(%u bytes)",
                           at, static_cast<unsigned long long>(data_total), body_len);
    return InplaceRead::kRecord;
}

/* The record being read: its body's checksum, parse and main data, as its pieces go by. */
struct Body {
    uint32 length; /* bytes after the record header */
    pg_crc32c crc;
    bool parsed;           /* the block headers are parsed (main_data_len known) */
    uint32 area_length;    /* bytes of the body copied into `area` while not parsed */
    uint32 main_from;      /* body offset of the main data */
    const char* main_data; /* where the main data is, once all of it went by */
};

/*
 * Main data within the body bytes [from, from + n) at `p`: pointed to if it
 * lies there whole and MAXALIGNed, else copied in its place.
 */
void take_main_data(Body& body, const unsigned char* p, uint32 from, uint32 n)
{
    const uint32 lo = Max(from, body.main_from);
    const uint32 hi = Min(from + n, body.length);
    if (lo >= hi)
        return;
    const unsigned char* at = p + (lo - from);
    if (lo == body.main_from && hi == body.length && reinterpret_cast<uintptr_t>(at) % MAXIMUM_ALIGNOF == 0) {
        body.main_data = reinterpret_cast<const char*>(at);
        return;
    }
    memcpy(reader.main_data + (lo - body.main_from), at, hi - lo);
    body.main_data = reader.main_data;
}

/* Room for `length` bytes of main data in reader.main_data; false if memory is short. */
bool reserve_main_data(uint32 length)
{
    if (length <= reader.main_data_cap && reader.main_data != nullptr)
        return true;
    uint32 cap = Max(reader.main_data_cap, kInitialMainDataBytes);
    while (cap < length)
        cap = cap > UINT32_MAX / 2 ? length : cap * 2;
    char* grown = static_cast<char*>(malloc(cap));
    if (grown == nullptr)
        return false;
    free(reader.main_data);
    reader.main_data = grown;
    reader.main_data_cap = cap;
    return true;
}

/* The body bytes [from, from + n) at `p`, in order. */
InplaceRead body_piece(Body& body, WalRecordView* view, const unsigned char* p, uint32 from, uint32 n)
{
    COMP_CRC32C(body.crc, p, n);
    if (body.parsed) {
        take_main_data(body, p, from, n);
        return InplaceRead::kRecord;
    }
    const uint32 want = Min(body.length, kAreaBytes);
    const unsigned char* headers;
    if (body.area_length == 0 && n >= want) {
        headers = p; /* the common case: parsed where it lies */
    } else {
        const uint32 take = Min(want - body.area_length, n);
        memcpy(area.bytes + body.area_length, p, take);
        body.area_length += take;
        if (body.area_length < want)
            return InplaceRead::kRecord;
        headers = area.bytes;
    }
    const InplaceRead parsed = parse_block_headers(headers, want, body.length, view);
    if (parsed != InplaceRead::kRecord)
        return parsed;
    body.parsed = true;
    body.main_from = body.length - view->main_data_len;
    if (view->main_data_len > 0 && !reserve_main_data(view->main_data_len))
        return not_handled("out of memory for its main data (%u bytes)", view->main_data_len);
    if (headers == area.bytes && from > 0)
        take_main_data(body, area.bytes, 0, from); /* the pieces before this one went to `area` whole */
    take_main_data(body, p, from, n);
    return InplaceRead::kRecord;
}

}  // namespace

void inplace_begin(Lsn next, Lsn prev_start, TimeLineID tli, uint64 system_id, uint32 segment_bytes)
{
    if (tli != reader.tli || system_id != reader.system_id || segment_bytes != reader.segment_bytes) {
        drop_segment();
        reader.checked_page = InvalidXLogRecPtr;
        reader.page_tli = 0;
    }
    if (next < reader.checked_page) {
        reader.checked_page = InvalidXLogRecPtr; /* reading again from further back: the timeline order starts over */
        reader.page_tli = 0;
    }
    reader.pos = next;
    reader.prev_start = prev_start;
    reader.tli = tli;
    reader.system_id = system_id;
    reader.segment_bytes = segment_bytes;
}

InplaceRead inplace_read(Lsn limit, WalRecordView* view)
{
    reader.read_failed = false;
    reader.limit = limit;
    InplaceRead status = InplaceRead::kRecord;
    Lsn start = reader.pos;
    if (start % MAXIMUM_ALIGNOF != 0 || reader.segment_bytes == 0)
        return not_handled("it does not begin MAXALIGNed");
    Lsn page = start - start % kPage;
    uint32 offset = static_cast<uint32>(start % kPage);
    const uint32 header_bytes = page_header_bytes(page);
    if (offset == 0) {
        start += header_bytes;
        offset = header_bytes;
    } else if (offset < header_bytes) {
        return not_handled("it begins inside a page header");
    }

    /* The record header: on this page, or its end after the next page's header. */
    const uint32 first_part = Min(kPage - offset, static_cast<uint32>(SizeOfXLogRecord));
    const unsigned char* p = page_bytes(page, offset + first_part, &status);
    if (p == nullptr || !page_header_ok(p, page, &status))
        return status;
    if (offset == header_bytes && (load<XLogPageHeaderData>(p).xlp_info & XLP_FIRST_IS_CONTRECORD))
        return not_handled("its page begins with the continuation of another record");
    XLogRecord header;
    memcpy(&header, p + offset, first_part);
    if (header.xl_tot_len < SizeOfXLogRecord || header.xl_tot_len > kMaxRecordBytes)
        return not_handled("invalid record length %u", header.xl_tot_len);
    if (first_part < SizeOfXLogRecord) {
        const Lsn next_page = page + kPage;
        const uint32 next_header = page_header_bytes(next_page);
        const uint32 rest = SizeOfXLogRecord - first_part;
        const unsigned char* q = page_bytes(next_page, next_header + rest, &status);
        if (q == nullptr || !continues_record(q, next_page, header.xl_tot_len - first_part, &status))
            return status;
        memcpy(reinterpret_cast<char*>(&header) + first_part, q + next_header, rest);
    }
    if (!RmgrIdIsValid(header.xl_rmid))
        return not_handled("invalid resource manager id %u", header.xl_rmid);
    if (reader.prev_start != InvalidXLogRecPtr ? header.xl_prev != reader.prev_start : header.xl_prev >= start)
        return not_handled("its xl_prev %X/%X does not point to the record before it, at %X/%X",
                           PTRACK_LSN_ARGS(header.xl_prev), PTRACK_LSN_ARGS(reader.prev_start));
    const uint32 total = header.xl_tot_len;
    const Lsn end = raw_end(start, total);
    if (end > limit) {
        /* Not all flushed yet: read again once it is, unless a page it runs on, flushed already, does not continue it. */
        if (!flushed_pages_continue(page, offset, total, &status))
            return status;
        return InplaceRead::kEnd;
    }

    /* The record, page by page. */
    Body body{};
    body.length = total - SizeOfXLogRecord;
    INIT_CRC32C(body.crc);
    if (body.length == 0) {
        view->block_count = 0;
        view->main_data_len = 0;
        body.parsed = true;
        body.main_from = 0;
    }
    uint32 done = 0; /* bytes of the record walked */
    uint32 in_page = offset;
    while (done < total) {
        if (in_page == kPage) {
            page += kPage;
            in_page = page_header_bytes(page);
            p = page_bytes(page, in_page + Min(total - done, kPage - in_page), &status);
            if (p == nullptr || !continues_record(p, page, total - done, &status))
                return status;
        } else {
            p = page_bytes(page, in_page + Min(total - done, kPage - in_page), &status);
            if (p == nullptr)
                return status;
        }
        const uint32 n = Min(total - done, kPage - in_page);
        const uint32 in_header = done < SizeOfXLogRecord ? Min(n, static_cast<uint32>(SizeOfXLogRecord) - done) : 0;
        if (n > in_header) {
            const uint32 from = done + in_header - static_cast<uint32>(SizeOfXLogRecord);
            status = body_piece(body, view, p + in_page + in_header, from, n - in_header);
            if (status != InplaceRead::kRecord)
                return status;
        }
        done += n;
        in_page += n;
    }
    COMP_CRC32C(body.crc, &header, offsetof(XLogRecord, xl_crc));
    FIN_CRC32C(body.crc);
    if (!EQ_CRC32C(body.crc, header.xl_crc))
        return not_handled("incorrect resource manager data checksum");
    if (page + in_page != end)
        return not_handled("it ends at %X/%X, not at %X/%X", PTRACK_LSN_ARGS(page + in_page), PTRACK_LSN_ARGS(end));

    view->start = start;
    view->end = MAXALIGN(end);
    if (header.xl_rmid == RM_XLOG_ID && (header.xl_info & ~XLR_INFO_MASK) == XLOG_SWITCH) {
        const Lsn segment_end = view->end + reader.segment_bytes - 1;
        view->end = segment_end - XLogSegmentOffset(segment_end, reader.segment_bytes);
    }
    view->prev = header.xl_prev;
    view->rmid = header.xl_rmid;
    view->info = header.xl_info;
    view->main_data = view->main_data_len > 0 ? body.main_data : nullptr;
    reader.prev_start = start;
    reader.pos = view->end;
    return InplaceRead::kRecord;
}

const char* inplace_why()
{
    return reader.why;
}

bool inplace_read_failed()
{
    return reader.read_failed;
}

void inplace_close()
{
    drop_segment();
    free(reader.buf);
    free(reader.main_data);
    reader = Reader{.fd = -1};
}

}  // namespace ptrack::pg
