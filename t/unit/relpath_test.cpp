/*
 * t/unit/relpath_test.cpp -- proves that relation segment files are told
 * apart from everything else in the data directory, and mapped to the right
 * relation fork and segment, exactly as PostgreSQL 15 names them
 * (src/common/relpath.c; reinit.c's parse_filename_for_nontemp_relation):
 *
 * - global/1262, base/16384/16385, base/16384/16385.1, the _fsm, _vm and
 *   _init forks with and without segments, and tablespace paths
 *   pg_tblspc/<spc>/PG_15_202209061/<db>/<relfilenode> parse to the right
 *   (spc, db, relfilenode, fork, segno);
 * - temporary relation files t<backend>_<relfilenode>[...] are recognised
 *   and flagged temp (so callers can skip them);
 * - everything else is rejected: catalog side files, leading zeros, segment
 *   ".0", empty names and components, unknown fork names, directories, the
 *   wrong tablespace version directory, numbers above 2^32 - 1, OID 0 and
 *   trailing garbage;
 * - parse_relation_dir accepts a trailing '/', and fork_suffix inverts the
 *   fork parsing.
 */
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "ptrack/relpath.h"

using ptrack::fork_suffix;
using ptrack::kDefaultTablespaceOid;
using ptrack::kFsmFork;
using ptrack::kGlobalTablespaceOid;
using ptrack::kInitFork;
using ptrack::kMainFork;
using ptrack::kVisibilityMapFork;
using ptrack::parse_relation_dir;
using ptrack::parse_relation_file_name;
using ptrack::parse_relation_path;
using ptrack::RelFileName;
using ptrack::RelSegment;

namespace {

constexpr std::string_view kVersionDir = "PG_15_202209061";

struct Expected {
    uint32_t spc;
    uint32_t db;
    uint32_t relfilenode;
    uint8_t fork;
    uint32_t segno;
    bool temp;
};

void expect_path(std::string_view path, const Expected& e)
{
    RelSegment seg{};
    ASSERT_TRUE(parse_relation_path(path, kVersionDir, &seg)) << path;
    EXPECT_EQ(seg.rel.spc_oid, e.spc) << path;
    EXPECT_EQ(seg.rel.db_oid, e.db) << path;
    EXPECT_EQ(seg.rel.relfilenode, e.relfilenode) << path;
    EXPECT_EQ(int{seg.rel.fork}, int{e.fork}) << path;
    EXPECT_EQ(seg.segno, e.segno) << path;
    EXPECT_EQ(seg.temp, e.temp) << path;
}

bool path_ok(std::string_view path)
{
    RelSegment seg{};
    return parse_relation_path(path, kVersionDir, &seg);
}

bool name_ok(std::string_view name)
{
    RelFileName r{};
    return parse_relation_file_name(name, &r);
}

}  // namespace

TEST(RelPath, GlobalRelation)
{
    expect_path("global/1262", {kGlobalTablespaceOid, 0, 1262, kMainFork, 0, false});
    expect_path("global/1262_vm", {kGlobalTablespaceOid, 0, 1262, kVisibilityMapFork, 0, false});
    expect_path("global/1262_fsm.3", {kGlobalTablespaceOid, 0, 1262, kFsmFork, 3, false});
}

TEST(RelPath, BaseRelation)
{
    expect_path("base/16384/16385", {kDefaultTablespaceOid, 16384, 16385, kMainFork, 0, false});
    expect_path("base/16384/16385.1", {kDefaultTablespaceOid, 16384, 16385, kMainFork, 1, false});
    expect_path("base/16384/16385.32767", {kDefaultTablespaceOid, 16384, 16385, kMainFork, 32767, false});
    expect_path("base/1/1259", {kDefaultTablespaceOid, 1, 1259, kMainFork, 0, false});
}

TEST(RelPath, Forks)
{
    expect_path("base/16384/16385_fsm", {kDefaultTablespaceOid, 16384, 16385, kFsmFork, 0, false});
    expect_path("base/16384/16385_vm", {kDefaultTablespaceOid, 16384, 16385, kVisibilityMapFork, 0, false});
    expect_path("base/16384/16385_init", {kDefaultTablespaceOid, 16384, 16385, kInitFork, 0, false});
    expect_path("base/16384/16385_fsm.1", {kDefaultTablespaceOid, 16384, 16385, kFsmFork, 1, false});
    expect_path("base/16384/16385_vm.2", {kDefaultTablespaceOid, 16384, 16385, kVisibilityMapFork, 2, false});
    expect_path("base/16384/16385_init.12", {kDefaultTablespaceOid, 16384, 16385, kInitFork, 12, false});
}

TEST(RelPath, Tablespace)
{
    expect_path("pg_tblspc/16390/PG_15_202209061/16384/16391", {16390, 16384, 16391, kMainFork, 0, false});
    expect_path("pg_tblspc/16390/PG_15_202209061/16384/16391.4", {16390, 16384, 16391, kMainFork, 4, false});
    expect_path("pg_tblspc/16390/PG_15_202209061/16384/16391_vm", {16390, 16384, 16391, kVisibilityMapFork, 0, false});
    /* The version directory is the caller's: another server version works with its own. */
    RelSegment seg{};
    EXPECT_TRUE(parse_relation_path("pg_tblspc/16390/PG_16_202307071/16384/16391", "PG_16_202307071", &seg));
    EXPECT_EQ(seg.rel.spc_oid, 16390u);
}

TEST(RelPath, TempRelations)
{
    expect_path("base/16384/t3_16400", {kDefaultTablespaceOid, 16384, 16400, kMainFork, 0, true});
    expect_path("base/16384/t12_16400_fsm.2", {kDefaultTablespaceOid, 16384, 16400, kFsmFork, 2, true});
    expect_path("base/16384/t1_16400_vm", {kDefaultTablespaceOid, 16384, 16400, kVisibilityMapFork, 0, true});
    expect_path("pg_tblspc/16390/PG_15_202209061/16384/t7_16401.1", {16390, 16384, 16401, kMainFork, 1, true});

    RelFileName r{};
    ASSERT_TRUE(parse_relation_file_name("t3_16400", &r));
    EXPECT_TRUE(r.temp);
    EXPECT_EQ(r.relfilenode, 16400u);
    ASSERT_TRUE(parse_relation_file_name("t12_16400_fsm.2", &r));
    EXPECT_TRUE(r.temp);
    EXPECT_EQ(r.relfilenode, 16400u);
    EXPECT_EQ(int{r.fork}, int{kFsmFork});
    EXPECT_EQ(r.segno, 2u);
    /* The non-temp forms are not flagged. */
    ASSERT_TRUE(parse_relation_file_name("16400", &r));
    EXPECT_FALSE(r.temp);

    /* Malformed temp names. */
    for (std::string_view bad : {"t", "t3", "t_16400", "tx_16400", "t03_16400", "t3_", "t3_x", "t3_16400_",
                                 "t3_16400.", "t3__16400", "t-1_16400", "T3_16400", "t3_t4_16400"})
        EXPECT_FALSE(name_ok(bad)) << bad;
}

TEST(RelPath, FileNameFields)
{
    RelFileName r{};
    ASSERT_TRUE(parse_relation_file_name("16385_vm.2", &r));
    EXPECT_EQ(r.relfilenode, 16385u);
    EXPECT_EQ(int{r.fork}, int{kVisibilityMapFork});
    EXPECT_EQ(r.segno, 2u);
    EXPECT_FALSE(r.temp);
    ASSERT_TRUE(parse_relation_file_name("4294967295", &r));
    EXPECT_EQ(r.relfilenode, 4294967295u);
    ASSERT_TRUE(parse_relation_file_name("1", &r));
    EXPECT_EQ(r.relfilenode, 1u);
    EXPECT_EQ(r.segno, 0u);
    EXPECT_EQ(int{r.fork}, int{kMainFork});
}

TEST(RelPath, RejectsNonRelationFiles)
{
    for (std::string_view bad : {"pg_filenode.map", "PG_VERSION", "pg_internal.init", "pg_control",
                                 "16385_foo", "16385_", "_fsm", "16385_fsm_vm", "16385_vm_fsm", "16385_FSM",
                                 "16385_vm.", "16385.", ".1", "16385..1", "16385.1.2", "16385.1_vm",
                                 "16385.0", "16385.01", "016385", "00", "0", "", "4294967296", "99999999999",
                                 "16385abc", "16385 ", " 16385", "16385.1abc", "16385_vm.2x", "16385_init_",
                                 "-16385", "+16385", "16385.-1", "16385.+1", "1e5", "0x10", "16385/",
                                 "16385.4294967296", "16385\n"})
        EXPECT_FALSE(name_ok(bad)) << "\"" << bad << "\"";

    for (std::string_view bad : {"global/pg_filenode.map", "global/pg_control", "global/pg_internal.init",
                                 "base/16384/PG_VERSION", "base/16384/pg_filenode.map",
                                 "base/16384/pg_internal.init", "base/16384/016385", "base/16384/16385.0",
                                 "base/16384/", "base/16384/16385_foo", "base/16384/16385.",
                                 "base/16384/16385x", "base/16384/16385.1x", "base/16384/16385/"})
        EXPECT_FALSE(path_ok(bad)) << bad;
}

TEST(RelPath, RejectsBadDirectories)
{
    for (std::string_view bad : {
             "", "/", "16385", "base/16384", "base", "base/", "base/x/1", "base/016384/16385", "base/0/16385",
             "base/4294967296/16385", "base/16384/16385/16386", "base//16385", "/base/16384/16385",
             "./base/16384/16385", "global/16384/1262", "global", "pg_global/1262", "pg_wal/000000010000000000000001",
             "pg_xact/0000", "pg_tblspc/16390/PG_14_202107181/16384/16391", "pg_tblspc/16390/PG_15_202209061/16391",
             "pg_tblspc/16390/16384/16391", "pg_tblspc/16390/PG_15_202209061/16384/16391/1",
             "pg_tblspc/0/PG_15_202209061/16384/16391", "pg_tblspc/x/PG_15_202209061/16384/16391",
             "pg_tblspc/16390/PG_15_202209061/x/16391", "pg_tblspc/16390/PG_15_2022090610/16384/16391",
             "pg_tblspc/16390/PG_15_202209061/16384", "base/16384/16385/"})
        EXPECT_FALSE(path_ok(bad)) << "\"" << bad << "\"";
}

TEST(RelPath, RelationOidZeroAndOverflow)
{
    EXPECT_FALSE(path_ok("base/16384/0"));
    EXPECT_FALSE(path_ok("base/16384/0_vm"));
    EXPECT_FALSE(path_ok("base/16384/4294967296"));
    EXPECT_FALSE(path_ok("base/16384/18446744073709551617"));
    EXPECT_TRUE(path_ok("base/16384/4294967295"));
    EXPECT_FALSE(path_ok("base/4294967296/16385"));
    EXPECT_TRUE(path_ok("base/4294967295/16385"));
    EXPECT_FALSE(path_ok("pg_tblspc/4294967296/PG_15_202209061/16384/16391"));
}

TEST(RelPath, ParseRelationDir)
{
    uint32_t spc = 0;
    uint32_t db = 0;
    for (std::string_view dir : {"global", "global/"}) {
        spc = db = 12345;
        ASSERT_TRUE(parse_relation_dir(dir, kVersionDir, &spc, &db)) << dir;
        EXPECT_EQ(spc, kGlobalTablespaceOid) << dir;
        EXPECT_EQ(db, 0u) << dir;
    }
    for (std::string_view dir : {"base/16384", "base/16384/"}) {
        ASSERT_TRUE(parse_relation_dir(dir, kVersionDir, &spc, &db)) << dir;
        EXPECT_EQ(spc, kDefaultTablespaceOid) << dir;
        EXPECT_EQ(db, 16384u) << dir;
    }
    for (std::string_view dir : {"pg_tblspc/16390/PG_15_202209061/16384", "pg_tblspc/16390/PG_15_202209061/16384/"}) {
        ASSERT_TRUE(parse_relation_dir(dir, kVersionDir, &spc, &db)) << dir;
        EXPECT_EQ(spc, 16390u) << dir;
        EXPECT_EQ(db, 16384u) << dir;
    }
    for (std::string_view bad :
         {"", "/", "base", "base/", "base/x", "base/016384", "base/16384/16385", "base/16384/x", "global/1262",
          "pg_tblspc", "pg_tblspc/16390", "pg_tblspc/16390/", "pg_tblspc/16390/PG_15_202209061",
          "pg_tblspc/16390/PG_15_202209061/", "pg_tblspc/16390/PG_14_202107181/16384",
          "pg_tblspc/16390/PG_15_202209061/16384/16385", "pg_wal", "pg_xact", "base16384", "globalx",
          "/global", "/base/16384"})
        EXPECT_FALSE(parse_relation_dir(bad, kVersionDir, &spc, &db)) << "\"" << bad << "\"";
}

TEST(RelPath, ForkSuffix)
{
    EXPECT_STREQ(fork_suffix(kMainFork), "");
    EXPECT_STREQ(fork_suffix(kFsmFork), "_fsm");
    EXPECT_STREQ(fork_suffix(kVisibilityMapFork), "_vm");
    EXPECT_STREQ(fork_suffix(kInitFork), "_init");

    /* fork_suffix and the parser agree, with and without a segment. */
    for (uint8_t fork = 0; fork <= ptrack::kMaxFork; ++fork) {
        for (const char* seg : {"", ".1", ".7"}) {
            const std::string name = std::string("16385") + fork_suffix(fork) + seg;
            RelFileName r{};
            ASSERT_TRUE(parse_relation_file_name(name, &r)) << name;
            EXPECT_EQ(int{r.fork}, int{fork}) << name;
            EXPECT_EQ(r.relfilenode, 16385u) << name;
        }
    }

    /* An unknown fork has no valid suffix: it cannot be mistaken for a real file name. */
    const char* unknown = fork_suffix(4);
    ASSERT_NE(unknown, nullptr);
    EXPECT_FALSE(name_ok(std::string("16385") + unknown));
    EXPECT_FALSE(name_ok(std::string("16385") + fork_suffix(255)));
}
