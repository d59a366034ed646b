// Every data-plane message, defined once: its frame grammar, one Encode and
// one Decode. Decode checks the structure (frame count, frame sizes, counts
// that must agree); the receiving service checks meaning (the shard exists,
// ids fall in it, gradients are finite). docs/wire_format.md mirrors this.
//
//   LookupRequest  := Header(op=LOOKUP) LookupMeta Entries Lengths Ids Weights
//     LookupMeta   := trainer:u32 flags:u32 step:u64
//                     flags: bit 0 no_context (an inference lookup), bit 1
//                     ids32 (Ids is uint32[]: every table of the job has at
//                     most 2^32 rows, which halves the ids' bytes), bit 2
//                     after_own_push, bit 3 bf16 (the reply's Values are
//                     bfloat16: training.qcomms.forward_precision)
//     Entries      := LookupEntry[n]
//     LookupEntry  := shard:u32 num_bags:u32 num_ids:u32 flags:u32
//                     flags: bit 0 weighted (the entry has per-id weights),
//                     bit 1 sum_partial (pool by SUM even for a MEAN table: the
//                     trainer divides after adding the partials of row shards),
//                     bit 2 context_only (a backup's copy: open the context,
//                     reply no values for it), bit 3 rows (the ids are
//                     distinct rows: the reply is each id's row, the push each
//                     id's row gradient; the trainer pools and un-pools, so a
//                     batch with fewer distinct ids than bags moves each row
//                     once; num_bags 0, not weighted, not sum_partial)
//     Lengths      := int32[sum num_bags]       ids per bag, entry after entry
//     Ids          := int64[sum num_ids]        row ids in the table's id space
//                     (uint32[sum num_ids] with ids32)
//     Weights      := float32[sum num_ids of weighted entries]
//   LookupResponse := Header Values
//     Values       := float32[sum over entries but context_only ones of
//                     out_rows x shard_cols] (bfloat16[...] with bf16)
//                     out_rows = the entry's non-empty bags, in bag order (pooled
//                     table: an empty bag has no row) or num_ids (unpooled, or
//                     a rows entry)
//
//   PushRequest    := Header(op=PUSH_GRADIENTS) PushMeta Entries Grads
//     PushMeta     := trainer:u32 flags:u32 step:u64
//                     flags: bit 0 bf16 (Grads are bfloat16:
//                     training.qcomms.backward_precision)
//     Entries      := PushEntry[n]; PushEntry := shard:u32 rows:u32 cols:u32 pad:u32
//     Grads        := float32[sum rows x cols]  gradient of each output row the
//                     lookup with the same (trainer, step) returned (so, pooled:
//                     one per non-empty bag)
//   PushResponse   := Header                     (ALREADY_APPLIED for a retry)
//
//   FetchRowsReply := Header FetchMeta Ids Rows  rows of a shard (a migration;
//                                                the request is JSON: FetchRowsRequest)
//     FetchMeta    := width:u32 pad:u32 next:i64 floats per row; the id to ask
//                     after next, or -1: the range is done
//     Ids          := int64[n]                  in increasing order
//     Rows         := float32[n x width]        full rows, optimizer state included
//
//   JsonMessage    := Header Json                control plane (register, plan, ...)
//     Json         := UTF-8 JSON text
//
// A (trainer, step) pair names a backward context (DESIGN.md §4): the lookup
// opens it on each server, the push of the same pair closes it.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"
#include "common/wire_format.h"

namespace tessera {

struct LookupMeta {
  uint32_t trainer = 0;
  uint32_t flags = 0;  // kLookupNoContext, kLookupIds32, kLookupAfterOwnPush, kLookupBf16Values
  uint64_t step = 0;
};
// An inference lookup: no backward context is opened (evaluation).
inline constexpr uint32_t kLookupNoContext = 1;
// The ids travel as uint32 (decoded back to int64). A quarter of a pooled
// lookup step's bytes were its 8-byte ids; few tables have 2^32 rows.
inline constexpr uint32_t kLookupIds32 = 2;
// Async mode: serve this training lookup after the trainer's push of the
// step before, if that push is still to come to this server (a lookup of
// step t+1 prefetched while step t computes). Sync mode parks such lookups
// by its own rule. Without it a lookup is served on arrival.
inline constexpr uint32_t kLookupAfterOwnPush = 4;
// The reply's values travel as bfloat16 (training.qcomms.forward_precision):
// half the bytes, rounded once by the server as it sends them.
inline constexpr uint32_t kLookupBf16Values = 8;
static_assert(sizeof(LookupMeta) == 16);

inline constexpr uint32_t kEntryWeighted = 1;
inline constexpr uint32_t kEntrySumPartial = 2;
// To a shard's backup: open the backward context (so it can apply the same
// push) but send no values; the reply has none for this entry.
inline constexpr uint32_t kEntryContextOnly = 4;
// The entry's ids are distinct rows: the reply carries each row as stored
// (no pooling), the push each row's gradient. The trainer sends this when a
// batch has fewer distinct ids than bags (hot ids of one-hot features), so
// each row crosses the wire once; it pools and un-pools with the same
// kernels the server would, so the arithmetic is the same bit for bit.
inline constexpr uint32_t kEntryRows = 8;

struct LookupEntry {
  uint32_t shard = 0;
  uint32_t num_bags = 0;
  uint32_t num_ids = 0;
  uint32_t flags = 0;
  bool weighted() const { return flags & kEntryWeighted; }
  bool sum_partial() const { return flags & kEntrySumPartial; }
  bool context_only() const { return flags & kEntryContextOnly; }
  bool rows() const { return flags & kEntryRows; }
};
static_assert(sizeof(LookupEntry) == 16);

struct PushMeta {
  uint32_t trainer = 0;
  uint32_t flags = 0;  // kPushBf16Grads
  uint64_t step = 0;
};
// The gradients travel as bfloat16 (training.qcomms.backward_precision),
// rounded once by the trainer as it sends them.
inline constexpr uint32_t kPushBf16Grads = 1;
static_assert(sizeof(PushMeta) == 16);

struct PushEntry {
  uint32_t shard = 0;
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint32_t pad = 0;
};
static_assert(sizeof(PushEntry) == 16);

// A decoded lookup. The spans point into `source`'s frames (ids sent as
// uint32 are widened into a copy).
struct LookupRequest {
  Message source;
  LookupMeta meta;
  ArrayFrame<LookupEntry> entries;
  ArrayFrame<int32_t> lengths;
  ArrayFrame<int64_t> ids;
  ArrayFrame<float> weights;
};

// With kLookupIds32 in meta.flags every id must be in [0, 2^32) (CHECKed:
// the sender sets it only for a job whose tables all fit).
Message EncodeLookupRequest(const LookupMeta& meta, std::vector<LookupEntry>&& entries,
                            std::vector<int32_t>&& lengths, std::vector<int64_t>&& ids,
                            std::vector<float>&& weights);
// Checks: 5 frames; no unknown meta flags; sum of num_bags == lengths; lengths >= 0 and each entry's
// lengths sum to its num_ids (a rows entry: no bags, no weights, not
// sum_partial); sum of num_ids == ids; weights match.
StatusOr<LookupRequest> DecodeLookupRequest(Message&& m);

// bf16: the values are rounded to bfloat16 (the request had kLookupBf16Values).
Message EncodeLookupResponse(const Header& request, std::vector<float>&& values, bool bf16 = false);
// Checks: one frame of exactly `expected_values` floats (bfloat16 values
// with bf16, widened into `values`).
Status DecodeLookupResponse(const Message& m, size_t expected_values, ArrayFrame<float>* values, bool bf16 = false);

struct PushRequest {
  Message source;
  PushMeta meta;
  ArrayFrame<PushEntry> entries;
  ArrayFrame<float> grads;
};

// With kPushBf16Grads in meta.flags the gradients are rounded to bfloat16.
Message EncodePushRequest(const PushMeta& meta, std::vector<PushEntry>&& entries, std::vector<float>&& grads);
// Checks: 3 frames; no unknown meta flags; sum of rows x cols == grads
// (bfloat16 ones with kPushBf16Grads, widened into `grads`).
StatusOr<PushRequest> DecodePushRequest(Message&& m);

struct FetchMeta {
  uint32_t width = 0;
  uint32_t pad = 0;
  int64_t next = -1;
};
static_assert(sizeof(FetchMeta) == 16);

struct FetchRowsReply {
  Message source;
  FetchMeta meta;
  ArrayFrame<int64_t> ids;
  ArrayFrame<float> rows;
};

Message EncodeFetchRowsReply(const Header& request, const FetchMeta& meta, std::vector<int64_t>&& ids,
                             std::vector<float>&& rows);
// Checks: 3 frames; width >= 1; rows == ids x width; ids increasing and >= 0.
StatusOr<FetchRowsReply> DecodeFetchRowsReply(Message&& m);

// Control plane.
Message EncodeJson(Opcode op, const nlohmann::json& body);
// A reply to `request` carrying `body`.
Message EncodeJsonReply(const Header& request, const nlohmann::json& body);
// Checks: one frame that parses as JSON.
StatusOr<nlohmann::json> DecodeJson(const Message& m);
// Frame `index` of a message whose first frames are JSON and whose others
// are raw bytes (a checkpoint's trainer state travels that way).
StatusOr<nlohmann::json> DecodeJsonFrame(const Message& m, size_t index);

}  // namespace tessera
