#include "trainer/sealed_ring_collective.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

namespace tessera {
namespace {

// Gloo's own collectives use slot prefixes 0x01-0x08.
constexpr uint8_t kSealedRingSlotPrefix = 0x5e;
// Place::phase of the ring's reduce-scatter (0), all-gather (1), and a pair's one exchange.
constexpr uint32_t kPairPhase = 2;

class SealedRingCollective final : public Collective {
 public:
  SealedRingCollective(const GlooCollectiveOptions& options, std::shared_ptr<gloo::Context> context,
                       CollectiveSeal seal)
      : options_(options),
        context_(std::move(context)),
        seal_(std::move(seal)),
        sent_(static_cast<size_t>(options.world), 0),
        received_(static_cast<size_t>(options.world), 0) {}

  ~SealedRingCollective() override {
    // The buffers' memory must outlive Gloo's use of it: close the pairs
    // (ending any transfer a failed sum left behind) before freeing it.
    send_ub_.reset();
    recv_ub_.reset();
    context_.reset();
  }

  int rank() const override { return options_.rank; }
  int world() const override { return options_.world; }

  Status AllReduceSum(std::span<float> data) override {
    if (!spent_.ok()) return spent_;
    if (data.empty()) return Status::OK();
    Status st = Sum(data);
    if (!st.ok()) spent_ = Status(st.code(), st.message() + " (this collective is spent; a new one is needed)");
    return st;
  }

  Status AllReduceSumDevice(float*, int64_t) override {
    return Status::FailedPrecondition(
        "the Gloo collective sums host memory; device gradients need the NCCL collective (a trainer on cuda:N)");
  }

 private:
  int world_size() const { return options_.world; }
  size_t ChunkBegin(size_t n, int c) const { return n * static_cast<size_t>(c) / static_cast<size_t>(world_size()); }
  size_t ChunkSize(size_t n, int c) const { return ChunkBegin(n, c + 1) - ChunkBegin(n, c); }
  int Mod(int x) const { return ((x % world_size()) + world_size()) % world_size(); }

  // The sum is made in acc_ and copied into `data` only once every message
  // has opened, so a refused or failed sum leaves the gradients as they
  // were. `data` is only read meanwhile: the first message sends this
  // rank's own chunk from it, and each chunk received in the reduce-scatter
  // is added to `data`'s (which no step has touched) into acc_. Every chunk
  // of acc_ is written before it is read, so it needs no copy of `data`.
  Status Sum(std::span<float> data) {
    if (world_size() == 1) return Status::OK();
    if (world_size() == 2) return SumOfPair(data);
    const size_t n = data.size();
    const int rank = options_.rank;
    acc_.resize(n);
    const size_t max_chunk = ChunkSize(n, world_size() - 1);  // the last chunk is the largest
    EnsureBuffers(max_chunk);

    // Reduce-scatter: after step s, this rank's chunk rank - s - 1 holds
    // s + 2 ranks' sum; after W - 1 steps, chunk rank + 1 holds all.
    for (int s = 0; s < world_size() - 1; ++s) {
      const float* send_from = s == 0 ? data.data() : acc_.data();
      TESSERA_RETURN_IF_ERROR(
          Exchange(n, /*phase=*/0, Mod(rank - s), send_from, Mod(rank - s - 1), /*add_to=*/data.data()));
    }
    // All-gather: each finished chunk travels once round the ring.
    for (int s = 0; s < world_size() - 1; ++s) {
      TESSERA_RETURN_IF_ERROR(
          Exchange(n, /*phase=*/1, Mod(rank + 1 - s), acc_.data(), Mod(rank - s), /*add_to=*/nullptr));
    }
    std::memcpy(data.data(), acc_.data(), n * sizeof(float));
    return Status::OK();
  }

  // Two ranks: each seals its whole buffer to the other and adds what it
  // opens. One round trip where the ring takes two (a reduce-scatter and an
  // all-gather, each waiting for the peer), with the same bytes sealed and
  // opened. Each element is one addition of the two ranks' values, as in
  // the ring, and a + b == b + a: both ranks get the ring's bits.
  Status SumOfPair(std::span<float> data) {
    const size_t n = data.size();
    const int peer = 1 - options_.rank;
    acc_.resize(n);
    EnsureBuffers(n);
    const CollectiveSeal::Place place{n, 0, kPairPhase};
    TESSERA_RETURN_IF_ERROR(Transfer(peer, place, data.data(), n, peer, place, acc_.data(), data.data(), n));
    std::memcpy(data.data(), acc_.data(), n * sizeof(float));
    return Status::OK();
  }

  void EnsureBuffers(size_t max_chunk) {
    const size_t bytes = max_chunk * sizeof(float) + CollectiveSeal::kTagBytes;
    if (bytes <= send_buf_.size()) return;
    send_ub_.reset();
    recv_ub_.reset();
    send_buf_.assign(bytes, 0);
    recv_buf_.assign(bytes, 0);
    send_ub_ = context_->createUnboundBuffer(send_buf_.data(), send_buf_.size());
    recv_ub_ = context_->createUnboundBuffer(recv_buf_.data(), recv_buf_.size());
  }

  // Sends chunk `send_chunk` of `send_from` to the next rank and takes
  // chunk `recv_chunk` from the previous one into acc_: added to
  // `add_to`'s, or as it comes when `add_to` is null.
  Status Exchange(size_t n, uint32_t phase, int send_chunk, const float* send_from, int recv_chunk,
                  const float* add_to) {
    const CollectiveSeal::Place send_place{n, static_cast<uint32_t>(send_chunk), phase};
    const CollectiveSeal::Place recv_place{n, static_cast<uint32_t>(recv_chunk), phase};
    const size_t recv_begin = ChunkBegin(n, recv_chunk);
    return Transfer(Mod(options_.rank + 1), send_place, send_from + ChunkBegin(n, send_chunk),
                    ChunkSize(n, send_chunk), Mod(options_.rank - 1), recv_place, acc_.data() + recv_begin,
                    add_to == nullptr ? nullptr : add_to + recv_begin, ChunkSize(n, recv_chunk));
  }

  // Seals send_n floats at `send` to rank `next` and takes recv_n floats
  // from rank `prev` into dst: added to base's, or as they come when base
  // is null.
  Status Transfer(int next, const CollectiveSeal::Place& send_place, const float* send, size_t send_n, int prev,
                  const CollectiveSeal::Place& recv_place, float* dst, const float* base, size_t recv_n) {
    const int rank = options_.rank;
    const uint64_t slot = gloo::Slot::build(kSealedRingSlotPrefix, tag_++);
    try {
      recv_ub_->recv(prev, slot, 0, recv_n * sizeof(float) + CollectiveSeal::kTagBytes);
      seal_.Seal(rank, next, sent_[next]++, send_place, send, send_n * sizeof(float), send_buf_.data());
      send_ub_->send(next, slot, 0, send_n * sizeof(float) + CollectiveSeal::kTagBytes);
      const bool received = recv_ub_->waitRecv(options_.timeout);
      const bool sent = send_ub_->waitSend(options_.timeout);
      if (!received || !sent) return Status::Unavailable("allreduce: a transfer was aborted");
    } catch (const std::exception& e) {
      return Status::Unavailable(std::string("allreduce failed (a trainer died or hangs?): ") + e.what());
    }
    bool opened = false;
    if (base == nullptr) {
      opened = seal_.Open(prev, rank, received_[prev]++, recv_place, recv_buf_.data(), recv_n * sizeof(float), dst);
    } else {
      // A piece at a time, added while it is still in L1: the chunk's
      // plaintext is never written out whole and read back.
      opened = seal_.OpenInPieces(
          prev, rank, received_[prev]++, recv_place, recv_buf_.data(), recv_n * sizeof(float),
          reinterpret_cast<uint8_t*>(piece_.data()), piece_.size() * sizeof(float),
          [dst, base](size_t offset, const uint8_t* plain, size_t bytes) {
            const size_t first = offset / sizeof(float);
            const float* p = reinterpret_cast<const float*>(plain);
            for (size_t i = 0; i < bytes / sizeof(float); ++i) dst[first + i] = base[first + i] + p[i];
          });
    }
    if (!opened) {
      return Status::PermissionDenied(
          "allreduce: what came as trainer " + std::to_string(prev) + "'s part of the sum does not open with this "
          "job's trainer key (a stranger on its connection, or damaged in transit); the sum is refused and the "
          "gradients are unchanged");
    }
    return Status::OK();
  }

  GlooCollectiveOptions options_;
  std::shared_ptr<gloo::Context> context_;
  CollectiveSeal seal_;
  // Messages sealed to / opened from each rank: the nonces' counters.
  std::vector<uint64_t> sent_, received_;
  uint32_t tag_ = 0;
  std::vector<float> acc_;
  // 16 KiB: a piece of a received chunk, opened and added while in L1.
  std::array<float, 4096> piece_{};
  std::vector<uint8_t> send_buf_, recv_buf_;
  std::unique_ptr<gloo::transport::UnboundBuffer> send_ub_, recv_ub_;
  Status spent_;
};

}  // namespace

std::unique_ptr<Collective> NewSealedRingCollective(const GlooCollectiveOptions& options,
                                                    std::shared_ptr<gloo::Context> context, CollectiveSeal seal) {
  return std::make_unique<SealedRingCollective>(options, std::move(context), std::move(seal));
}

}  // namespace tessera
