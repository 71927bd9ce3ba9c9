/*
 * summary_file.cpp -- writing, validating and reading change summaries; the
 * format and its rules are in ptrack/summary_file.h.  One decoder serves
 * both the validation (which counts) and the cursor (which sets bits), so
 * that what is validated is exactly what is read.
 */
#include "ptrack/summary_file.h"

#include <cstring>

#include "field_codec.h"

namespace ptrack {

using codec::get;
using codec::put;

namespace {

constexpr char kMagic[8] = {'P', 'T', 'R', 'K', 'S', 'U', 'M', 'M'};

enum : size_t {
    kOffMagic = 0,
    kOffVersion = 8,
    kOffHeaderBytes = 12,
    kOffPgMajor = 16,
    kOffTimeline = 20,
    kOffSystemIdentifier = 24,
    kOffStartLsn = 32,
    kOffEndLsn = 40,
    kOffForkCount = 48,
    kOffBlockCount = 56,
    kOffDatabaseCount = 64,
    kOffFlags = 68,
    kOffBodyBytes = 72,
    kOffBodyCrc = 80,
    kOffReserved = 84, /* 8 bytes of zeros */
    kOffHeaderCrc = kSummaryHeaderBytes - 4
};

constexpr size_t kForkHeadBytes = 17;    /* spc, db, relfilenode, fork, limit */
constexpr size_t kDatabaseBytes = 8;     /* spc, db */
constexpr size_t kBitmapBytes = kChunkBlocks / 8;
constexpr size_t kMaxChunkBytes = 1 + 5 + kBitmapBytes; /* kind, chunk number, the largest payload */

inline size_t varint_bytes(uint32_t v) noexcept
{
    return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

inline size_t put_varint(uint8_t* out, uint32_t v) noexcept
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = static_cast<uint8_t>(v | 0x80);
        v >>= 7;
    }
    out[n++] = static_cast<uint8_t>(v);
    return n;
}

/* Reads a varint at *pos (< end); false if it runs past end, is longer than 5 bytes or above 32 bits. */
inline bool get_varint(const uint8_t* in, size_t* pos, size_t end, uint32_t* value) noexcept
{
    uint64_t v = 0;
    for (uint32_t shift = 0; shift < 35; shift += 7) {
        if (*pos >= end)
            return false;
        const uint8_t byte = in[(*pos)++];
        v |= uint64_t{byte & 0x7Fu} << shift;
        if ((byte & 0x80) == 0) {
            if (v > UINT32_MAX)
                return false;
            *value = static_cast<uint32_t>(v);
            return true;
        }
    }
    return false;
}

inline void set_bit(ChunkBits* bits, uint32_t offset) noexcept
{
    bits->words[offset >> 6] |= uint64_t{1} << (offset & 63);
}

/*
 * Decodes one chunk payload of `kind` at *pos, checking every rule of the
 * format; ORs its blocks into `bits` unless nullptr; adds their number to
 * *count.  False if the payload is malformed.
 */
bool decode_payload(const uint8_t* in, size_t* pos, size_t end, uint8_t kind, ChunkBits* bits,
                    uint64_t* count) noexcept
{
    uint32_t n = 0;
    switch (kind) {
    case kChunkArray: {
        if (!get_varint(in, pos, end, &n) || n == 0 || n > kChunkBlocks)
            return false;
        uint64_t offset = 0;
        for (uint32_t i = 0; i < n; ++i) {
            uint32_t v = 0;
            if (!get_varint(in, pos, end, &v))
                return false;
            offset = i == 0 ? v : offset + 1 + v;
            if (offset >= kChunkBlocks)
                return false;
            if (bits != nullptr)
                set_bit(bits, static_cast<uint32_t>(offset));
        }
        *count += n;
        return true;
    }
    case kChunkRuns: {
        if (!get_varint(in, pos, end, &n) || n == 0 || n > kChunkBlocks / 2)
            return false;
        uint64_t run_end = 0;
        for (uint32_t i = 0; i < n; ++i) {
            uint32_t gap = 0, length = 0;
            if (!get_varint(in, pos, end, &gap) || !get_varint(in, pos, end, &length))
                return false;
            const uint64_t start = i == 0 ? gap : run_end + 1 + gap;
            run_end = start + uint64_t{length} + 1;
            if (run_end > kChunkBlocks)
                return false;
            if (bits != nullptr) {
                for (uint64_t b = start; b < run_end;) {
                    /* Whole words where the run covers them. */
                    if ((b & 63) == 0 && run_end - b >= 64) {
                        bits->words[b >> 6] = ~uint64_t{0};
                        b += 64;
                    } else {
                        set_bit(bits, static_cast<uint32_t>(b));
                        ++b;
                    }
                }
            }
            *count += uint64_t{length} + 1;
        }
        return true;
    }
    case kChunkBitmap: {
        if (end - *pos < kBitmapBytes)
            return false;
        const uint8_t* p = in + *pos;
        uint64_t ones = 0;
        for (uint32_t w = 0; w < kChunkWords; ++w) {
            uint64_t word = 0;
            for (int b = 7; b >= 0; --b)
                word = (word << 8) | p[w * 8 + b]; /* byte i holds offsets 8i..8i+7, whatever the host order */
            ones += static_cast<uint64_t>(__builtin_popcountll(word));
            if (bits != nullptr)
                bits->words[w] |= word;
        }
        if (ones == 0)
            return false;
        *pos += kBitmapBytes;
        *count += ones;
        return true;
    }
    default:
        return false;
    }
}

/* Staged output: bytes go to the sink in buffer-sized writes, the CRC follows them. */
struct Out {
    const SummaryWriteBuffers& b;
    FlushSink& sink;
    Crc32cUpdateFn crc_update;
    size_t used = 0;
    uint64_t file_offset = kSummaryHeaderBytes;
    uint32_t crc = 0xFFFFFFFFu;
    bool failed = false;

    bool flush() noexcept
    {
        if (used == 0 || failed)
            return !failed;
        crc = crc_update(crc, b.buffer, used);
        if (!sink.write(b.buffer, used, file_offset)) {
            failed = true;
            return false;
        }
        file_offset += used;
        used = 0;
        return true;
    }
    /* Room for `n` more bytes (n <= buffer size), flushing first if needed. */
    uint8_t* room(size_t n) noexcept
    {
        if (b.buffer_bytes - used < n && !flush())
            return nullptr;
        return b.buffer + used;
    }
};

/* Writes the chunk in `bits` (not empty) in its smallest encoding; false on a failed write. */
bool write_chunk(Out& out, const ChunkBits& bits, uint32_t chunk_field, uint64_t* blocks) noexcept
{
    /* Sizes of the three encodings. */
    uint64_t n = 0, runs = 0;
    size_t array_bytes = 0, runs_bytes = 0;
    int64_t previous = -1, run_start = -1, previous_run_end = -1;
    auto close_run = [&](int64_t run_end) {
        const uint32_t gap = previous_run_end < 0 ? static_cast<uint32_t>(run_start)
                                                   : static_cast<uint32_t>(run_start - previous_run_end - 1);
        runs_bytes += varint_bytes(gap) + varint_bytes(static_cast<uint32_t>(run_end - run_start - 1));
        previous_run_end = run_end;
        ++runs;
    };
    for (uint32_t w = 0; w < kChunkWords; ++w) {
        uint64_t word = bits.words[w];
        while (word != 0) {
            const int64_t offset = int64_t{w} * 64 + __builtin_ctzll(word);
            word &= word - 1;
            array_bytes += varint_bytes(previous < 0 ? static_cast<uint32_t>(offset)
                                                     : static_cast<uint32_t>(offset - previous - 1));
            if (previous < 0 || offset != previous + 1) {
                if (run_start >= 0)
                    close_run(previous + 1);
                run_start = offset;
            }
            previous = offset;
            ++n;
        }
    }
    close_run(previous + 1);
    array_bytes += varint_bytes(static_cast<uint32_t>(n));
    runs_bytes += varint_bytes(static_cast<uint32_t>(runs));
    uint8_t kind = kChunkArray;
    size_t bytes = array_bytes;
    if (runs_bytes < bytes) {
        kind = kChunkRuns;
        bytes = runs_bytes;
    }
    if (kBitmapBytes < bytes) {
        kind = kChunkBitmap;
        bytes = kBitmapBytes;
    }

    uint8_t* p = out.room(1 + 5 + bytes);
    if (p == nullptr)
        return false;
    size_t at = 0;
    p[at++] = kind;
    at += put_varint(p + at, chunk_field);
    if (kind == kChunkBitmap) {
        for (uint32_t w = 0; w < kChunkWords; ++w)
            for (uint32_t b = 0; b < 8; ++b)
                p[at + w * 8 + b] = static_cast<uint8_t>(bits.words[w] >> (8 * b));
        at += kBitmapBytes;
    } else {
        at += put_varint(p + at, static_cast<uint32_t>(kind == kChunkArray ? n : runs));
        previous = -1;
        run_start = -1;
        previous_run_end = -1;
        for (uint32_t w = 0; w < kChunkWords; ++w) {
            uint64_t word = bits.words[w];
            while (word != 0) {
                const int64_t offset = int64_t{w} * 64 + __builtin_ctzll(word);
                word &= word - 1;
                if (kind == kChunkArray) {
                    at += put_varint(p + at, previous < 0 ? static_cast<uint32_t>(offset)
                                                          : static_cast<uint32_t>(offset - previous - 1));
                } else if (previous < 0 || offset != previous + 1) {
                    if (run_start >= 0) {
                        at += put_varint(p + at, static_cast<uint32_t>(previous_run_end < 0
                                                                            ? run_start
                                                                            : run_start - previous_run_end - 1));
                        at += put_varint(p + at, static_cast<uint32_t>(previous - run_start));
                        previous_run_end = previous + 1;
                    }
                    run_start = offset;
                }
                previous = offset;
            }
        }
        if (kind == kChunkRuns) {
            at += put_varint(p + at, static_cast<uint32_t>(previous_run_end < 0 ? run_start
                                                                                 : run_start - previous_run_end - 1));
            at += put_varint(p + at, static_cast<uint32_t>(previous - run_start));
        }
    }
    out.used += at;
    *blocks += n;
    return true;
}

void encode_header(const SummaryHeader& h, uint32_t body_crc, Crc32cFn crc32c, uint8_t* out) noexcept
{
    std::memset(out, 0, kSummaryHeaderBytes);
    std::memcpy(out + kOffMagic, kMagic, sizeof(kMagic));
    put<uint32_t>(out, kOffVersion, kSummaryFileVersion);
    put<uint32_t>(out, kOffHeaderBytes, static_cast<uint32_t>(kSummaryHeaderBytes));
    put<uint32_t>(out, kOffPgMajor, h.pg_major);
    put<uint32_t>(out, kOffTimeline, h.timeline);
    put<uint64_t>(out, kOffSystemIdentifier, h.system_identifier);
    put<uint64_t>(out, kOffStartLsn, h.start_lsn);
    put<uint64_t>(out, kOffEndLsn, h.end_lsn);
    put<uint64_t>(out, kOffForkCount, h.fork_count);
    put<uint64_t>(out, kOffBlockCount, h.block_count);
    put<uint32_t>(out, kOffDatabaseCount, h.database_count);
    put<uint32_t>(out, kOffFlags, h.flags);
    put<uint64_t>(out, kOffBodyBytes, h.body_bytes);
    put<uint32_t>(out, kOffBodyCrc, body_crc);
    put<uint32_t>(out, kOffHeaderCrc, crc32c(out, kOffHeaderCrc));
}

}  // namespace

const char* describe_summary_status(SummaryStatus status) noexcept
{
    switch (status) {
    case SummaryStatus::kOk: return "it is valid";
    case SummaryStatus::kTooShort: return "it is too short to hold a header";
    case SummaryStatus::kBadMagic: return "it is not a ptrack summary file (bad magic number)";
    case SummaryStatus::kBadVersion: return "it was written in an unsupported format version";
    case SummaryStatus::kBadHeaderCrc: return "its header checksum does not match";
    case SummaryStatus::kBadRange: return "its LSN range is empty or reversed";
    case SummaryStatus::kOtherSystem: return "it belongs to another database cluster (system identifier differs)";
    case SummaryStatus::kOtherServer: return "it was written by another PostgreSQL major version";
    case SummaryStatus::kBadLength: return "its length does not match its header (truncated or extended)";
    case SummaryStatus::kBadBodyCrc: return "its content checksum does not match";
    case SummaryStatus::kBadOrder: return "its entries are out of order or repeated";
    case SummaryStatus::kBadContent: return "its content cannot be decoded";
    case SummaryStatus::kBadCounts: return "its entries do not add up to the counts in its header";
    case SummaryStatus::kWriteFailed: return "it could not be written";
    case SummaryStatus::kBadBuffer: return "the writer's buffer is too small";
    }
    return "it is unreadable";
}

SummaryStatus summary_write(const SummaryHeader& header, ChangeCursor& source, Crc32cFn crc32c,
                            Crc32cUpdateFn crc32c_update, const SummaryWriteBuffers& buffers, FlushSink& sink,
                            SummaryHeader* written) noexcept
{
    if (header.start_lsn >= header.end_lsn)
        return SummaryStatus::kBadRange;
    if ((header.flags & ~kSummaryKnownFlags) != 0)
        return SummaryStatus::kBadVersion;
    if (buffers.buffer_bytes < kSummaryMinBuffer || buffers.buffer == nullptr || buffers.scratch == nullptr)
        return SummaryStatus::kBadBuffer;
    static_assert(kSummaryMinBuffer >= kMaxChunkBytes + kForkHeadBytes + 1, "a chunk fits the buffer");
    SummaryHeader h = header;
    h.fork_count = 0;
    h.block_count = 0;
    h.database_count = 0;
    Out out{buffers, sink, crc32c_update};

    RelFork rel{};
    BlockNumber limit = kNoLimit;
    while (source.next_fork(&rel, &limit)) {
        bool head_written = false; /* the fork's head goes out with its first chunk */
        uint32_t chunk = 0, next_chunk = 0;
        auto write_head = [&]() {
            uint8_t* p = out.room(kForkHeadBytes + kMaxChunkBytes);
            if (p == nullptr)
                return false;
            put<uint32_t>(p, 0, rel.spc_oid);
            put<uint32_t>(p, 4, rel.db_oid);
            put<uint32_t>(p, 8, rel.relfilenode);
            p[12] = rel.fork;
            put<uint32_t>(p, 13, limit);
            out.used += kForkHeadBytes;
            head_written = true;
            ++h.fork_count;
            return true;
        };
        while (source.next_chunk(&chunk)) {
            std::memset(buffers.scratch, 0, sizeof(ChunkBits));
            source.or_chunk(buffers.scratch);
            /* Blocks at or past the limit are said by the limit: not stored twice. */
            const uint64_t base = uint64_t{chunk} << kChunkShift;
            if (limit <= base)
                continue;
            if (limit - base < kChunkBlocks) {
                const uint32_t keep = static_cast<uint32_t>(limit - base);
                if (keep % 64 != 0)
                    buffers.scratch->words[keep / 64] &= (uint64_t{1} << (keep % 64)) - 1;
                for (uint32_t w = (keep + 63) / 64; w < kChunkWords; ++w)
                    buffers.scratch->words[w] = 0;
            }
            bool any = false;
            for (uint32_t w = 0; w < kChunkWords && !any; ++w)
                any = buffers.scratch->words[w] != 0;
            if (!any)
                continue;
            if (!head_written && !write_head())
                return SummaryStatus::kWriteFailed;
            /* The first chunk as is, the next ones as their gap minus one. */
            if (!write_chunk(out, *buffers.scratch, chunk - next_chunk, &h.block_count))
                return SummaryStatus::kWriteFailed;
            next_chunk = chunk + 1;
        }
        if (!head_written) {
            if (limit == kNoLimit)
                continue; /* nothing to say about this fork */
            if (!write_head())
                return SummaryStatus::kWriteFailed;
        }
        uint8_t* p = out.room(1);
        if (p == nullptr)
            return SummaryStatus::kWriteFailed;
        p[0] = kChunkEnd;
        ++out.used;
    }
    DatabaseKey db{};
    while (source.next_database(&db)) {
        uint8_t* p = out.room(kDatabaseBytes);
        if (p == nullptr)
            return SummaryStatus::kWriteFailed;
        put<uint32_t>(p, 0, db.spc_oid);
        put<uint32_t>(p, 4, db.db_oid);
        out.used += kDatabaseBytes;
        ++h.database_count;
    }
    if (!out.flush())
        return SummaryStatus::kWriteFailed;
    h.body_bytes = out.file_offset - kSummaryHeaderBytes;
    uint8_t raw[kSummaryHeaderBytes];
    encode_header(h, out.crc ^ 0xFFFFFFFFu, crc32c, raw);
    if (!sink.write(raw, sizeof(raw), 0))
        return SummaryStatus::kWriteFailed;
    if (written != nullptr)
        *written = h;
    return SummaryStatus::kOk;
}

SummaryStatus summary_read_header(const uint8_t* data, size_t length, Crc32cFn crc32c,
                                  SummaryHeader* header) noexcept
{
    if (length < kSummaryHeaderBytes)
        return SummaryStatus::kTooShort;
    if (std::memcmp(data + kOffMagic, kMagic, sizeof(kMagic)) != 0)
        return SummaryStatus::kBadMagic;
    if (get<uint32_t>(data, kOffVersion) != kSummaryFileVersion)
        return SummaryStatus::kBadVersion;
    if (get<uint32_t>(data, kOffHeaderCrc) != crc32c(data, kOffHeaderCrc))
        return SummaryStatus::kBadHeaderCrc;
    /* A version-1 header with another size or a flag this build does not know: not a file it can read. */
    const uint32_t flags = get<uint32_t>(data, kOffFlags);
    if (get<uint32_t>(data, kOffHeaderBytes) != kSummaryHeaderBytes || (flags & ~kSummaryKnownFlags) != 0 ||
        get<uint64_t>(data, kOffReserved) != 0)
        return SummaryStatus::kBadVersion;
    SummaryHeader h{};
    h.pg_major = get<uint32_t>(data, kOffPgMajor);
    h.timeline = get<uint32_t>(data, kOffTimeline);
    h.system_identifier = get<uint64_t>(data, kOffSystemIdentifier);
    h.start_lsn = get<uint64_t>(data, kOffStartLsn);
    h.end_lsn = get<uint64_t>(data, kOffEndLsn);
    h.flags = flags;
    h.fork_count = get<uint64_t>(data, kOffForkCount);
    h.block_count = get<uint64_t>(data, kOffBlockCount);
    h.database_count = get<uint32_t>(data, kOffDatabaseCount);
    h.body_bytes = get<uint64_t>(data, kOffBodyBytes);
    if (h.start_lsn >= h.end_lsn)
        return SummaryStatus::kBadRange;
    *header = h;
    return SummaryStatus::kOk;
}

SummaryStatus summary_open(const uint8_t* data, size_t length, uint64_t system_identifier, uint32_t pg_major,
                           Crc32cFn crc32c, SummaryView* view) noexcept
{
    SummaryHeader h{};
    const SummaryStatus status = summary_read_header(data, length, crc32c, &h);
    if (status != SummaryStatus::kOk)
        return status;
    if (h.system_identifier != system_identifier)
        return SummaryStatus::kOtherSystem;
    if (h.pg_major != pg_major)
        return SummaryStatus::kOtherServer;
    if (length - kSummaryHeaderBytes != h.body_bytes)
        return SummaryStatus::kBadLength;
    if (get<uint32_t>(data, kOffBodyCrc) != crc32c(data + kSummaryHeaderBytes, length - kSummaryHeaderBytes))
        return SummaryStatus::kBadBodyCrc;

    /* Every record, with the decoder the cursor uses. */
    size_t pos = kSummaryHeaderBytes;
    uint64_t blocks = 0;
    RelFork previous{};
    for (uint64_t f = 0; f < h.fork_count; ++f) {
        if (length - pos < kForkHeadBytes)
            return SummaryStatus::kBadCounts;
        const RelFork rel{get<uint32_t>(data, pos), get<uint32_t>(data, pos + 4), get<uint32_t>(data, pos + 8),
                          data[pos + 12]};
        const uint32_t limit = get<uint32_t>(data, pos + 13);
        pos += kForkHeadBytes;
        if (rel.fork > kMaxFork)
            return SummaryStatus::kBadContent;
        if (f > 0 && !relfork_less(previous, rel))
            return SummaryStatus::kBadOrder;
        previous = rel;
        uint64_t next_chunk = 0; /* the smallest chunk number the next chunk may have */
        uint64_t chunks = 0;
        for (;;) {
            if (pos >= length)
                return SummaryStatus::kBadContent;
            const uint8_t kind = data[pos++];
            if (kind == kChunkEnd)
                break;
            uint32_t coded = 0;
            if (kind > kChunkBitmap || !get_varint(data, &pos, length, &coded))
                return SummaryStatus::kBadContent;
            const uint64_t chunk = next_chunk + coded;
            if (chunk > kMaxChunk)
                return SummaryStatus::kBadContent;
            if (!decode_payload(data, &pos, length, kind, nullptr, &blocks))
                return SummaryStatus::kBadContent;
            next_chunk = chunk + 1;
            ++chunks;
        }
        if (chunks == 0 && limit == kNoLimit)
            return SummaryStatus::kBadContent;
    }
    DatabaseKey previous_db{};
    for (uint32_t d = 0; d < h.database_count; ++d) {
        if (length - pos < kDatabaseBytes)
            return SummaryStatus::kBadCounts;
        const DatabaseKey db{get<uint32_t>(data, pos), get<uint32_t>(data, pos + 4)};
        pos += kDatabaseBytes;
        if (d > 0 && !database_less(previous_db, db))
            return SummaryStatus::kBadOrder;
        previous_db = db;
    }
    if (pos != length || blocks != h.block_count)
        return SummaryStatus::kBadCounts;
    view->data = data;
    view->length = length;
    view->header = h;
    return SummaryStatus::kOk;
}

SummaryCursor::SummaryCursor(const SummaryView& view) noexcept
    : data_(view.data),
      end_(view.length),
      pos_(kSummaryHeaderBytes),
      forks_left_(view.header.fork_count),
      db_pos_(view.length - size_t{view.header.database_count} * kDatabaseBytes),
      dbs_left_(view.header.database_count)
{
}

bool SummaryCursor::next_fork(RelFork* rel, BlockNumber* limit) noexcept
{
    uint32_t chunk = 0;
    while (in_fork_ && next_chunk(&chunk)) {
    }
    if (forks_left_ == 0)
        return false;
    --forks_left_;
    *rel = RelFork{get<uint32_t>(data_, pos_), get<uint32_t>(data_, pos_ + 4), get<uint32_t>(data_, pos_ + 8),
                   data_[pos_ + 12]};
    *limit = get<uint32_t>(data_, pos_ + 13);
    pos_ += kForkHeadBytes;
    in_fork_ = true;
    next_base_ = 0;
    payload_read_ = true;
    return true;
}

bool SummaryCursor::next_chunk(uint32_t* chunk) noexcept
{
    if (!in_fork_)
        return false;
    uint64_t ignored = 0;
    if (!payload_read_)
        (void) decode_payload(data_, &pos_, end_, kind_, nullptr, &ignored);
    payload_read_ = true;
    const uint8_t kind = data_[pos_++];
    if (kind == kChunkEnd) {
        in_fork_ = false;
        return false;
    }
    uint32_t coded = 0;
    (void) get_varint(data_, &pos_, end_, &coded);
    chunk_ = next_base_ + coded; /* the first chunk as is, the next ones as their gap minus one */
    next_base_ = chunk_ + 1;
    kind_ = kind;
    payload_ = pos_;
    payload_read_ = false;
    *chunk = chunk_;
    return true;
}

void SummaryCursor::or_chunk(ChunkBits* bits) noexcept
{
    size_t pos = payload_;
    uint64_t ignored = 0;
    (void) decode_payload(data_, &pos, end_, kind_, bits, &ignored);
    pos_ = pos;
    payload_read_ = true;
}

bool SummaryCursor::next_database(DatabaseKey* db) noexcept
{
    if (dbs_left_ == 0)
        return false;
    --dbs_left_;
    *db = DatabaseKey{get<uint32_t>(data_, db_pos_), get<uint32_t>(data_, db_pos_ + 4)};
    db_pos_ += kDatabaseBytes;
    return true;
}

}  // namespace ptrack
