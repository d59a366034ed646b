// DedupIdsCuda against the CPU IdDeduper: the same unique ids in the same
// (first-seen) order and the same inverse, element for element, on fresh
// random ids with many duplicates, the extremes of int64 (-1 is the device
// table's empty marker, handled apart) and the edge sizes.
#include "kernels/cuda/dedup_cuda.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/test_util_cuda.h"
#include "kernels/dedup.h"

namespace tessera::kernels {
namespace {

class DedupCudaTest : public CudaTest {
 protected:
  void Check(const std::vector<int64_t>& ids) {
    std::vector<int64_t> want_unique;
    std::vector<int32_t> want_inverse;
    IdDeduper cpu;
    cpu.Run(ids, &want_unique, &want_inverse);

    const int64_t n = static_cast<int64_t>(ids.size());
    DeviceBuffer d_ids = ToDevice(ids);
    DeviceBuffer d_unique = PoisonedDevice<int64_t>(n + 1);
    DeviceBuffer d_inverse = PoisonedDevice<int32_t>(n + 1);
    DeviceBuffer d_count = PoisonedDevice<int32_t>(1);
    const Status s = DedupIdsCuda(d_ids.as<int64_t>(), n, d_unique.as<int64_t>(), d_inverse.as<int32_t>(),
                                  d_count.as<int32_t>(), &scratch_, stream_);
    ASSERT_TRUE(s.ok()) << s;
    Sync();
    const int32_t count = ToHost<int32_t>(d_count, 1)[0];
    ASSERT_EQ(count, static_cast<int32_t>(want_unique.size()));
    std::vector<int64_t> unique = ToHost<int64_t>(d_unique, n + 1);
    std::vector<int32_t> inverse = ToHost<int32_t>(d_inverse, n + 1);
    EXPECT_EQ(unique[count], -1) << "unique written past its count";  // still poison (all ones)
    EXPECT_EQ(inverse[n], -1) << "inverse written past n";
    unique.resize(count);
    inverse.resize(n);
    EXPECT_EQ(unique, want_unique);
    EXPECT_EQ(inverse, want_inverse);
  }

  DeviceBuffer scratch_;
  const uint64_t seed_ = std::random_device{}();
  std::mt19937_64 rng_{seed_};
};

TEST_F(DedupCudaTest, RandomIdsWithManyDuplicates) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  for (int64_t n : {1000, 100000, 1000003}) {
    for (int64_t range : {int64_t{10}, n / 3, int64_t{1} << 40}) {
      SCOPED_TRACE(testing::Message() << "n " << n << ", ids in [0, " << range << ")");
      std::uniform_int_distribution<int64_t> id(0, range - 1);
      std::vector<int64_t> ids(n);
      for (int64_t& x : ids) x = id(rng_);
      Check(ids);
    }
  }
}

TEST_F(DedupCudaTest, ExtremeValuesAndTheEmptyMarker) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  const int64_t special[] = {-1, 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), -2, 1};
  std::uniform_int_distribution<int> pick(0, 5);
  std::uniform_int_distribution<int64_t> any(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  std::vector<int64_t> ids;
  for (int i = 0; i < 50000; ++i) ids.push_back(i % 3 == 0 ? any(rng_) : special[pick(rng_)]);
  Check(ids);
  Check({-1});
  Check({-1, -1, 5, -1});
}

TEST_F(DedupCudaTest, EdgeSizes) {
  Check({});
  Check({42});
  Check(std::vector<int64_t>(70000, 7));  // all the same
  std::vector<int64_t> distinct(70000);
  for (size_t i = 0; i < distinct.size(); ++i) distinct[i] = static_cast<int64_t>(distinct.size() - i) * 1000;
  Check(distinct);  // all different
}

TEST_F(DedupCudaTest, ScratchIsReusedAcrossSizes) {
  std::uniform_int_distribution<int64_t> id(0, 500);
  for (int64_t n : {100000, 10, 5000, 200000}) {
    std::vector<int64_t> ids(n);
    for (int64_t& x : ids) x = id(rng_);
    Check(ids);
  }
}

}  // namespace
}  // namespace tessera::kernels
