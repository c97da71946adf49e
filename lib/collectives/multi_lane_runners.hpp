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

}  // namespace optcast::detail
