// Gloo allreduce over TCP; the ranks meet through a Store (common/store.h).
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <glog/logging.h>

#include "trainer/collective.h"
#include "trainer/collective_seal.h"
#include "trainer/sealed_ring_collective.h"

namespace tessera {
namespace {

class LocalCollective final : public Collective {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  Status AllReduceSum(std::span<float>) override { return Status::OK(); }
  // A sum over one trainer touches nothing, so the memory may be anywhere.
  Status AllReduceSumDevice(float*, int64_t) override { return Status::OK(); }
};

// gloo::rendezvous::Store over a Store. Gloo's interface has no deadline on
// get and reports failure by exception; every wait here is bounded by the
// collective's timeout, and NewGlooCollective turns the exception into a
// Status.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(tessera::Store* store, std::chrono::milliseconds timeout) : store_(store), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const Status st = store_->Set(key, std::string(data.begin(), data.end()));
    if (!st.ok()) throw gloo::IoException(st.ToString());
  }

  std::vector<char> get(const std::string& key) override {
    const std::string value = Get(key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  // All keys by one deadline (a get waits for its key).
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    using std::chrono::milliseconds;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const std::string& k : keys) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      (void)Get(k, std::max(left, milliseconds(0)));
    }
  }

 private:
  std::string Get(const std::string& key, std::chrono::milliseconds timeout) {
    StatusOr<std::string> value = store_->Get(key, timeout);
    if (!value.ok()) throw gloo::IoException(value.status().ToString());
    return *std::move(value);
  }

  tessera::Store* store_;
  std::chrono::milliseconds timeout_;
};

class GlooCollective final : public Collective {
 public:
  GlooCollective(const GlooCollectiveOptions& options, std::shared_ptr<gloo::Context> context)
      : options_(options), context_(std::move(context)) {}

  int rank() const override { return options_.rank; }
  int world() const override { return options_.world; }

  Status AllReduceSum(std::span<float> data) override {
    if (data.empty()) return Status::OK();
    try {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      opts.setTag(tag_++);
      opts.setTimeout(options_.timeout);
      gloo::allreduce(opts);
    } catch (const std::exception& e) {
      return Status::Unavailable(std::string("allreduce failed (a trainer died or hangs?): ") + e.what());
    }
    return Status::OK();
  }

  Status AllReduceSumDevice(float*, int64_t) override {
    return Status::FailedPrecondition(
        "the Gloo collective sums host memory; device gradients need the NCCL collective (a trainer on cuda:N)");
  }

 private:
  GlooCollectiveOptions options_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;
};

// Every rank's random share of the collective's key, through the store (whose
// keys only the job's members may set), then the seal they make.
StatusOr<CollectiveSeal> AgreeOnSeal(const GlooCollectiveOptions& options, Store* store) {
  const std::string key_prefix = options.prefix + "/seal/";
  TESSERA_RETURN_IF_ERROR(store->Set(key_prefix + std::to_string(options.rank), CollectiveSeal::NewContribution()));
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  std::vector<std::string> contributions;
  for (int r = 0; r < options.world; ++r) {
    const auto left = std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 deadline - std::chrono::steady_clock::now()));
    TESSERA_ASSIGN_OR_RETURN(std::string c, store->Get(key_prefix + std::to_string(r), left));
    contributions.push_back(std::move(c));
  }
  return CollectiveSeal::ForSession(options.seal_secret, options.prefix, contributions);
}

}  // namespace

std::unique_ptr<Collective> NewLocalCollective() { return std::make_unique<LocalCollective>(); }

namespace {

// Gloo's TCP transport writes with writev, which raises SIGPIPE once the
// peer has closed its end: a trainer whose peer was killed during a sum died
// of that signal (exit 141) instead of failing the sum with an error that
// names the peer, and the master then blamed the wrong trainer. Ignored, the
// write fails with EPIPE, which Gloo throws and the collective reports. Only
// where the process left SIGPIPE at its default (Python ignores it already;
// a program with its own handler keeps it).
void IgnoreSigpipeAtItsDefault() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) != 0) return;
    if ((current.sa_flags & SA_SIGINFO) == 0 && current.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  });
}

}  // namespace

GlooCollectiveOptions JobGlooOptions(const JobConfig& job, int64_t generation, int rank, int world, std::string host,
                                     const JobKeys* keys) {
  GlooCollectiveOptions o;
  o.rank = rank;
  o.world = world;
  o.host = std::move(host);
  o.prefix = "gloo/" + job.name + "/g" + std::to_string(generation);
  o.timeout = std::chrono::milliseconds(job.runtime.collective_timeout_ms);
  if (keys != nullptr) o.seal_secret = keys->own_secret_bytes();
  return o;
}

StatusOr<std::unique_ptr<Collective>> NewGlooCollective(const GlooCollectiveOptions& options, Store* store) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return Status::InvalidArgument("Gloo collective: rank must be in [0, world)");
  }
  if (options.world == 1) return NewLocalCollective();
  IgnoreSigpipeAtItsDefault();
  std::optional<CollectiveSeal> seal;
  if (!options.seal_secret.empty()) {
    StatusOr<CollectiveSeal> made = AgreeOnSeal(options, store);
    if (!made.ok()) {
      return Status::Unavailable("gloo rendezvous of rank " + std::to_string(options.rank) + " of " +
                                 std::to_string(options.world) + " failed: " + made.status().ToString());
    }
    seal.emplace(std::move(made).value());
  }
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    GlooStore gloo_store(store, options.timeout);
    gloo::rendezvous::PrefixStore prefixed(options.prefix, gloo_store);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world);
    context->setTimeout(options.timeout);
    context->connectFullMesh(prefixed, device);
    // A trainer with nothing left to train (a job resumed at its last step)
    // leaves right after connecting, and a peer still connecting then fails
    // with "Connection closed by peer" (integration_export_test, 1 run in 7
    // under load). No one leaves until every rank is connected.
    gloo::BarrierOptions connected(context);
    connected.setTimeout(options.timeout);
    gloo::barrier(connected);
    if (seal.has_value()) {
      LOG(INFO) << "trainer " << options.rank << ": the trainers' allreduce is sealed (" << seal->cipher_name()
                << ", a key of this collective's own)";
      return NewSealedRingCollective(options, std::move(context), *std::move(seal));
    }
    return std::unique_ptr<Collective>(new GlooCollective(options, std::move(context)));
  } catch (const std::exception& e) {
    return Status::Unavailable("gloo rendezvous of rank " + std::to_string(options.rank) + " of " +
                               std::to_string(options.world) + " failed: " + e.what());
  }
}

}  // namespace tessera
