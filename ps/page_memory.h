// PageMemory: a block mapped straight from the kernel (anonymous mmap) for
// large, long-lived memory such as a row store's slabs. Unmapped when
// destroyed, so it goes back to the system at once whatever malloc's
// thresholds are: a server that drops or reloads its shards keeps none of
// the old rows' memory, while the short-lived request buffers stay with
// malloc, whose dynamic mmap threshold lets it reuse them without a page
// fault per request.
#pragma once

#include <malloc.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace tessera {

class PageMemory {
 public:
  PageMemory() = default;
  // `bytes` (rounded up to whole pages) of zeroed memory, or an empty block
  // when the system has none. huge_pages: aligned to 2 MiB and marked for
  // transparent huge pages (a hint the kernel may refuse).
  static PageMemory Map(size_t bytes, bool huge_pages) {
    constexpr size_t kPage = 4096, kHuge = size_t{2} << 20;
    const size_t align = huge_pages ? kHuge : kPage;
    const size_t size = (bytes + align - 1) / align * align;
    const size_t reserve = huge_pages ? size + kHuge : size;
    void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return PageMemory();
    char* base = static_cast<char*>(p);
    if (huge_pages) {
      // Keep the 2 MiB-aligned part; give back the rest at either end.
      char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) / kHuge * kHuge);
      if (aligned > base) ::munmap(base, aligned - base);
      const size_t tail = (base + reserve) - (aligned + size);
      if (tail > 0) ::munmap(aligned + size, tail);
      base = aligned;
      ::madvise(base, size, MADV_HUGEPAGE);
    }
    return PageMemory(base, size);
  }

  PageMemory(PageMemory&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  PageMemory& operator=(PageMemory&& o) noexcept {
    if (this != &o) {
      Release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  PageMemory(const PageMemory&) = delete;
  PageMemory& operator=(const PageMemory&) = delete;
  ~PageMemory() { Release(); }

  void* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }

 private:
  PageMemory(void* data, size_t size) : data_(data), size_(size) {}
  void Release() {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }

  void* data_ = nullptr;
  size_t size_ = 0;
};

// Hands malloc's free memory back to the system. malloc keeps what a server
// frees for its next requests, which is what a request wants; after dropping
// or reloading shards (a rollback, a change of servers) or writing a
// snapshot, what it keeps is the size of the old rows' bookkeeping and
// buffers: without this, +30% RSS per recovery in bench/soak.sh. Costs a
// walk over malloc's free lists: for those rare moments only.
inline void ReturnFreedHeapMemory() { malloc_trim(0); }

}  // namespace tessera
