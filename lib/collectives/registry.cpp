// Every algorithm optcast has: one row each (registry.hpp says what a row holds), its
// adapter from adapters.hpp.
#include "registry.hpp"
#include "adapters.hpp"
#include "row_predictions.hpp"
#include "proven_times.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "bruck_cypher_ho/fibonacci.hpp"
#include "karp/plans.hpp"
#include "bar_noy_ho/multiport.hpp"
#include "alexandrov/loggp.hpp"
#include "traff/circulant.hpp"
#include "multi_lane_runners.hpp"
#include "optcast/predict.hpp"

namespace optcast::detail {

namespace {

constexpr std::string_view traff = "Träff 2024";
constexpr std::string_view karp = "Karp et al. 1993";
constexpr std::string_view bch = "Bruck, Cypher, Ho 1992";
constexpr std::string_view bnh = "Bar-Noy, Ho 1998";
constexpr std::string_view loggp_paper = "Alexandrov et al. 1995";
constexpr std::string_view baseline = "baseline";
constexpr std::string_view traff_hunold = "Träff, Hunold 2020";

constexpr requirements any{};
constexpr requirements k_ports{.ports = 2};
constexpr requirements commutative{.commutative = true};
constexpr requirements order_free{.commutative = true, .order_free = true};
constexpr requirements lanes{.lanes = true};
constexpr requirements commutative_lanes{.commutative = true, .lanes = true};

using namespace proven;

using namespace adapters;

// ---- the table ------------------------------------------------------------------------

using C = collective;
using A = algorithm;
using M = paper_model;

const std::vector<entry>& table() {
  static const std::vector<entry> rows = {
      // Broadcast: the automatic choice's candidates in the order ties are broken.
      {{C::broadcast, A::circulant, traff, "Algorithm 1",
        "n blocks in n - 1 + ceil(log2 p) rounds on the circulant graph, any p and root", M::rounds, any, true},
       runner_of<broadcast_call>{bcast_circulant}, block_rule::broadcast_model, true,
       [](prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
         return (n - 1 + sh.q) * round_time(block_bytes(bytes, n), changing_links(m));
       },
       circulant_rounds<1>},
      {{C::broadcast, A::binomial, baseline, "binomial tree", "the whole message down a binomial tree, ceil(log2 p) rounds",
        M::rounds, any, true},
       runner_of<broadcast_call>{bcast_binomial}, block_rule::one, true,
       [](prediction_shape& sh, std::size_t bytes, int, const loggp_params& m) {
         return sh.q * round_time(static_cast<double>(bytes), m);
       },
       [](const sim::model& m, const run_shape& s) -> std::optional<proven_time> {
         if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
         return proven_time{"ceil(log2 p)", static_cast<double>(circulant::ceil_log2(s.p)), proven_time::exact};
       }},
      {{C::broadcast, A::fibonacci, bch, "Section 4",
        "n packets on d generalized Fibonacci trees (d odd, chosen per p and n), one port; Lemma 4.8's "
        "n + f_d((p-1)/d) + 2d - 2 where p >= d^2 + d + 1, lower bound n + ceil(log2 p) - 1",
        M::rounds, any, true},
       runner_of<broadcast_call>{bcast_fibonacci}, block_rule::broadcast_model, true,
       [](prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
         return sh.fibonacci_rounds(n) * round_time(block_bytes(bytes, n), changing_links(m));
       },
       [](const sim::model& m, const run_shape& s) -> std::optional<proven_time> {
         if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
         const auto lay = fibonacci::choose(s.p, s.blocks);
         if (lay.d >= 3 && s.p >= lay.d * lay.d + lay.d + 1)
           return proven_time{"n + f_d((p-1)/d) + 2d - 2, d = " + std::to_string(lay.d) + " (Lemma 4.8)",
                        static_cast<double>(fibonacci::lemma_4_8(s.p, s.blocks, lay.d))};
         return proven_time{"n + ceil(log2 p) - 1 (Lemma 2.1, a lower bound; p is below the paper's range)",
                      static_cast<double>(s.blocks + circulant::ceil_log2(s.p) - 1), proven_time::at_least};
       }},
      {{C::broadcast, A::ktree, bnh, "Section 3",
        "k ports, k spanning trees of height h; ceil(n/k) + h - 1 rounds (Theorem 6), lower bound "
        "ceil(n/k) - 1 + ceil(log_{k+1} p) (Lemma 2)",
        M::rounds, k_ports, true},
       runner_of<broadcast_call>{bcast_multiport<false>}, block_rule::broadcast_model, true,
       [](prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
         return sh.ktree_rounds(n) * round_time(block_bytes(bytes, n), changing_links(m));
       },
       [](const sim::model& m, const run_shape& s) -> std::optional<proven_time> {
         if (m.kind != sim::model_kind::rounds || m.ports < 2 || s.p < 2) return std::nullopt;
         const int h = multiport::ktree_height(s.p, m.ports);
         return proven_time{"ceil(n/k) + h - 1, h = " + std::to_string(h) + " (Theorem 6)",
                      static_cast<double>((s.blocks + m.ports - 1) / m.ports + h - 1)};
       }},
      {{C::broadcast, A::rotation, bnh, "Section 4",
        "k ports, chained broadcasting black boxes; ceil(n/k) + ceil(log_{k+1} p) rounds (Theorem 10), lower bound "
        "Lemma 3",
        M::rounds, k_ports, true},
       runner_of<broadcast_call>{bcast_multiport<true>}, block_rule::broadcast_model, true,
       [](prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
         return sh.rotation_rounds(n) * round_time(block_bytes(bytes, n), changing_links(m));
       },
       [](const sim::model& m, const run_shape& s) -> std::optional<proven_time> {
         if (m.kind != sim::model_kind::rounds || m.ports < 2 || s.p < 2) return std::nullopt;
         return proven_time{"ceil(n/k) + ceil(log_{k+1} p) (Theorem 10; Lemma 3's lower bound " +
                          std::to_string(multiport::lemma_3(s.p, s.blocks, m.ports)) + ")",
                      static_cast<double>((s.blocks + m.ports - 1) / m.ports + multiport::ceil_log(m.ports + 1, s.p))};
       }},
      {{C::broadcast, A::logp_tree, karp, "Theorem 2.1",
        "one item on the universal optimal tree B(P) for the model's L, o, g", M::logp, any, true},
       runner_of<broadcast_call>{bcast_logp_tree}, block_rule::one, true,
       [](prediction_shape& sh, std::size_t bytes, int, const loggp_params& m) { return logp::B(sh.p, lengthened(bytes, m)); },
       [](const sim::model& m, const run_shape& s) -> std::optional<proven_time> {
         if (!logp_like(m)) return std::nullopt;
         return proven_time{"B(P; L, o, g)", logp::B(s.p, {m.L, m.o, m.g}), proven_time::exact};
       }},
      {{C::broadcast, A::buffered, karp, "Section 3.5",
        "n items single-sending on block-cyclic optimal trees; B(P-1) + L + n - 1 with choosing receivers", M::postal, any, false},
       runner_of<broadcast_call>{bcast_kitem<true>}, block_rule::kitem_linear, true, nullptr,
       [](const sim::model& m, const run_shape& s) -> std::optional<proven_time> {
         if (!whole_postal(m) || s.p < 2) return std::nullopt;
         return proven_time{std::string("B(P-1) + L + n - 1") + (m.choose ? "" : ", with --choose"),
                      logp::B(s.p - 1, {m.L, 0, 1}) + m.L + s.blocks - 1, m.choose ? proven_time::exact : proven_time::reference};
       }},
      {{C::broadcast, A::single_sending, karp, "Theorem 3.7",
        "n items single-sending, each received as it arrives; the paper's bound B(P-1) + 2L + n - 2, the "
        "single-sending lower bound B(P-1) + L + n - 1",
        M::postal, any, false},
       runner_of<broadcast_call>{bcast_kitem<false>}, block_rule::kitem_linear, true, nullptr,
       [](const sim::model& m, const run_shape& s) -> std::optional<proven_time> {
         if (!whole_postal(m) || s.p < 2) return std::nullopt;
         return proven_time{"B(P-1) + 2L + n - 2", logp::B(s.p - 1, {m.L, 0, 1}) + 2 * m.L + s.blocks - 2};
       }},

      {{C::broadcast, A::ring, baseline, "pipelined ring",
        "n blocks down the chain of ranks from the root, n + p - 2 rounds; every link one steady stream", M::rounds, any, true},
       runner_of<broadcast_call>{bcast_ring}, block_rule::broadcast_model, true,
       [](prediction_shape& sh, std::size_t bytes, int n, const loggp_params& m) {
         return (n + sh.p - 2) * round_time(block_bytes(bytes, n), m);
       },
       chain_rounds},
      {{C::broadcast, A::multi_lane, traff_hunold, "Section III",
        "the root's host scatters one block to each of its n ranks, every lane broadcasts its block between the H hosts "
        "(on sub-lanes over every rail), every host allgathers its blocks; per host m / (k B) on its k rails",
        M::rounds, lanes, true},
       runner_of<broadcast_call>{run_broadcast_multi_lane}, block_rule::one, true, nullptr, nullptr, predict_multi_lane},
      // Scatter and gather (gather runs each tree backwards).
      {{C::scatter, A::split_tree, loggp_paper, "4.5-4.7",
        "A_t^k, the split tree of least LogGP time (optimal for one item per rank, Theorem 1); split_sets: Figures 9-10",
        M::loggp, any, true},
       runner_of<scatter_call>{scatter_split<false>}, block_rule::one, true, split_predicted<false>, scatter_time<A::split_tree>},
      {{C::scatter, A::binomial, loggp_paper, "4.4", "the Binomial Tree, halves at every split (Lemma 2)", M::loggp, any, false},
       runner_of<scatter_call>{scatter_split<true>}, block_rule::one, true, split_predicted<true>, scatter_time<A::binomial>},
      {{C::scatter, A::long_message, loggp_paper, "4.3", "Simple Long-Message: the root sends every rank its segment", M::loggp, any,
        false},
       runner_of<scatter_call>{scatter_root<false>}, block_rule::one, false, nullptr, scatter_time<A::long_message>},
      {{C::scatter, A::short_message, loggp_paper, "4.2", "Short-Message: one message per element", M::loggp, any, false},
       runner_of<scatter_call>{scatter_root<true>}, block_rule::one, false, nullptr, scatter_time<A::short_message>},
      {{C::scatter, A::multi_lane, traff_hunold, "Section III",
        "the root hands each rank of its host its lane's blocks, every lane scatters them between the hosts "
        "(on sub-lanes over every rail); per host (H - 1) n m / (k B); equal parts",
        M::loggp, lanes, true},
       runner_of<scatter_call>{run_rooted_multi_lane<false>}, block_rule::one, true, nullptr, nullptr, predict_multi_lane},
      {{C::gather, A::split_tree, loggp_paper, "4.5-4.7", "A_t^k reversed", M::loggp, any, true},
       runner_of<scatter_call>{gather_split<false>}, block_rule::one, true, split_predicted<false>},
      {{C::gather, A::binomial, loggp_paper, "4.4", "the Binomial Tree reversed", M::loggp, any, false},
       runner_of<scatter_call>{gather_split<true>}, block_rule::one, true, split_predicted<true>},
      {{C::gather, A::long_message, loggp_paper, "4.3", "Simple Long-Message reversed: every rank sends the root its segment",
        M::loggp, any, false},
       runner_of<scatter_call>{gather_root<false>}, block_rule::one, false},
      {{C::gather, A::short_message, loggp_paper, "4.2", "Short-Message reversed: one message per element", M::loggp, any, false},
       runner_of<scatter_call>{gather_root<true>}, block_rule::one, false},
      {{C::gather, A::multi_lane, traff_hunold, "Section III",
        "every lane gathers to the root's host, whose ranks hand the root their lane's blocks; per host (H - 1) n m / (k B); "
        "equal parts",
        M::loggp, lanes, true},
       runner_of<scatter_call>{run_rooted_multi_lane<true>}, block_rule::one, true, nullptr, nullptr, predict_multi_lane},

      // All-roots.
      // Before the circulant allgather: where that runs one block on a power of two they tie,
      // and the tie goes to the pairwise exchange (as for allreduce, DESIGN.md).
      {{C::allgather, A::recursive_doubling, baseline, "recursive doubling",
        "everything held swapped with the rank 2^k away in step k: floor(log2 p) rounds, 2 more if p is not a power of 2",
        M::rounds, any, true},
       runner_of<segments_call>{allgather_rd}, block_rule::one, true, doubling_allgather_predicted, doubling_time},
      {{C::allgather, A::circulant, traff, "Algorithm 7 (Appendix A)",
        "all p broadcasts at once, n - 1 + ceil(log2 p) rounds", M::rounds, any, true},
       runner_of<segments_call>{allgather_circulant}, block_rule::circulant_all_roots, true, circulant_predicted<CC::all_roots>,
       circulant_rounds<1>},
      {{C::allgather, A::staggered, karp, "Section 4.1",
        "rank i sends to i+1, ..., i+P-1 one every g; L + 2o + g(n(P-1)-1) for n items", M::logp, any, false},
       runner_of<segments_call>{allgather_staggered}, block_rule::circulant_all_roots, true, nullptr, staggered_time},
      {{C::allgather, A::ring, baseline, "ring",
        "rank r sends to r + 1 only: p - 1 steps of n blocks", M::rounds, any, true},
       runner_of<segments_call>{allgather_ring}, block_rule::given_or_one, false, ring_predicted<CC::all_roots>, ring_rounds<1>},
      {{C::allgather, A::multi_lane, traff_hunold, "Section III",
        "every lane allgathers its ranks' segments between the hosts, then every host exchanges what its lanes "
        "gathered; per host (H - 1) n m / (k B)",
        M::rounds, lanes, true},
       runner_of<segments_call>{run_allgather_multi_lane}, block_rule::one, true, nullptr, nullptr, predict_multi_lane},
      {{C::allgatherv, A::circulant, traff, "Algorithm 7, Observation 1.2",
        "irregular counts; empty contributions skipped; n - 1 + ceil(log2 p) rounds", M::rounds, any, true},
       runner_of<segments_call>{allgather_circulant}, block_rule::circulant_all_roots, true, circulant_predicted<CC::all_roots>,
       circulant_rounds<1>},
      {{C::allgatherv, A::staggered, karp, "Section 4.1", "the staggered schedule with irregular counts", M::logp, any, false},
       runner_of<segments_call>{allgather_staggered}, block_rule::circulant_all_roots, true},
      {{C::allgatherv, A::ring, baseline, "ring", "irregular counts; empty blocks skipped; at most (p - 1) n rounds",
        M::rounds, any, true},
       runner_of<segments_call>{allgather_ring}, block_rule::given_or_one, false, ring_predicted<CC::all_roots>, ring_rounds<1>},
      {{C::alltoall, A::staggered, karp, "Section 4.1",
        "all-to-all personalized on the staggered schedule, L + 2o + g(n(P-1)-1) for n items per pair", M::logp, any, true},
       runner_of<segments_call>{alltoall_staggered}, block_rule::given_or_one, false, nullptr, staggered_time},

      // Reductions: the commutative algorithms first; the rank-ordered tree serves any
      // associative operator.
      {{C::reduce, A::circulant, traff, "Observation 1.3",
        "Algorithm 1 backwards, n - 1 + ceil(log2 p) rounds; commutative operators", M::rounds, commutative, true},
       runner_of<reduction_call>{reduce_circ}, block_rule::circulant_reduce, true, circulant_predicted<CC::reduce>, circulant_rounds<1>},
      {{C::reduce, A::binomial, baseline, "rank-ordered binomial tree",
        "any associative operator: ceil(log2 p) rounds, one more if the root is not rank 0", M::rounds, any, true},
       runner_of<reduction_call>{reduce_ord}, block_rule::one, true, nullptr,
       [](const sim::model& m, const run_shape& s) -> std::optional<proven_time> {
         if (m.kind != sim::model_kind::rounds || s.p < 2) return std::nullopt;
         return proven_time{"ceil(log2 p), + 1 if the root is not rank 0",
                            static_cast<double>(circulant::ceil_log2(s.p) + (s.root != 0 ? 1 : 0)), proven_time::exact};
       }},
      {{C::reduce, A::ring, baseline, "pipelined ring",
        "the ring broadcast backwards, n + p - 2 rounds; commutative operators", M::rounds, commutative, true},
       runner_of<reduction_call>{reduce_rng}, block_rule::ring_reduce, true, ring_predicted<CC::reduce>, chain_rounds},
      {{C::reduce, A::multi_lane, traff_hunold, "Section III",
        "node-local reduce-scatter, every lane reduces its block to the root's host, the root gathers the blocks; "
        "commutative operators",
        M::rounds, commutative_lanes, true},
       runner_of<reduction_call>{run_reduce_multi_lane}, block_rule::one, true, nullptr, nullptr, predict_multi_lane},
      // Before the circulant pair: where that runs one block on a power of two they tie, and
      // the pairwise exchange was faster on the emulated hosts (DESIGN.md).
      {{C::allreduce, A::recursive_halving, baseline, "Rabenseifner's",
        "reduce_scatter by recursive halving, allgather by recursive doubling: 2 (p - 1) / p of the vector in "
        "2 floor(log2 p) pairwise exchanges, 2 more rounds if p is not a power of 2; the same bits everywhere; "
        "commutative operators",
        M::rounds, commutative, true},
       runner_of<reduction_call>{in_place<algorithms::allreduce_recursive_halving>}, block_rule::one, true, halving_predicted, halving_time},
      {{C::allreduce, A::circulant, traff, "Observation 1.4",
        "reduce_scatter then allgather, 2 (n - 1 + ceil(log2 p)) rounds; commutative operators", M::rounds, commutative, true},
       runner_of<reduction_call>{allreduce_circ}, block_rule::circulant_allreduce, true, circulant_predicted<CC::allreduce>,
       circulant_rounds<2>},
      {{C::allreduce, A::combining, karp, "Section 4.2",
        "combining broadcast, P overlapping reductions: B(P) steps for P = P(T), a searched chain or a fold otherwise; "
        "operators whose result does not depend on the order",
        M::postal, order_free, true},
       runner_of<reduction_call>{allreduce_comb}, block_rule::one, true, combining_predicted,
       combining_time},
      {{C::allreduce, A::binomial, baseline, "rank-ordered binomial tree",
        "any associative operator: the ordered tree to rank 0, then Träff's circulant broadcast", M::rounds, any, true},
       runner_of<reduction_call>{allreduce_ordered}, block_rule::circulant_reduce, true},
      {{C::allreduce, A::ring, baseline, "ring",
        "reduce_scatter then allgather on the ring, 2 (p - 1) n rounds; commutative operators", M::rounds, commutative, true},
       runner_of<reduction_call>{allreduce_rng}, block_rule::ring_allreduce, true, ring_predicted<CC::allreduce>, ring_rounds<2>},
      // A candidate for small vectors: half the circulant pair's rounds (4 emulated hosts,
      // 8 B: 288 against 393 us, Open MPI's recursive doubling 237 us); from some KiB up
      // it moves log2 p whole vectors where the pair moves two, and the prediction says so
      // (64 KiB: 851 against 531 us), 2026-11-23.
      {{C::allreduce, A::recursive_doubling, baseline, "recursive doubling",
        "the whole vector swapped and combined with the rank 2^k away in step k: floor(log2 p) rounds, 2 more if p is "
        "not a power of 2; the same bits everywhere; commutative operators",
        M::rounds, commutative, true},
       runner_of<reduction_call>{in_place<algorithms::allreduce_recursive_doubling>}, block_rule::one, true, doubling_predicted, doubling_time},
      {{C::allreduce, A::multi_lane, traff_hunold, "Section III",
        "node-local reduce-scatter, every lane allreduces its block between the hosts, node-local allgather; "
        "per host 2 (H - 1) / H m / (k B); commutative operators",
        M::rounds, commutative_lanes, true},
       runner_of<reduction_call>{run_allreduce_multi_lane}, block_rule::one, true, nullptr, nullptr, predict_multi_lane},
      {{C::reduce_scatter_block, A::circulant, traff, "Observation 1.4",
        "Algorithm 7 backwards, n - 1 + ceil(log2 p) rounds; commutative operators", M::rounds, commutative, true},
       runner_of<segments_call>{reduce_scatter_circ}, block_rule::circulant_all_roots, true, circulant_predicted<CC::all_roots>,
       circulant_rounds<1>},
      {{C::reduce_scatter_block, A::binomial, baseline, "rank-ordered binomial tree",
        "any associative operator: the rank-ordered allreduce, then each rank's part", M::rounds, any, true},
       runner_of<segments_call>{reduce_scatter_ord}, block_rule::circulant_reduce, true},
      {{C::reduce_scatter_block, A::ring, baseline, "ring",
        "the ring all-gather backwards, (p - 1) n rounds; commutative operators", M::rounds, commutative, true},
       runner_of<segments_call>{reduce_scatter_rng}, block_rule::given_or_one, false, ring_predicted<CC::all_roots>, ring_rounds<1>},
      {{C::reduce_scatter_block, A::multi_lane, traff_hunold, "Section III",
        "every rank combines its host's blocks of its lane (node-local), every lane reduce-scatters them between the "
        "hosts; per host (H - 1) / H m / (k B); commutative operators, equal parts",
        M::rounds, commutative_lanes, true},
       runner_of<segments_call>{run_reduce_scatter_multi_lane}, block_rule::one, true, nullptr, nullptr, predict_multi_lane},
      {{C::reduce_scatter, A::circulant, traff, "Observation 1.4",
        "Algorithm 7 backwards with irregular counts; commutative operators", M::rounds, commutative, true},
       runner_of<segments_call>{reduce_scatter_circ}, block_rule::circulant_all_roots, true, circulant_predicted<CC::all_roots>,
       circulant_rounds<1>},
      {{C::reduce_scatter, A::binomial, baseline, "rank-ordered binomial tree",
        "any associative operator: the rank-ordered allreduce, then each rank's part", M::rounds, any, true},
       runner_of<segments_call>{reduce_scatter_ord}, block_rule::circulant_reduce, true},
      {{C::reduce_scatter, A::ring, baseline, "ring",
        "the ring all-gather backwards with irregular counts, at most (p - 1) n rounds; commutative operators", M::rounds,
        commutative, true},
       runner_of<segments_call>{reduce_scatter_rng}, block_rule::given_or_one, false, ring_predicted<CC::all_roots>, ring_rounds<1>},
      {{C::reduce_scatter, A::multi_lane, traff_hunold, "Section III",
        "every rank combines its host's blocks of its lane (node-local), every lane reduce-scatters them between the "
        "hosts; per host (H - 1) / H m / (k B); commutative operators, equal parts",
        M::rounds, commutative_lanes, true},
       runner_of<segments_call>{run_reduce_scatter_multi_lane}, block_rule::one, true, nullptr, nullptr, predict_multi_lane},

      {{C::summation, A::logp_tree, karp, "Section 5",
        "n operands summed in least time with unit-time additions: the broadcast tree for L + 1 reversed; any "
        "associative operator",
        M::logp, any, true},
       runner_of<summation_call>{summation_logp}, block_rule::one, true, nullptr,
       summation_time},
      // Before dissemination: where both take the same rounds (p a power of two, one port)
      // the tie goes to the pairwise exchange, faster on emulated hosts (Open MPI's
      // barriers on 8 hosts: recursive doubling 706 us, Bruck's dissemination 965).
      {{C::barrier, A::recursive_doubling, baseline, "recursive doubling",
        "in round i every rank swaps an empty message with the rank 2^i away: log2 p rounds for p a power of 2, "
        "floor(log2 p) + 2 otherwise",
        M::rounds, any, true},
       runner_of<barrier_call>{[](barrier_call c) { return algorithms::barrier_recursive_doubling(*c.f, c.seq); }}, block_rule::one,
       false, doubling_barrier_predicted, doubling_time},
      {{C::barrier, A::dissemination, baseline, "dissemination",
        "in round i every rank signals the k ranks j (k+1)^i ahead (j = 1..k) and hears from the k behind: "
        "ceil(log_{k+1} p) rounds of empty messages, the fewest a barrier can take",
        M::rounds, any, true},
       runner_of<barrier_call>{[](barrier_call c) { return algorithms::barrier_dissemination(*c.f, c.seq); }}, block_rule::one, false,
       dissemination_predicted, dissemination_time},
      {{C::stream, A::continuous, karp, "Sections 3.1-3.3",
        "continuous broadcast (broadcast_stream): block-cyclic words give every item the delay L + B(P-1), else "
        "windows of the Theorem 3.7 plan",
        M::postal, any, true},
       std::monostate{}, block_rule::one, true},
  };
  return rows;
}

}  // namespace

std::span<const entry> entries() noexcept { return table(); }

const entry* find_entry(collective coll, algorithm alg) noexcept {
  for (const auto& e : table())
    if (e.info.coll == coll && e.info.alg == alg) return &e;
  return nullptr;
}

}  // namespace optcast::detail
