// The LogGP predictions of the collectives other than the broadcast (whose rules are the
// registry's rows): plain formulas of the model, which the registry's rows and the
// automatic choice (choose.hpp, where each rule is written out) both use.
#pragma once

#include <cstddef>

#include "optcast/fabric.hpp"
#include "optcast/logp.hpp"

namespace optcast {

// Scatter (and gather) of `part` bytes to every rank by Alexandrov et al.'s A_t^k
// (split_tree, Sections 4.5-4.7): t^k(p), the optimal split recurrence under m.
double predict_scatter(int p, std::size_t part, const loggp_params& m);

// Träff's other circulant collectives and the pipelined ring, with `blocks` blocks
// (choose.hpp gives both rules).
enum class circulant_collective { reduce, all_roots, allreduce };
double predict_circulant(circulant_collective what, int p, std::size_t bytes, std::size_t largest, std::size_t smallest,
                         int blocks, const loggp_params& m);
double predict_ring(circulant_collective what, int p, std::size_t bytes, std::size_t largest, std::size_t smallest,
                    int blocks, const loggp_params& m);

// Karp et al.'s combining broadcast as an allreduce (choose.hpp): a message of b bytes is
// a LogP message with L and g lengthened by (b - 1) G.
logp::params combining_params(std::size_t bytes, const loggp_params& m);
double predict_combining(int p, std::size_t bytes, const loggp_params& m);

}  // namespace optcast
