// The public face of the registry (optcast/algorithm.hpp, optcast/bounds.hpp): names,
// parsing, the rows as algorithm_info, refusals, and the proven times. The rows
// themselves are in registry.cpp.
#include "optcast/algorithm.hpp"

#include <vector>

#include "bar_noy_ho/multiport.hpp"
#include "registry.hpp"

namespace optcast {

std::optional<proven_time> proven(collective coll, algorithm alg, const sim::model& m, const run_shape& s) {
  const auto* e = detail::find_entry(coll, alg);
  return e && e->proves ? e->proves(m, s) : std::nullopt;
}

std::optional<proven_time> lower_bound(collective coll, const sim::model& m, const run_shape& s) {
  if (coll != collective::broadcast || m.kind != sim::model_kind::rounds || s.p < 1 || s.blocks < 1) return std::nullopt;
  return proven_time{m.ports == 1 ? "n - 1 + ceil(log2 p) (Bruck-Cypher-Ho, Lemma 2.1)" : "Bar-Noy-Ho, Lemma 3",
                     static_cast<double>(multiport::lemma_3(s.p, s.blocks, m.ports)), proven_time::at_least};
}

std::optional<proven_time> hosts_bound(collective coll, const sim::model& m, const run_shape& s) {
  if (m.kind != sim::model_kind::loggp || m.G <= 0 || s.per_host < 1 || s.rails < 1 || s.p % s.per_host) return std::nullopt;
  const double H = s.p / s.per_host, n = s.per_host, k = s.rails, b = static_cast<double>(s.bytes);
  if (H < 2 || (n == 1 && k == 1)) return std::nullopt;
  double carried = 0;  // bytes through one host's rails
  std::string what;
  switch (coll) {
    case collective::broadcast:
    case collective::reduce: carried = b, what = "m G / k"; break;
    case collective::allreduce: carried = 2 * (H - 1) / H * b, what = "2 (H - 1) / H m G / k"; break;
    case collective::reduce_scatter:
    case collective::reduce_scatter_block: carried = (H - 1) / H * b, what = "(H - 1) / H m G / k"; break;
    case collective::allgather:
    case collective::scatter:
    case collective::gather: carried = (H - 1) * n * b, what = "(H - 1) n m G / k"; break;
    default: return std::nullopt;
  }
  return proven_time{"a host's rails carry " + what, carried * m.G / k, proven_time::reference};
}

namespace {

constexpr std::pair<algorithm, std::string_view> algorithm_name_table[] = {
    {algorithm::automatic, "automatic"},
    {algorithm::circulant, "circulant"},
    {algorithm::binomial, "binomial"},
    {algorithm::logp_tree, "logp_tree"},
    {algorithm::staggered, "staggered"},
    {algorithm::combining, "combining"},
    {algorithm::buffered, "buffered"},
    {algorithm::single_sending, "single_sending"},
    {algorithm::fibonacci, "fibonacci"},
    {algorithm::ktree, "ktree"},
    {algorithm::rotation, "rotation"},
    {algorithm::short_message, "short_message"},
    {algorithm::long_message, "long_message"},
    {algorithm::split_tree, "split_tree"},
    {algorithm::continuous, "continuous"},
    {algorithm::ring, "ring"},
    {algorithm::recursive_doubling, "recursive_doubling"},
    {algorithm::multi_lane, "multi_lane"},
    {algorithm::dissemination, "dissemination"},
    {algorithm::recursive_halving, "recursive_halving"},
};
constexpr std::pair<collective, std::string_view> collective_name_table[] = {
    {collective::broadcast, "broadcast"},
    {collective::scatter, "scatter"},
    {collective::gather, "gather"},
    {collective::allgather, "allgather"},
    {collective::allgatherv, "allgatherv"},
    {collective::alltoall, "alltoall"},
    {collective::reduce, "reduce"},
    {collective::allreduce, "allreduce"},
    {collective::reduce_scatter_block, "reduce_scatter_block"},
    {collective::reduce_scatter, "reduce_scatter"},
    {collective::summation, "summation"},
    {collective::stream, "stream"},
    {collective::barrier, "barrier"},
};

template <class E, std::size_t N>
std::string_view name_of(const std::pair<E, std::string_view> (&names)[N], E v) noexcept {
  for (const auto& [e, name] : names)
    if (e == v) return name;
  return "?";
}
template <class E, std::size_t N>
result<E> parse(const std::pair<E, std::string_view> (&names)[N], std::string_view s) {
  for (const auto& [e, name] : names)
    if (name == s) return e;
  return fail(errc::invalid_argument);
}

}  // namespace

std::string_view to_string(algorithm a) noexcept { return name_of(algorithm_name_table, a); }
std::string_view to_string(collective c) noexcept { return name_of(collective_name_table, c); }
result<algorithm> parse_algorithm(std::string_view name) { return parse(algorithm_name_table, name); }
result<collective> parse_collective(std::string_view name) { return parse(collective_name_table, name); }

std::span<const algorithm_info> registry() noexcept {
  static const std::vector<algorithm_info> infos = [] {
    std::vector<algorithm_info> v;
    for (const auto& e : detail::entries()) v.push_back(e.info);
    return v;
  }();
  return infos;
}

const algorithm_info* find(collective coll, algorithm alg) noexcept {
  const auto* e = detail::find_entry(coll, alg);
  return e ? &registry()[static_cast<std::size_t>(e - detail::entries().data())] : nullptr;
}

std::string algorithm_names(collective coll) {
  std::vector<std::string_view> names;
  for (const auto& a : registry())
    if (a.coll == coll) names.push_back(to_string(a.alg));
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i)
    s += std::string(i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(names[i]);
  return s;
}

std::string_view to_string(paper_model m) noexcept {
  switch (m) {
    case paper_model::rounds: return "rounds";
    case paper_model::postal: return "postal";
    case paper_model::logp: return "LogP";
    case paper_model::loggp: return "LogGP";
  }
  return "?";
}

std::string collective_names() {
  std::string s;
  for (const auto& [c, name] : collective_name_table) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

std::string refusal(collective coll, algorithm alg, const call_traits& t) {
  // Called on every call and for every candidate of the automatic choice: the text is
  // built only when something is refused.
  if (alg == algorithm::automatic) return {};
  const auto* a = find(coll, alg);
  if (a && t.ports >= a->needs.ports && (!a->needs.lanes || t.lanes) && (!a->needs.commutative || t.commutative)) return {};
  const std::string what(to_string(coll));
  if (!a)
    return what + ": " + std::string(to_string(alg)) + " is not an algorithm of " + what + "; the algorithms are " +
           algorithm_names(coll);
  const std::string name(to_string(alg));
  if (t.ports < a->needs.ports)
    return what + ": " + name + " is a k-port algorithm (" + std::string(a->paper) + ") and needs at least " +
           std::to_string(a->needs.ports) + " ports; the communicator gives " + std::to_string(t.ports) +
           " (make it with more ports: OPTCAST_PORTS, or the world's ports argument)";
  if (a->needs.lanes && !t.lanes)
    return what + ": " + name + " decomposes the job into lanes (" + std::string(a->paper) +
           ") and needs hosts of several ranks or several rails, every host with the same number of ranks; this "
           "communicator's topology has none";
  return what + ": " + name + " combines operands out of rank order; the operator is non-commutative (use "
         "algorithm::automatic or binomial, the rank-ordered tree)";
}

}  // namespace optcast
