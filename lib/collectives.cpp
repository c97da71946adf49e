#include "optcast/collectives.hpp"

#include <algorithm>
#include <cmath>

#include "algorithms.hpp"
#include "optcast/choose.hpp"
#include "optcast/fibonacci.hpp"
#include "optcast/log.hpp"
#include "optcast/multiport.hpp"
#include "collective_common.hpp"
#include "optcast/schedule.hpp"

namespace optcast {

std::string_view to_string(algorithm a) noexcept {
  switch (a) {
    case algorithm::automatic: return "automatic";
    case algorithm::circulant: return "circulant";
    case algorithm::binomial: return "binomial";
    case algorithm::logp_tree: return "logp_tree";
    case algorithm::staggered: return "staggered";
    case algorithm::combining: return "combining";
    case algorithm::buffered: return "buffered";
    case algorithm::single_sending: return "single_sending";
    case algorithm::fibonacci: return "fibonacci";
    case algorithm::ktree: return "ktree";
    case algorithm::rotation: return "rotation";
    case algorithm::short_message: return "short_message";
    case algorithm::long_message: return "long_message";
    case algorithm::split_tree: return "split_tree";
  }
  return "?";
}

result<algorithm> parse_algorithm(std::string_view name) {
  for (auto a : {algorithm::automatic, algorithm::circulant, algorithm::binomial, algorithm::logp_tree,
                 algorithm::staggered, algorithm::combining, algorithm::buffered,
                 algorithm::single_sending, algorithm::fibonacci,
                 algorithm::ktree, algorithm::rotation, algorithm::short_message, algorithm::long_message,
                 algorithm::split_tree})
    if (name == to_string(a)) return a;
  return fail(errc::invalid_argument);
}

int automatic_block_count(std::size_t bytes, int p, const communicator_options& o) noexcept {
  const int q = circulant::ceil_log2(std::max(p, 1));
  if (q <= 1 || bytes == 0) return 1;
  const double n = std::sqrt((q - 1) * o.cost.beta_s_per_byte * static_cast<double>(bytes) /
                             o.cost.alpha_s);
  const double most = std::max<double>(1, static_cast<double>(bytes / std::max<std::size_t>(o.min_block_bytes, 1)));
  return static_cast<int>(std::clamp(std::round(n), 1.0, std::min(most, 1e6)));
}


result<broadcast_choice> plan_broadcast(communicator& c, std::size_t bytes, const broadcast_options& opts, std::string* why) {
  std::string w;
  const auto refused = [&](std::string text) -> result<broadcast_choice> {
    if (why) *why = std::move(text);
    return fail(errc::invalid_argument);
  };
  if (opts.blocks < 0) return refused("broadcast: blocks must not be negative");
  const auto model = detail::model_for(c, opts, "broadcast", w);
  if (!model) return refused(w);
  algorithm alg = opts.alg == algorithm::automatic ? c.options().broadcast_algorithm : opts.alg;
  if (alg == algorithm::staggered || alg == algorithm::combining || alg == algorithm::short_message ||
      alg == algorithm::long_message || alg == algorithm::split_tree)
    return refused("broadcast: the algorithms are circulant, binomial, logp_tree, buffered, single_sending, fibonacci, "
                   "ktree and rotation");
  if (c.ports() > c.get_fabric().ports())
    return refused("broadcast: the communicator asks for " + std::to_string(c.ports()) + " ports, the " +
                   std::string(c.get_fabric().name()) + " fabric has " + std::to_string(c.get_fabric().ports()));
  if ((alg == algorithm::ktree || alg == algorithm::rotation) && c.ports() < 2)
    return refused("broadcast: " + std::string(to_string(alg)) +
                   " is a k-port algorithm (Bar-Noy and Ho) and needs at least 2 ports; the " +
                   std::string(c.get_fabric().name()) + " fabric gives " + std::to_string(c.ports()) +
                   " (make it with more ports: OPTCAST_PORTS, or the world's ports argument)");
  // optcast/choose.hpp: every candidate's LogGP prediction with its best block count.
  auto ch = choose_broadcast(c.size(), bytes, *model, std::min(c.ports(), c.get_fabric().ports()), c.options().min_block_bytes,
                             opts.blocks);
  if (alg == algorithm::automatic) return ch;
  // A fixed algorithm: its own best block count (or the caller's); the k-item ones, which
  // the rule does not predict, take the linear cost model's.
  ch.alg = alg;
  ch.blocks = opts.blocks ? opts.blocks : automatic_block_count(bytes, c.size(), c.options());
  ch.predicted = 0;
  for (const auto& cand : ch.considered)
    if (cand.alg == alg) ch.blocks = cand.blocks, ch.predicted = cand.predicted;
  if (alg == algorithm::binomial || alg == algorithm::logp_tree) ch.blocks = 1;
  return ch;
}

task<result<void>> broadcast(communicator& c, std::span<std::byte> data, int root,
                             broadcast_options opts) {
  // The sequence number is taken before any check, so that a call refused on one rank
  // does not shift the numbering of later collectives against the other ranks.
  const std::uint32_t seq = c.next_seq();
  if (c.broken()) co_return fail(errc::broken);
  if (root < 0 || root >= c.size())
    co_return detail::refuse(c, "broadcast: root " + std::to_string(root) + " is not a rank of this " +
                                    std::to_string(c.size()) + "-rank communicator");
  std::string why;
  const auto chosen = plan_broadcast(c, data.size(), opts, &why);
  if (!chosen) co_return detail::refuse(c, why);
  const algorithm alg = chosen->alg;
  const int n = chosen->blocks;
  const auto model = detail::model_for(c, opts, "broadcast", why);  // valid: plan_broadcast checked it
  if (log_enabled(log_level::debug) && c.rank() == root && opts.alg == algorithm::automatic &&
      c.options().broadcast_algorithm == algorithm::automatic)
    log(log_level::debug, "broadcast of " + std::to_string(data.size()) + " B on " + std::to_string(c.size()) +
                              " ranks: automatic chose " + chosen->explain());

  detail::deadline_scope deadline(c.get_fabric(), seq, opts.timeout.value_or(c.options().timeout));
  auto& f = c.get_fabric();
  result<void> r;
  if (alg == algorithm::binomial) {
    r = co_await algorithms::broadcast_binomial(f, seq, data, root);
  } else if (alg == algorithm::buffered || alg == algorithm::single_sending) {
    const int L = logp::postal_steps({model->L, model->o, model->g});
    const auto plan = alg == algorithm::buffered ? logp::kitem_buffered_for(c.size(), L, n) : logp::kitem_single_for(c.size(), L, n);
    r = co_await algorithms::broadcast_kitem(f, seq, data, root, *plan, std::max(model->g, model->o));
  } else if (alg == algorithm::fibonacci) {
    const auto plan = fibonacci::schedule_for(c.size(), n);
    r = co_await algorithms::broadcast_packets(f, seq, data, root, *plan);
  } else if (alg == algorithm::ktree || alg == algorithm::rotation) {
    const auto plan = alg == algorithm::ktree ? multiport::ktree_for(c.size(), n, c.ports()) : multiport::rotation_for(c.size(), n, c.ports());
    r = co_await algorithms::broadcast_packets(f, seq, data, root, *plan);
  } else if (alg == algorithm::logp_tree) {
    // LogGP: a message of b bytes keeps its sender busy (b - 1) G longer and arrives that
    // much later, so the tree is the LogP tree for L + (b-1) G and g + (b-1) G (G = 0: LogP's).
    const double extra = std::max<double>(static_cast<double>(data.size()) - 1, 0) * model->G;
    r = co_await algorithms::broadcast_logp_tree(f, seq, data, root, {model->L + extra, model->o, model->g + extra});
  } else {
    r = co_await algorithms::broadcast_circulant(f, seq, data, root, n);
  }
  co_return detail::finish(c, std::move(r));
}

namespace {

// Point-to-point messages use sequence numbers from the top of the space, one per user
// tag, so they never match a collective's.
constexpr std::uint32_t p2p_limit = 0x80000000u;

task<result<void>> p2p(communicator& c, op_kind kind, int peer, std::uint32_t user_tag,
                       std::span<std::byte> data, std::optional<std::chrono::milliseconds> t) {
  if (user_tag >= p2p_limit) co_return fail(errc::invalid_argument);
  if (c.broken()) co_return fail(errc::broken);
  auto& f = c.get_fabric();
  const tag tg{p2p_limit | user_tag, 0};
  detail::deadline_scope deadline(f, tg.seq, t.value_or(c.options().timeout));
  // No co_await inside ?: here or anywhere: GCC 12 has run both arms of one.
  result<std::size_t> r;
  if (kind == op_kind::send)
    r = co_await f.send(peer, tg, data);
  else
    r = co_await f.recv(peer, tg, data);
  if (!r) co_return detail::finish(c, fail(r.error()));
  co_return result<void>{};
}

}  // namespace

task<result<void>> send(communicator& c, int peer, std::uint32_t user_tag,
                        std::span<const std::byte> data,
                        std::optional<std::chrono::milliseconds> timeout) {
  return p2p(c, op_kind::send, peer, user_tag,
             {const_cast<std::byte*>(data.data()), data.size()}, timeout);
}

task<result<void>> recv(communicator& c, int peer, std::uint32_t user_tag,
                        std::span<std::byte> data,
                        std::optional<std::chrono::milliseconds> timeout) {
  return p2p(c, op_kind::recv, peer, user_tag, data, timeout);
}

}  // namespace optcast
