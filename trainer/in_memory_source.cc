#include "trainer/in_memory_source.h"

#include <algorithm>

#include <glog/logging.h>

namespace tessera {
namespace {

class InMemorySource final : public DataSource {
 public:
  InMemorySource(InMemoryExamples examples, std::string what) : ex_(std::move(examples)), what_(std::move(what)) {}

  int64_t num_examples() const override { return ex_.size(); }
  int num_dense() const override { return ex_.num_dense; }
  const std::vector<std::string>& feature_names() const override { return ex_.feature_names; }

  Status Read(int64_t begin, int64_t count, Batch* out) override {
    if (begin < 0 || count < 0 || begin > num_examples() - count) {
      return Status::OutOfRange(what_ + " read of [" + std::to_string(begin) + ", +" + std::to_string(count) +
                                ") outside the " + std::to_string(num_examples()) + " examples");
    }
    const int64_t d = ex_.num_dense;
    out->first_example = begin;
    out->size = count;
    out->num_dense = ex_.num_dense;
    out->dense.assign(ex_.dense.begin() + begin * d, ex_.dense.begin() + (begin + count) * d);
    out->labels.assign(ex_.labels.begin() + begin, ex_.labels.begin() + begin + count);

    KeyedJaggedTensor& kjt = out->sparse;
    kjt.keys = ex_.feature_names;
    kjt.batch_size = count;
    kjt.lengths.assign(ex_.ids.size() * count, 1);
    kjt.values.resize(ex_.ids.size() * count);
    kjt.weights.clear();
    for (size_t f = 0; f < ex_.ids.size(); ++f) {
      std::copy_n(ex_.ids[f].begin() + begin, count, kjt.values.begin() + f * count);
    }
    return Status::OK();
  }

 private:
  const InMemoryExamples ex_;
  const std::string what_;
};

}  // namespace

void InMemoryExamples::KeepRange(int64_t begin, int64_t end) {
  CHECK(0 <= begin && begin <= end && end <= size()) << "[" << begin << ", " << end << ") of " << size();
  auto keep = [&](auto* v, int64_t width) {
    v->erase(v->begin() + end * width, v->end());
    v->erase(v->begin(), v->begin() + begin * width);
  };
  keep(&dense, num_dense);
  keep(&labels, 1);
  for (std::vector<int64_t>& f : ids) keep(&f, 1);
}

std::unique_ptr<DataSource> NewInMemorySource(InMemoryExamples examples, std::string what) {
  const size_t n = examples.labels.size();
  CHECK_EQ(examples.ids.size(), examples.feature_names.size());
  CHECK_EQ(examples.dense.size(), n * static_cast<size_t>(examples.num_dense));
  for (const std::vector<int64_t>& f : examples.ids) CHECK_EQ(f.size(), n);
  return std::make_unique<InMemorySource>(std::move(examples), std::move(what));
}

}  // namespace tessera
