// PageMemory: zeroed, aligned blocks from the kernel, unmapped when dropped.
#include "ps/page_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <vector>

namespace tessera {
namespace {

// Whether [p, p + n) is mapped: mincore fails with ENOMEM on unmapped pages.
bool Mapped(void* p, size_t n) {
  std::vector<unsigned char> pages((n + 4095) / 4096);
  return mincore(p, n, pages.data()) == 0 || errno != ENOMEM;
}

TEST(PageMemoryTest, GivesZeroedPagesAndUnmapsThemWhenDropped) {
  void* small_at = nullptr;
  void* huge_at = nullptr;
  size_t huge_size = 0;
  {
    PageMemory small = PageMemory::Map(1000, false);
    ASSERT_FALSE(small.empty());
    EXPECT_EQ(small.size(), 4096u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 4096, 0u);
    PageMemory huge = PageMemory::Map((size_t{5} << 20) + 3, true);
    ASSERT_FALSE(huge.empty());
    EXPECT_EQ(huge.size(), size_t{6} << 20);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(huge.data()) % (size_t{2} << 20), 0u);
    const auto* bytes = static_cast<const unsigned char*>(huge.data());
    for (size_t i = 0; i < huge.size(); i += 4093) ASSERT_EQ(bytes[i], 0) << i;
    static_cast<char*>(huge.data())[huge.size() - 1] = 7;  // writable to its end
    small_at = small.data();
    huge_at = huge.data();
    huge_size = huge.size();
    EXPECT_TRUE(Mapped(huge_at, huge_size));

    // A move hands the block over; the moved-from block owns nothing.
    PageMemory moved = std::move(huge);
    EXPECT_TRUE(huge.empty());
    EXPECT_EQ(moved.data(), huge_at);
    huge = std::move(small);
    EXPECT_TRUE(small.empty());
    EXPECT_EQ(huge.data(), small_at);
    EXPECT_TRUE(Mapped(huge_at, huge_size));
  }
  EXPECT_FALSE(Mapped(huge_at, huge_size));
  EXPECT_FALSE(Mapped(small_at, 4096));
}

}  // namespace
}  // namespace tessera
