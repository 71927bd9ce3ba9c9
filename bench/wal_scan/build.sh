#!/usr/bin/env bash
# bench/wal_scan/build.sh -- builds wal_scan.cpp against one server: its
# headers (the WAL layouts and XLOG_PAGE_MAGIC are that version's), its
# CRC-32C (libpgcommon, libpgport) and the engine's hashes (include/ptrack).
# Used by run.sh and bench/vs_summarizer.sh --wal-scan.
#
# Usage: bench/wal_scan/build.sh PG_CONFIG OUTPUT
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pg_config=${1:?usage: build.sh PG_CONFIG OUTPUT}
out=${2:?usage: build.sh PG_CONFIG OUTPUT}
exec g++ -std=c++17 -O2 -Wall -Wextra -DPTRACK_PG_LAYER -I"$here/../../include" \
    -I"$("$pg_config" --includedir-server)" -o "$out" "$here/wal_scan.cpp" \
    -L"$("$pg_config" --libdir)" -lpgcommon -lpgport
