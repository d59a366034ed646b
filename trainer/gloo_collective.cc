// Gloo allreduce with a rendezvous store served by the master over ZeroMQ.
#include <cstring>
#include <exception>
#include <thread>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <glog/logging.h>

#include "trainer/collective.h"
#include "trainer/master_store.h"

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

// gloo::rendezvous::Store over the master's store (trainer/master_store.h). Gloo's
// interface reports failure by exception; Rendezvous() below turns it into a
// Status.
class MasterStore final : public gloo::rendezvous::Store {
 public:
  MasterStore(RpcClient* client, int peer, std::chrono::milliseconds timeout)
      : client_(client), peer_(peer), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const Status st = MasterStoreSet(client_, peer_, key, data.data(), data.size(), timeout_);
    if (!st.ok()) throw gloo::IoException(st.ToString());
  }

  std::vector<char> get(const std::string& key) override {
    StatusOr<std::string> value = MasterStoreGet(client_, peer_, key, timeout_);
    if (!value.ok()) throw gloo::IoException(value.status().ToString());
    return std::vector<char>(value->begin(), value->end());
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    for (const std::string& k : keys) (void)get(k);  // a get waits for the key
  }

 private:
  RpcClient* client_;
  int peer_;
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

}  // namespace

std::unique_ptr<Collective> NewLocalCollective() { return std::make_unique<LocalCollective>(); }

StatusOr<std::unique_ptr<Collective>> NewGlooCollective(const GlooCollectiveOptions& options, RpcClient* client,
                                                        int master_peer) {
  if (options.world == 1) return NewLocalCollective();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    MasterStore store(client, master_peer, options.timeout);
    gloo::rendezvous::PrefixStore prefixed(options.prefix, store);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world);
    context->setTimeout(options.timeout);
    context->connectFullMesh(prefixed, device);
    return std::unique_ptr<Collective>(new GlooCollective(options, std::move(context)));
  } catch (const std::exception& e) {
    return Status::Unavailable(std::string("gloo rendezvous failed: ") + e.what());
  }
}

}  // namespace tessera
