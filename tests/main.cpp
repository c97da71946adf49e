// The test runner: Catch2's, after the preconditions of a libfabric run (OPTCAST_TEST_OFI,
// see worlds.hpp): without the providers it exits 77, which meson reports as skipped,
// with the reason.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "worlds.hpp"

int main(int argc, char** argv) {
  if (optcast::testing::ofi_run()) {
    if (!optcast::ofi::available()) {
      std::printf("skipped: optcast was built without libfabric (libfabric-dev >= 1.17 not found)\n");
      return 77;
    }
    for (const auto& prov : optcast::testing::ofi_providers())
      if (!optcast::testing::provider_present(prov)) {
        std::printf("skipped: libfabric provider %s is not available here (fi_info -l does not list it)\n", prov.c_str());
        return 77;
      }
  }
  return Catch::Session().run(argc, argv);
}
