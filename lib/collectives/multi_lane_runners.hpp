// The registry's adapters for the multi-lane rows (lib/traff_hunold): the job's topology
// into lanes, and each lane's inter-node collective chosen as the automatic choice would
// choose it for the lane's H ranks.
#pragma once

#include "registry.hpp"

namespace optcast::detail {

task<result<void>> run_broadcast_multi_lane(broadcast_call c);
task<result<void>> run_reduce_multi_lane(reduction_call c);
task<result<void>> run_allreduce_multi_lane(reduction_call c);
task<result<void>> run_allgather_multi_lane(segments_call c);
task<result<void>> run_reduce_scatter_multi_lane(segments_call c);
// Scatter (Gather false) and gather, equal parts.
template <bool Gather>
task<result<void>> run_rooted_multi_lane(scatter_call c);

// The automatic choice on a topology with lanes (resolve_for, plan_broadcast).
// What a one-lane (flat) algorithm sees of the network there: every rank of a host sends
// through the same rail, so G is the ranks per host times the rail's.
loggp_params shared_rail(const loggp_params& m, const lane_shape& s);
// A multi-lane collective's time: the lanes' inter-node collective on H ranks, each lane
// with 1 / (n c) of the data and its rail shared by n c / k lanes, as the automatic choice
// would run it (the per-message overheads o and g paid c times: a rank's c sub-lanes share
// its CPU), plus the node-local phases on the host link (m.within_host(): each rank's
// block to or from every other rank of its host, twice; allgather once per host) and, for
// reductions, the node-local combining. tests/hosts_sim_test.cpp holds it to the
// simulator's two-level timing.
double predict_multi_lane(collective coll, const lane_shape& s, const call_shape& shape, const loggp_params& m,
                          const call_traits& t);

}  // namespace optcast::detail
