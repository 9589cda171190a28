// Transparent huge pages for the server's shard-sized buffers (values, momentum, the values last
// sent to each region, scratch, payload buffers).
//
// Why: every push and pull streams over several such buffers, and with 4 KiB pages the streams
// of a 16 MiB shard cross a page - and a TLB miss, and a stop of the hardware prefetcher - every
// 4 KiB. Measured on the development machine, the fp32 downlink pass over a 16 MiB shard takes
// 1.4 ms on 2 MiB pages against 1.7-2.1 ms on 4 KiB pages. Debian's default THP mode is
// "madvise", so a buffer gets huge pages only when it asks for them before its pages are touched.
//
// HugePageAllocator hands out blocks of 2 MiB or more aligned to 2 MiB and advised
// MADV_HUGEPAGE; smaller ones come from operator new. Stateless, thread-safe. Where THP is off
// the advice is ignored and the buffers are ordinary memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace geotrain::server {

inline constexpr size_t kHugePage = size_t{2} << 20;

// Asks for huge pages on the whole 2 MiB pages inside [p, p + bytes): best effort, for buffers
// allocated elsewhere (a std::vector<std::byte> payload) before they are first written.
void advise_huge_pages(void* p, size_t bytes);

void* allocate_huge(size_t bytes);
void deallocate_huge(void* p, size_t bytes);

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(allocate_huge(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) { deallocate_huge(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

// A shard-sized float buffer.
using ShardBuffer = std::vector<float, HugePageAllocator<float>>;

}  // namespace geotrain::server
