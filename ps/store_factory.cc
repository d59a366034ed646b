#include "ps/store_factory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <glog/logging.h>

#include "common/sharding_plan.h"
#include "kernels/cuda/device_cuda.h"
#include "ps/device_row_store.h"
#include "ps/slot_table.h"
#include "ps/tiered_row_store.h"

namespace tessera {
namespace {

StatusOr<std::unique_ptr<RowStore>> HostStore(const ShardStorageOptions& options, const ShardSpec& shard,
                                              const RowStoreOptions& rows) {
  if (options.rocksdb_path.empty()) {
    RowStoreOptions memory = rows;
    memory.huge_pages = options.huge_pages;
    return NewMemoryRowStore(memory);
  }
  std::error_code ec;
  std::filesystem::create_directories(options.rocksdb_path, ec);
  if (ec) return Status::Unavailable("cannot create " + options.rocksdb_path + ": " + ec.message());
  TieredRowStoreOptions o;
  o.rows = rows;
  o.db.path = options.rocksdb_path + "/shard" + std::to_string(shard.shard_id);
  if (!rows.instance.empty()) {
    o.db.path += "." + rows.instance;
    o.db.destroy_on_close = true;
  }
  // A new job's shard starts empty: rows of an earlier job must not leak in.
  o.db.mode = RowDbOpenMode::kOverwrite;
  o.db.reserved_disk_bytes = static_cast<size_t>(std::max<int64_t>(0, options.rocksdb_reserved_bytes));
  o.db.checkpoint_hard_links = options.rocksdb_checkpoint_hard_links;
  o.host_bytes = std::max<int64_t>(HostTierBytesPerRow(rows.row_width),
                                   static_cast<int64_t>(static_cast<double>(options.host_bytes) * rows.memory_share));
  o.write_back_buffer_bytes =
      options.write_back_bytes <= 0
          ? 0
          : std::max<int64_t>(std::min<int64_t>(options.write_back_bytes, int64_t{1} << 20),
                              static_cast<int64_t>(static_cast<double>(options.write_back_bytes) * rows.memory_share));
  return OpenTieredRowStore(o);
}

}  // namespace

int64_t GpuTierSlots(int64_t gpu_bytes, double memory_share, int row_width, int64_t num_rows, int64_t min_slots) {
  const double row_bytes = static_cast<double>(row_width) * sizeof(float);
  const double share_rows = static_cast<double>(gpu_bytes) * memory_share / row_bytes;
  const int64_t slots = share_rows >= static_cast<double>(num_rows) ? num_rows : static_cast<int64_t>(share_rows);
  return std::min(num_rows, std::max(slots, std::max<int64_t>(1, min_slots)));
}

Status ConfigureGpuTier(const std::string& device_spec, int device, int64_t gpu_bytes, bool gpu_tier_on_host,
                        ShardStorageOptions* options) {
  if (gpu_bytes < 0) return Status::InvalidArgument("--gpu_bytes " + std::to_string(gpu_bytes) + " is negative");
  if (gpu_tier_on_host) {
    if (gpu_bytes == 0) return Status::InvalidArgument("--gpu_tier_on_host needs --gpu_bytes > 0");
    options->gpu_tier_on_host = true;
    options->gpu_bytes = gpu_bytes;
    return Status::OK();
  }
  if (device < 0) {
    if (gpu_bytes == 0) return Status::OK();
    if (device_spec == "auto") {
      LOG(WARNING) << "--gpu_bytes " << gpu_bytes << " ignored: --device auto found no usable GPU";
      return Status::OK();
    }
    return Status::InvalidArgument("--gpu_bytes " + std::to_string(gpu_bytes) + " needs a GPU (--device cuda:N)");
  }
  options->gpu_device = device;
  if (gpu_bytes == 0) {
    TESSERA_ASSIGN_OR_RETURN(int64_t free_bytes, kernels::DeviceFreeBytes(device));
    gpu_bytes = free_bytes / 2;
    LOG(INFO) << "GPU tier: " << gpu_bytes << " bytes of cuda:" << device << " (half its free memory; --gpu_bytes)";
  }
  options->gpu_bytes = gpu_bytes;
  return Status::OK();
}

RowStoreFactory MakeRowStoreFactory(const ShardStorageOptions& options) {
  const bool gpu_tier = options.gpu_device >= 0 || options.gpu_tier_on_host;
  return [options, gpu_tier](const ShardSpec& shard,
                             const RowStoreOptions& rows) -> StatusOr<std::unique_ptr<RowStore>> {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RowStore> host, HostStore(options, shard, rows));
    if (!gpu_tier || shard.num_rows == 0) return host;
    const int64_t slots = GpuTierSlots(options.gpu_bytes, rows.memory_share, rows.row_width, shard.num_rows, options.gpu_min_slots);
    std::unique_ptr<SlotTable> table;
    if (options.gpu_tier_on_host) {
      table = NewHostSlotTable(slots, rows.row_width);
    } else {
      auto cuda = NewCudaSlotTable(options.gpu_device, slots, rows.row_width);
      if (!cuda.ok()) {
        return cuda.status().WithContext("GPU tier of shard " + std::to_string(shard.shard_id) + " (" +
                                         std::to_string(slots) + " rows)");
      }
      table = std::move(cuda).value();
    }
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<DeviceRowStore> tier,
                             DeviceRowStore::Create(rows, std::move(table), std::move(host), shard.row_offset,
                                                    shard.num_rows));
    LOG(INFO) << "shard " << shard.shard_id << ": GPU tier of " << slots << " of its " << shard.num_rows
              << " rows on " << tier->table().where() << (tier->dense_index() ? " (whole shard)" : "");
    return std::unique_ptr<RowStore>(std::move(tier));
  };
}

int64_t DefaultMemoryBudget(const ShardStorageOptions& storage) {
  if (!storage.rocksdb_path.empty()) return 0;
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024 / 10 * 8;
  }
  return 0;
}

}  // namespace tessera
