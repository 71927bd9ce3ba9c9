/*
 * relpath.cpp -- parsing of relation file paths; the grammar and its sources
 * are in ptrack/relpath.h.
 */
#include "ptrack/relpath.h"

namespace ptrack {

namespace {

/*
 * s.substr(pos, n) without its out_of_range exception: ptrack is built with
 * -fno-exceptions and its shared object must not call anything that throws
 * (the Makefile checks).  Every caller passes pos <= s.size().
 */
constexpr std::string_view slice(std::string_view s, size_t pos, size_t n = std::string_view::npos) noexcept
{
    if (pos > s.size())
        pos = s.size();
    return std::string_view(s.data() + pos, n < s.size() - pos ? n : s.size() - pos);
}

/* A decimal number without sign or leading zeros that fits in 32 bits; 0 is rejected. */
bool parse_uint32(std::string_view s, uint32_t* out) noexcept
{
    if (s.empty() || s.size() > 10 || s[0] == '0')
        return false;
    uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9')
            return false;
        v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (v > UINT32_MAX)
        return false;
    *out = static_cast<uint32_t>(v);
    return true;
}

/* Splits off the first '/'-separated component of `s`. */
std::string_view next_component(std::string_view* s) noexcept
{
    const size_t slash = s->find('/');
    std::string_view head = slice(*s, 0, slash);
    *s = slash == std::string_view::npos ? std::string_view{} : slice(*s, slash + 1);
    return head;
}

}  // namespace

const char* fork_suffix(uint8_t fork) noexcept
{
    switch (fork) {
    case kMainFork: return "";
    case kFsmFork: return "_fsm";
    case kVisibilityMapFork: return "_vm";
    case kInitFork: return "_init";
    default: return "?";
    }
}

bool parse_relation_file_name(std::string_view name, RelFileName* out) noexcept
{
    RelFileName r{0, kMainFork, 0, false};

    if (!name.empty() && name[0] == 't') {
        /* t<backend>_<relfilenode>...: the backend id must be a number. */
        const size_t underscore = name.find('_');
        uint32_t backend = 0;
        if (underscore == std::string_view::npos || !parse_uint32(slice(name, 1, underscore - 1), &backend))
            return false;
        r.temp = true;
        name.remove_prefix(underscore + 1);
    }

    const size_t dot = name.find('.');
    if (dot != std::string_view::npos) {
        if (!parse_uint32(slice(name, dot + 1), &r.segno))
            return false;
        name = slice(name, 0, dot);
    }

    const size_t underscore = name.find('_');
    if (underscore != std::string_view::npos) {
        const std::string_view fork = slice(name, underscore);
        if (fork == "_fsm")
            r.fork = kFsmFork;
        else if (fork == "_vm")
            r.fork = kVisibilityMapFork;
        else if (fork == "_init")
            r.fork = kInitFork;
        else
            return false;
        name = slice(name, 0, underscore);
    }

    if (!parse_uint32(name, &r.relfilenode))
        return false;
    *out = r;
    return true;
}

bool parse_relation_dir(std::string_view dir, std::string_view tablespace_version_dir, uint32_t* spc_oid,
                        uint32_t* db_oid) noexcept
{
    if (!dir.empty() && dir.back() == '/')
        dir.remove_suffix(1);

    const std::string_view top = next_component(&dir);
    uint32_t spc = 0;
    uint32_t db = 0;
    if (top == "global") {
        if (!dir.empty())
            return false;
        spc = kGlobalTablespaceOid;
    } else if (top == "base") {
        if (!parse_uint32(next_component(&dir), &db) || !dir.empty())
            return false;
        spc = kDefaultTablespaceOid;
    } else if (top == "pg_tblspc") {
        if (!parse_uint32(next_component(&dir), &spc) || next_component(&dir) != tablespace_version_dir ||
            !parse_uint32(next_component(&dir), &db) || !dir.empty())
            return false;
    } else {
        return false;
    }
    *spc_oid = spc;
    *db_oid = db;
    return true;
}

bool parse_relation_path(std::string_view path, std::string_view tablespace_version_dir,
                         RelSegment* out) noexcept
{
    const size_t slash = path.rfind('/');
    if (slash == std::string_view::npos)
        return false;
    RelFileName name;
    uint32_t spc = 0;
    uint32_t db = 0;
    if (!parse_relation_file_name(slice(path, slash + 1), &name) ||
        !parse_relation_dir(slice(path, 0, slash), tablespace_version_dir, &spc, &db))
        return false;
    out->rel = RelFork{spc, db, name.relfilenode, name.fork};
    out->segno = name.segno;
    out->temp = name.temp;
    return true;
}

}  // namespace ptrack
