// The barrier's entry point: the call's checks and signature, then its round loop
// (baseline/dissemination.cpp) under the call's deadline.
#include "collective_common.hpp"
#include "registry.hpp"

namespace optcast {

task<result<void>> barrier(communicator& c, collective_options opts) {
  detail::call_start call(c, collective::barrier, opts);
  if (!call.ok()) co_return call.early;
  const auto traits = call.traits();
  if (!call.accepts(traits)) co_return call.early;
  // The model tells dissemination from recursive doubling by their rounds (k ports, p
  // not a power of two); where they tie, the registry's order decides.
  const auto m = call.model();
  if (!m) co_return call.early;
  const auto [row, n] = call.resolve(traits, *m, {});
  (void)n;
  co_return co_await call.run(row->runner_for<detail::barrier_call>()({&c.get_fabric(), call.seq}));
}

}  // namespace optcast
