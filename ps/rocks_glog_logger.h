// RocksDB's diagnostic log, written to the server's own log (glog) instead
// of a LOG file beside the database.
//
// Why: RocksDB keeps its LOG file open for the database's whole life, on the
// disk the rows spill to. When that disk fills up, a write of the LOG file
// fails once and Debian's RocksDB 7.8, built with assertions, aborts the
// process at the next line it logs
// (WritableFileWriter::AssertFalseAndGetStatusForPrevError): a full disk,
// which the tiered store otherwise rides out (docs/design.md, section 6),
// killed the server at its next checkpoint or flush. A logger with no file of
// its own cannot fail that way, and an operator finds RocksDB's warnings in
// the one log that says which shard they concern.
//
// Levels: RocksDB's errors and fatal messages go to LOG(ERROR), its warnings
// to LOG(WARNING), the rest (options, flushes, compactions: many lines per
// open) only with --v=1.
#pragma once

#include <rocksdb/env.h>

#include <memory>
#include <string>

namespace tessera {

// A logger for RocksDB's Options::info_log; `name` (the database's path)
// prefixes every line.
std::shared_ptr<rocksdb::Logger> NewGlogRocksLogger(const std::string& name);

}  // namespace tessera
