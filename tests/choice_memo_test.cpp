// The automatic choice is remembered per thread (lib/collectives/choice.cpp): whatever
// was asked before, in whatever order, a call gets what resolve_for computes afresh for
// its arguments. The calls below go through plan_collective (the remembered path) and
// are set against resolve_for on the same arguments, over more distinct calls than it
// remembers, topologies replaced under it and models that change only one parameter.
#include <catch2/catch.hpp>

#include <optional>
#include <vector>

#include "collectives/collective_common.hpp"
#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "traff_hunold/lanes.hpp"

using namespace optcast;

namespace {

struct asked {
  collective coll;
  call_shape shape;
  loggp_params model;
};

// What resolve_for gives for a call on comms[0], the lanes built afresh from the layout.
detail::resolved afresh(communicator& c, const asked& a) {
  const bool lanes = detail::has_lanes(c);
  const auto shape = lanes ? detail::lane_shape::of(c.get_fabric().layout(), c.rank()) : std::nullopt;
  return detail::resolve_for(c.size(), c.ports(), c.options(), a.coll, {}, {c.ports(), a.shape.commutative, a.shape.order_free, lanes},
                             a.model, a.shape, shape && shape->worth_it() ? &*shape : nullptr);
}

}  // namespace

TEST_CASE("a remembered choice is the one computed afresh, over more calls than are remembered and topologies replaced",
          "[choose][local]") {
  const communicator_options defaults;
  loggp_params slow_net = defaults.model;
  slow_net.G *= 100;  // large messages cost far more: other rows win where bytes count
  loggp_params slow_start = defaults.model;
  slow_start.L *= 100;  // latency dominates: fewer rounds win
  std::vector<asked> calls;
  for (auto coll : {collective::reduce, collective::allreduce, collective::allgather, collective::reduce_scatter_block})
    for (std::size_t each : {std::size_t{8}, std::size_t{4096}, std::size_t{1} << 20, std::size_t{16} << 20})
      for (const auto& m : {defaults.model, slow_net, slow_start})
        calls.push_back({coll, {.bytes = each * 8, .largest = each, .smallest = each}, m});
  REQUIRE(calls.size() > 2 * 16);  // several times what choice.cpp remembers

  const std::vector<std::optional<topology>> layouts = {
      std::nullopt, topology{{0, 0, 1, 1, 2, 2, 3, 3}, 2}, topology{{0, 0, 0, 0, 1, 1, 1, 1}, 1},
      topology{{0, 1, 2, 3, 4, 5, 6, 7}, 1}, topology{{0, 0, 1, 1, 2, 2, 3, 3}, 2}};
  std::size_t differ = 0;
  std::optional<detail::resolved> first;
  for (const auto& layout : layouts) {
    INFO((layout ? layout->describe() : std::string("no layout")));
    local::world w(8);
    if (layout) w.set_layout(*layout);
    auto comms = communicators_of(w);
    // Twice over, the second time backwards: the second pass finds the answers it asks
    // for last remembered, and the next topology's first calls find this one's answers
    // to the same calls remembered (which must not be taken for theirs).
    for (int pass = 0; pass < 2; ++pass)
      for (std::size_t i = 0; i < calls.size(); ++i) {
        const auto& a = calls[pass == 0 ? i : calls.size() - 1 - i];
        INFO(to_string(a.coll) << " of " << a.shape.bytes << " bytes, L " << a.model.L << ", G " << a.model.G << ", pass " << pass);
        const auto planned = plan_collective(comms[0], a.coll, a.shape, {.model = a.model});
        REQUIRE(planned);
        const auto want = afresh(comms[0], a);
        CHECK(planned->alg == want.row->info.alg);
        CHECK(planned->blocks == want.blocks);
        if (!first) first = want;
        differ += want.row != first->row || want.blocks != first->blocks;
      }
  }
  // The grid asks for different answers: a memo that returned its first would fail above.
  CHECK(differ > calls.size());
}

TEST_CASE("a lane shape remembered is rebuilt when the topology or the rank changes", "[choose][local]") {
  topology t{{0, 0, 1, 1}, 1};
  const detail::lane_shape* a = detail::lane_shape::cached(&t, 1);
  REQUIRE(a);
  CHECK(a->per_host == 2);
  CHECK(a->local == 1);
  CHECK(detail::lane_shape::cached(&t, 2)->host == 1);  // another rank
  t.host_of = {0, 1, 2, 3};  // the same object, other contents
  t.rails = 2;
  const detail::lane_shape* b = detail::lane_shape::cached(&t, 2);
  REQUIRE(b);
  CHECK(b->per_host == 1);
  CHECK(b->rails == 2);
  CHECK(b->host == 2);
  t.host_of = {0, 0, 0, 1};  // hosts of different sizes: no shape
  CHECK(detail::lane_shape::cached(&t, 0) == nullptr);
  CHECK(detail::lane_shape::cached(nullptr, 0) == nullptr);
}
