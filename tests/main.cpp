// The test runner: Catch2's, after the preconditions of a libfabric run (OPTCAST_TEST_OFI,
// see worlds.hpp) or of one that needs a program (OPTCAST_TEST_NEEDS): without them it
// exits 77, which meson reports as skipped, with the reason.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <malloc.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bootstrap/redis_store.hpp"

#include "worlds.hpp"

int main(int argc, char** argv) {
  // The tests make and drop buffers of a few hundred KiB by the thousand (a world's ranks'
  // buffers per run): above glibc's mmap threshold each is mapped afresh and page-faulted
  // in, which was half of a sweep's time. Kept in the heap instead, they are reused; and
  // the heap is never trimmed, or a world of 16 ranks with 16 MiB each faulted its gigabyte
  // in afresh each time (hosts_sim_full: 54 s, 13 s untrimmed).
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);
  if (optcast::testing::ofi_run()) {
    if (!optcast::ofi::available()) {
      std::printf("skipped: optcast was built without libfabric (libfabric-dev >= 1.17 not found), or cannot load it\n");
      return 77;
    }
    for (const auto& prov : optcast::testing::ofi_providers())
      if (!optcast::testing::provider_present(prov)) {
        std::printf("skipped: libfabric provider %s is not available here (fi_info -l does not list it)\n", prov.c_str());
        return 77;
      }
  }
  // OPTCAST_TEST_NEEDS=redis: the cases that start a redis-server of their own.
  if (const char* needs = std::getenv("OPTCAST_TEST_NEEDS"); needs && std::string(needs) == "redis") {
    if (!optcast::has_redis_store()) {
      std::printf("skipped: optcast was built without the Redis store (libhiredis-dev not found)\n");
      return 77;
    }
    if (std::system("command -v redis-server > /dev/null 2>&1") != 0) {
      std::printf("skipped: redis-server is not installed (Debian: apt install redis-server)\n");
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
