#include "server/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace geotrain::server {

void advise_huge_pages(void* p, size_t bytes) {
  const auto begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) / kHugePage * kHugePage;
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) / kHugePage * kHugePage;
  // Advice, not a requirement: EINVAL where the kernel has no THP leaves ordinary pages, which
  // work the same, only slower. So the result is deliberately ignored.
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

void* allocate_huge(size_t bytes) {
  if (bytes < kHugePage) return ::operator new(bytes);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  advise_huge_pages(p, rounded);
  return p;
}

void deallocate_huge(void* p, size_t bytes) {
  if (bytes < kHugePage)
    ::operator delete(p);
  else
    std::free(p);
}

}  // namespace geotrain::server
