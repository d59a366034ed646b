#include "ps/store_factory.h"

#include <filesystem>

#include "common/sharding_plan.h"
#include "ps/tiered_row_store.h"

namespace tessera {

RowStoreFactory MakeRowStoreFactory(const ShardStorageOptions& options) {
  if (options.rocksdb_path.empty()) return nullptr;
  return [options](const ShardSpec& shard, const RowStoreOptions& rows) -> StatusOr<std::unique_ptr<RowStore>> {
    std::error_code ec;
    std::filesystem::create_directories(options.rocksdb_path, ec);
    if (ec) return Status::Unavailable("cannot create " + options.rocksdb_path + ": " + ec.message());
    TieredRowStoreOptions o;
    o.rows = rows;
    o.db.path = options.rocksdb_path + "/shard" + std::to_string(shard.shard_id);
    // A new job's shard starts empty: rows of an earlier job must not leak in.
    o.db.mode = RowDbOpenMode::kOverwrite;
    o.host_bytes = std::max<int64_t>(HostTierBytesPerRow(rows.row_width),
                                     static_cast<int64_t>(static_cast<double>(options.host_bytes) * rows.memory_share));
    return OpenTieredRowStore(o);
  };
}

}  // namespace tessera
