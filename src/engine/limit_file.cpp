/*
 * limit_file.cpp -- encoding and decoding of ptrack.limits; the format and
 * the reasons behind it are in ptrack/limit_file.h.  Fields are written at
 * fixed offsets (field_codec.h), never by copying a struct.
 */
#include "ptrack/limit_file.h"

#include <cstring>

#include "field_codec.h"

namespace ptrack {

using codec::get;
using codec::put;

namespace {

constexpr char kMagic[8] = {'P', 'T', 'R', 'K', 'L', 'I', 'M', 'T'};

/* Field offsets in the header. */
enum : size_t {
    kOffMagic = 0,
    kOffVersion = 8,
    kOffBuckets = 12,
    kOffSystemIdentifier = 16,
    kOffCoveredLsn = 24,
    kOffPlacement = 32,
    kOffBodyBytes = 40,
    kOffBodyCrc = 44,
    kOffServerMajor = 48,
    kOffHeaderCrc = kLimitFileHeaderBytes - 4
};

constexpr size_t kRecordHeaderBytes = 8; /* uint32 bucket, uint32 count */
constexpr size_t kStepBytes = 12;        /* uint64 lsn, uint32 limit */

/* One body record, read and checked; false if it runs past `end` or breaks an invariant. */
bool read_record(const uint8_t* in, size_t* offset, size_t end, uint32_t buckets, int64_t previous_bucket,
                 uint32_t* bucket, LimitSteps* steps)
{
    if (end - *offset < kRecordHeaderBytes)
        return false;
    *bucket = get<uint32_t>(in, *offset);
    steps->count = get<uint32_t>(in, *offset + 4);
    *offset += kRecordHeaderBytes;
    if (*bucket >= buckets || int64_t{*bucket} <= previous_bucket || steps->count == 0 ||
        steps->count > kLimitSteps || end - *offset < steps->count * kStepBytes)
        return false;
    for (uint32_t j = 0; j < steps->count; ++j) {
        steps->lsn[j] = get<uint64_t>(in, *offset);
        steps->limit[j] = get<uint32_t>(in, *offset + 8);
        *offset += kStepBytes;
    }
    return limit_steps_valid(*steps);
}

}  // namespace

uint64_t limit_placement_fingerprint(uint32_t buckets) noexcept
{
    const LimitTable probe(nullptr, buckets); /* placement only: no bucket is touched */
    uint64_t fingerprint = mix64(uint64_t{buckets} ^ (uint64_t{kLimitSteps} << 40));
    for (uint32_t i = 0; i < 64; ++i) {
        const RelFork rel{1663 + i % 3, 5 + i, 16384 + 7 * i, static_cast<uint8_t>(i % 4)};
        fingerprint = mix64(fingerprint ^ probe.relation_bucket(rel));
        fingerprint = mix64(fingerprint ^ probe.database_bucket(rel.spc_oid, rel.db_oid));
    }
    return fingerprint;
}

size_t limit_file_encode(const LimitTable& table, uint64_t system_identifier, uint32_t server_major, Lsn covered_lsn,
                         Crc32cFn crc32c, uint8_t* out) noexcept
{
    size_t offset = kLimitFileHeaderBytes;
    for (uint32_t bucket = 0; bucket < table.bucket_count(); ++bucket) {
        LimitSteps steps;
        if (!table.read_bucket(bucket, &steps))
            return 0;
        if (steps.count == 0)
            continue;
        put<uint32_t>(out, offset, bucket);
        put<uint32_t>(out, offset + 4, steps.count);
        offset += kRecordHeaderBytes;
        for (uint32_t j = 0; j < steps.count; ++j) {
            put<uint64_t>(out, offset, steps.lsn[j]);
            put<uint32_t>(out, offset + 8, steps.limit[j]);
            offset += kStepBytes;
        }
    }
    const size_t body_bytes = offset - kLimitFileHeaderBytes;
    std::memset(out, 0, kLimitFileHeaderBytes);
    std::memcpy(out + kOffMagic, kMagic, sizeof(kMagic));
    put<uint32_t>(out, kOffVersion, kLimitFileVersion);
    put<uint32_t>(out, kOffBuckets, table.bucket_count());
    put<uint64_t>(out, kOffSystemIdentifier, system_identifier);
    put<uint64_t>(out, kOffCoveredLsn, covered_lsn);
    put<uint64_t>(out, kOffPlacement, limit_placement_fingerprint(table.bucket_count()));
    put<uint32_t>(out, kOffBodyBytes, static_cast<uint32_t>(body_bytes));
    put<uint32_t>(out, kOffBodyCrc, crc32c(out + kLimitFileHeaderBytes, body_bytes));
    put<uint32_t>(out, kOffServerMajor, server_major);
    put<uint32_t>(out, kOffHeaderCrc, crc32c(out, kOffHeaderCrc));
    return offset;
}

LimitFileStatus limit_file_decode(const uint8_t* in, size_t len, uint64_t system_identifier, uint32_t server_major,
                                  Crc32cFn crc32c, LimitTable* table, Lsn* covered_lsn) noexcept
{
    if (len < kLimitFileHeaderBytes)
        return LimitFileStatus::kTooShort;
    if (std::memcmp(in + kOffMagic, kMagic, sizeof(kMagic)) != 0)
        return LimitFileStatus::kBadMagic;
    if (get<uint32_t>(in, kOffHeaderCrc) != crc32c(in, kOffHeaderCrc))
        return LimitFileStatus::kBadHeaderCrc;
    if (get<uint32_t>(in, kOffVersion) != kLimitFileVersion)
        return LimitFileStatus::kBadVersion;
    const uint32_t buckets = get<uint32_t>(in, kOffBuckets);
    if (buckets != table->bucket_count())
        return LimitFileStatus::kBadBucketCount;
    if (get<uint64_t>(in, kOffPlacement) != limit_placement_fingerprint(buckets))
        return LimitFileStatus::kBadPlacement;
    if (get<uint64_t>(in, kOffSystemIdentifier) != system_identifier)
        return LimitFileStatus::kOtherSystem;
    const uint32_t file_major = get<uint32_t>(in, kOffServerMajor);
    if ((file_major == 0 ? kUnrecordedServerMajor : file_major) != server_major)
        return LimitFileStatus::kOtherMajor;
    const size_t body_bytes = get<uint32_t>(in, kOffBodyBytes);
    if (len - kLimitFileHeaderBytes != body_bytes)
        return LimitFileStatus::kBadLength;
    if (get<uint32_t>(in, kOffBodyCrc) != crc32c(in + kLimitFileHeaderBytes, body_bytes))
        return LimitFileStatus::kBadBodyCrc;

    /* Validate everything before touching the table. */
    int64_t previous = -1;
    for (size_t offset = kLimitFileHeaderBytes; offset < len;) {
        uint32_t bucket = 0;
        LimitSteps steps;
        if (!read_record(in, &offset, len, buckets, previous, &bucket, &steps))
            return LimitFileStatus::kBadContent;
        previous = bucket;
    }

    /* Apply: every bucket is rewritten, the empty ones with no steps. */
    const LimitSteps empty{};
    uint32_t next = 0;
    previous = -1;
    for (size_t offset = kLimitFileHeaderBytes; offset < len;) {
        uint32_t bucket = 0;
        LimitSteps steps;
        read_record(in, &offset, len, buckets, previous, &bucket, &steps);
        previous = bucket;
        for (; next < bucket; ++next)
            table->write_bucket(next, empty);
        table->write_bucket(bucket, steps);
        next = bucket + 1;
    }
    for (; next < buckets; ++next)
        table->write_bucket(next, empty);
    *covered_lsn = get<uint64_t>(in, kOffCoveredLsn);
    return LimitFileStatus::kOk;
}

const char* describe_limit_file_status(LimitFileStatus status) noexcept
{
    switch (status) {
    case LimitFileStatus::kOk: return "it is valid";
    case LimitFileStatus::kTooShort: return "it is too short to hold a header";
    case LimitFileStatus::kBadMagic: return "it is not a ptrack limits file (bad magic number)";
    case LimitFileStatus::kBadHeaderCrc: return "its header checksum does not match";
    case LimitFileStatus::kBadVersion: return "it was written in an unsupported format version";
    case LimitFileStatus::kBadBucketCount: return "it was written for a table of another size";
    case LimitFileStatus::kBadPlacement: return "it was written by a ptrack build that places keys differently";
    case LimitFileStatus::kOtherSystem: return "it belongs to another database cluster (system identifier differs)";
    case LimitFileStatus::kOtherMajor: return "it was written under another PostgreSQL major version";
    case LimitFileStatus::kBadLength: return "its length does not match its header";
    case LimitFileStatus::kBadBodyCrc: return "its content checksum does not match";
    case LimitFileStatus::kBadContent: return "its content is inconsistent";
    }
    return "it is unreadable";
}

}  // namespace ptrack
