// RowStore: where a shard's rows live (DESIGN.md §6). One store per shard.
//
// A stored row is `row_width` floats: the shard's embedding columns followed
// by the optimizer state, so a row and its state always move together (to
// disk, between tiers, in checkpoints). A row that was never used is not
// stored: its value is its deterministic initial value (RowInitFn), computed
// when a lookup or an update first touches it. Implementations: MemoryRowStore here;
// RocksDB and GPU tiers sit behind the same interface.
//
// Thread safety: every method may be called concurrently with any other; a
// Gather never sees half an Update of a row.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "ps/row_store_stats.h"

namespace tessera {

class DeviceRowStore;

// Writes the initial full row (weights and optimizer state) of `id` into
// row[0 .. row_width). Must be a pure function of id.
using RowInitFn = std::function<void(int64_t id, float* row)>;

struct RowStoreOptions {
  int row_width = 0;   // floats per stored row
  int gather_cols = 0; // floats Gather copies out of each row (the embedding)
  RowInitFn init;
  // This store's share of the server's memory budget (its bytes over the
  // bytes of all the server's shards), for tiered stores.
  double memory_share = 1.0;
  // Tells apart two stores of one shard id alive at once (a migration stages
  // a shard while the old plan's of the same id still serves): "" for the
  // usual one; a store with files then names them by id and instance, and
  // removes them when it closes (nothing reopens them).
  std::string instance;
  // The ids the store's shard holds, [id_begin, id_end) (both 0: not known).
  // A store may index these directly instead of hashing them; ids outside
  // the range are still accepted.
  int64_t id_begin = 0;
  int64_t id_end = 0;
  // Rows in memory on transparent huge pages: random rows cost fewer TLB
  // misses, but every new 2 MiB of rows is a huge page to allocate and zero
  // at first touch, which on virtual machines that hand freed memory back to
  // their host ran 28x slower per byte than 4 KiB pages (bench/README.md).
  bool huge_pages = false;
};

class RowStore {
 public:
  virtual ~RowStore() = default;

  int row_width() const { return options_.row_width; }
  int gather_cols() const { return options_.gather_cols; }

  // Calls fn once with a pointer to each row of `ids` (full rows), valid only
  // while fn runs; other readers may run at the same time, writers wait. May
  // materialize rows read for the first time (they are about to be updated).
  using ReadFn = std::function<void(const float* const* rows, int64_t n)>;
  virtual Status Read(std::span<const int64_t> ids, const ReadFn& fn) = 0;

  // out[i * gather_cols ..] = first gather_cols floats of row ids[i].
  // REQUIRES: out holds ids.size() * gather_cols floats.
  Status Gather(std::span<const int64_t> ids, float* out);

  // As Gather, but a row not stored is not created: its initial value is
  // copied out and nothing is kept (an evaluation's lookups must not grow
  // the table). The default serves stores whose Read creates nothing.
  virtual Status GatherExisting(std::span<const int64_t> ids, float* out) { return Gather(ids, out); }

  // Calls fn once with pointers to the full rows of `ids` (materializing the
  // missing ones from the initializer), which fn may modify in place; the
  // store keeps the result. REQUIRES: ids distinct. The rows are locked
  // against other readers and writers while fn runs.
  using UpdateFn = std::function<void(float* const* rows, int64_t n)>;
  virtual Status Update(std::span<const int64_t> ids, const UpdateFn& fn) = 0;

  // Inserts or overwrites full rows: rows is [ids.size() x row_width].
  virtual Status Put(std::span<const int64_t> ids, const float* rows) = 0;

  // Whether a row, once materialized, stays at the same address for the
  // store's life (rows are never moved, evicted or freed): then a lookup's
  // row pointers serve its update too, without finding the rows again.
  virtual bool stable_rows() const { return false; }
  // Update for such a store, on rows a Read of this store gave: the same
  // locking as Update, no lookup of the ids. REQUIRES: stable_rows().
  virtual Status UpdateRows(float* const* rows, int64_t n, const UpdateFn& fn) {
    (void)rows;
    (void)n;
    (void)fn;
    return Status::Internal("this store's rows move: update them by id");
  }

  // Whether rows may sit in a slower tier (RocksDB) than the one Read serves
  // them from, so that Warm has something to do.
  virtual bool has_slower_tier() const { return false; }
  // Brings the rows of `ids` to the tier Read serves them from, ahead of
  // that Read (a lookup parked until the step before it is applied); they
  // may be evicted again before it comes. Values are unchanged: a row never
  // stored becomes resident with its initial value, as a Read would make
  // it. Stores without a slower tier do nothing.
  virtual Status Warm(std::span<const int64_t> ids) {
    (void)ids;
    return Status::OK();
  }

  // A hint that about `rows` more rows are about to be inserted (a restore,
  // a migration): a store whose index grows by rehashing sizes it once.
  virtual void Reserve(int64_t rows) { (void)rows; }

  // Visits every materialized row (order unspecified). Writers wait.
  virtual Status ForEach(const std::function<Status(int64_t id, const float* row)>& fn) = 0;

  // Rows materialized.
  virtual int64_t size() const = 0;

  // What each tier holds and how often it was hit (row_store_stats.h).
  virtual RowStoreStats Stats() const = 0;
  // Writes every dirty row back to the slowest tier (RocksDB) and makes it
  // durable there; a no-op for memory-only stores. On failure the rows stay
  // where they were.
  virtual Status Flush() { return Status::OK(); }

  // The GPU tier when this store is one (ps/device_row_store.h): the shard
  // then runs its lookups and updates there rather than through rows on the
  // host.
  virtual DeviceRowStore* device_tier() { return nullptr; }

 protected:
  explicit RowStore(RowStoreOptions options) : options_(std::move(options)) {}
  RowStoreOptions options_;
};

std::unique_ptr<RowStore> NewMemoryRowStore(const RowStoreOptions& options);

// Makes the store of one shard (which tier layout, where on disk). The
// parameter server picks one from its flags; tests pass their own.
struct ShardSpec;
using RowStoreFactory =
    std::function<StatusOr<std::unique_ptr<RowStore>>(const ShardSpec& shard, const RowStoreOptions& options)>;

}  // namespace tessera
