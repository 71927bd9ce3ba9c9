/*
 * summary_answer.cpp -- per-segment page bitmaps, counts and
 * the combining of summaries; see ptrack/summary_answer.h.
 */
#include "ptrack/summary_answer.h"

#include <cstring>

#include "ptrack/pagemap.h"

namespace ptrack {

SegmentPagemaps::SegmentPagemaps(uint32_t blocks_per_segment, ChunkBits* scratch, uint8_t* pagemap) noexcept
    : blocks_per_segment_(blocks_per_segment), scratch_(scratch), pagemap_(pagemap)
{
}

void SegmentPagemaps::start_fork() noexcept
{
    have_chunk_ = false;
}

bool SegmentPagemaps::load(ChangeCursor& cursor) noexcept
{
    uint32_t chunk = 0;
    if (!cursor.next_chunk(&chunk)) {
        have_chunk_ = false;
        return false;
    }
    std::memset(scratch_, 0, sizeof(ChunkBits));
    cursor.or_chunk(scratch_);
    chunk_base_ = uint64_t{chunk} << kChunkShift;
    done_ = 0;
    have_chunk_ = true;
    return true;
}

bool SegmentPagemaps::next(ChangeCursor& cursor, uint32_t* segno, size_t* length, uint32_t* count) noexcept
{
    /* The first changed block not given out yet. */
    uint64_t first = 0;
    for (;;) {
        if (!have_chunk_ && !load(cursor))
            return false;
        uint32_t w = done_ >> 6;
        uint64_t word = w < kChunkWords ? scratch_->words[w] & (~uint64_t{0} << (done_ & 63)) : 0;
        while (word == 0 && ++w < kChunkWords)
            word = scratch_->words[w];
        if (word != 0) {
            first = chunk_base_ + uint64_t{w} * 64 + static_cast<uint64_t>(__builtin_ctzll(word));
            break;
        }
        have_chunk_ = false;
    }

    std::memset(pagemap_, 0, dirty_);
    dirty_ = 0;
    const uint64_t bps = blocks_per_segment_;
    const uint64_t seg_start = first / bps * bps;
    const uint64_t seg_end = seg_start + bps;
    uint32_t n = 0;
    size_t top = 0; /* bytes up to the last non-zero one */
    for (;;) {
        /* The current chunk's blocks in [max(seg_start, base + done_), min(seg_end, base + 65536)). */
        const uint64_t from = chunk_base_ + done_ > seg_start ? chunk_base_ + done_ : seg_start;
        const uint64_t chunk_end = chunk_base_ + kChunkBlocks;
        const uint64_t to = chunk_end < seg_end ? chunk_end : seg_end;
        for (uint64_t b = from; b < to;) {
            const uint64_t offset = b - chunk_base_;
            const uint64_t at = b - seg_start; /* bit in the pagemap */
            if ((offset & 63) == 0 && (at & 7) == 0 && to - b >= 64) {
                /* A whole word onto 8 whole bytes. */
                const uint64_t word = scratch_->words[offset >> 6];
                if (word != 0) {
                    for (uint32_t k = 0; k < 8; ++k)
                        pagemap_[at / 8 + k] |= static_cast<uint8_t>(word >> (8 * k));
                    n += static_cast<uint32_t>(__builtin_popcountll(word));
                    top = at / 8 + 8;
                }
                b += 64;
                continue;
            }
            if ((scratch_->words[offset >> 6] >> (offset & 63)) & 1) {
                pagemap_set(pagemap_, static_cast<uint32_t>(at));
                ++n;
                top = at / 8 + 1;
            }
            ++b;
        }
        if (chunk_end > seg_end) {
            done_ = static_cast<uint32_t>(seg_end - chunk_base_); /* the rest belongs to the next segment */
            break;
        }
        if (!load(cursor))
            break;
        if (chunk_base_ >= seg_end)
            break; /* kept for the next call */
    }
    dirty_ = top;
    *segno = static_cast<uint32_t>(seg_start / bps);
    *length = pagemap_trimmed_length(pagemap_, top);
    *count = n;
    return true;
}

ChangeCounts count_changes(ChangeCursor& cursor, ChunkBits* scratch) noexcept
{
    ChangeCounts counts{};
    RelFork rel{};
    BlockNumber limit = kNoLimit;
    while (cursor.next_fork(&rel, &limit)) {
        ++counts.forks;
        counts.limited_forks += limit != kNoLimit;
        uint32_t chunk = 0;
        while (cursor.next_chunk(&chunk)) {
            std::memset(scratch, 0, sizeof(ChunkBits));
            cursor.or_chunk(scratch);
            ++counts.chunks;
            for (uint32_t w = 0; w < kChunkWords; ++w)
                counts.blocks += static_cast<uint64_t>(__builtin_popcountll(scratch->words[w]));
        }
    }
    DatabaseKey db{};
    while (cursor.next_database(&db))
        ++counts.databases;
    return counts;
}

SummaryStatus summary_combine(const SummaryView* views, size_t count, SummaryCursor* cursors,
                              MergeCursor::State* states, Crc32cFn crc32c, Crc32cUpdateFn crc32c_update,
                              const SummaryWriteBuffers& buffers, FlushSink& sink, SummaryHeader* written) noexcept
{
    if (count == 0)
        return SummaryStatus::kBadRange;
    for (size_t i = 0; i < count; ++i) {
        const SummaryHeader& h = views[i].header;
        if (i > 0 && (h.start_lsn != views[i - 1].header.end_lsn ||
                      h.system_identifier != views[0].header.system_identifier ||
                      h.pg_major != views[0].header.pg_major))
            return SummaryStatus::kBadRange;
        cursors[i] = SummaryCursor(views[i]);
        states[i].source = &cursors[i];
    }
    MergeCursor merged(states, count);
    SummaryHeader header = views[0].header;
    header.end_lsn = views[count - 1].header.end_lsn;
    header.timeline = views[count - 1].header.timeline;
    /* The combined summary ends where the last one does: at a redo LSN if that one did. */
    header.flags = views[count - 1].header.flags;
    return summary_write(header, merged, crc32c, crc32c_update, buffers, sink, written);
}

}  // namespace ptrack
