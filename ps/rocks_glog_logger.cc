#include "ps/rocks_glog_logger.h"

#include <glog/logging.h>

#include <cstdarg>
#include <cstdio>
#include <utility>
#include <vector>

namespace tessera {
namespace {

// Below this level RocksDB does not even format a line. Read once, when a
// database opens: --v is set by then.
rocksdb::InfoLogLevel LowestLevelShown() {
  return VLOG_IS_ON(1) ? rocksdb::InfoLogLevel::DEBUG_LEVEL : rocksdb::InfoLogLevel::WARN_LEVEL;
}

std::string Format(const char* format, va_list ap) {
  char small[512];
  va_list again;
  va_copy(again, ap);
  const int n = std::vsnprintf(small, sizeof(small), format, ap);
  if (n < 0) {
    va_end(again);
    return format;
  }
  if (static_cast<size_t>(n) < sizeof(small)) {
    va_end(again);
    return std::string(small, static_cast<size_t>(n));
  }
  std::vector<char> big(static_cast<size_t>(n) + 1);
  std::vsnprintf(big.data(), big.size(), format, again);
  va_end(again);
  return std::string(big.data(), static_cast<size_t>(n));
}

class GlogRocksLogger final : public rocksdb::Logger {
 public:
  explicit GlogRocksLogger(std::string name) : rocksdb::Logger(LowestLevelShown()), name_(std::move(name)) {}

  void Logv(const char* format, va_list ap) override { Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap); }

  void Logv(rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    const std::string line = Format(format, ap);
    switch (level) {
      case rocksdb::InfoLogLevel::FATAL_LEVEL:
      case rocksdb::InfoLogLevel::ERROR_LEVEL:
        LOG(ERROR) << "rocksdb " << name_ << ": " << line;
        break;
      case rocksdb::InfoLogLevel::WARN_LEVEL:
        LOG(WARNING) << "rocksdb " << name_ << ": " << line;
        break;
      default:
        VLOG(1) << "rocksdb " << name_ << ": " << line;
        break;
    }
  }

 private:
  std::string name_;
};

}  // namespace

std::shared_ptr<rocksdb::Logger> NewGlogRocksLogger(const std::string& name) {
  return std::make_shared<GlogRocksLogger>(name);
}

}  // namespace tessera
