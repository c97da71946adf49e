// The cost models: LogGP's parameters as a live fabric knows them (loggp_params, which
// calibrate measures and the predictions read), and the models the papers analyse their
// algorithms in (sim::model: rounds, postal, LogP, LogGP, with k ports), which the
// simulator charges messages by and the registry's proven times are stated in. Apart from
// the simulator (optcast/net/sim.hpp) so that what reasons about a model need not include
// a fabric.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "optcast/error.hpp"

namespace optcast {

// One kind of link's LogGP parameters: latency L, overhead o, gap g, gap per byte G.
struct loggp_link {
  double L = 0, o = 0, g = 0, G = 0;
  bool operator==(const loggp_link&) const = default;
};

// The LogGP parameters of a fabric (Alexandrov et al.; LogP when G = 0): latency L,
// overhead o, gap g, gap per byte G, in the fabric's time unit.
struct loggp_params {
  double L = 0, o = 0, g = 0, G = 0;
  // Not LogGP: the time per byte to combine a received operand into one's own (the
  // reductions' compute). The simulator charges none; a live fabric's is measured by
  // calibrate. It decides between reductions that move the same bytes but combine more
  // or fewer of them (the combining broadcast against the circulant pair).
  double gamma = 0;
  // Not LogGP either: on a real network, the bandwidth a pipelined schedule loses when its
  // links change partners every round (Träff's circulant graph, the Fibonacci trees, the
  // k-port trees). Ranks drift apart by a fraction of a round; a rank a round ahead then
  // sends into a link still busy with another rank's block, and the two share it. Such
  // schedules are predicted at G (1 + sharing); those whose links keep their partners (a
  // tree that sends each rank the data once, the ring) are not. 0 in the simulator, whose
  // rounds are exact; calibrate measures it (a circulant against a ring broadcast).
  double sharing = 0;
  // Where ranks share hosts (fabric::layout()): the link between two ranks of one host
  // (shared memory, loopback); L, o, g, G above are then the network's, one rail's.
  // None: the network's everywhere.
  std::optional<loggp_link> host;
  // Not LogGP: the least time of a round of a round-based schedule with every rank
  // exchanging at once (calibrate's loaded round); 0: none beyond LogGP's.
  double round = 0;
  bool operator==(const loggp_params&) const = default;

  // The parameters of a message between two ranks of one host.
  loggp_params within_host() const noexcept {
    loggp_params p = *this;
    if (host) {
      p.L = host->L;
      p.o = host->o;
      p.g = host->g;
      p.G = host->G;
    }
    return p;
  }
};

}  // namespace optcast

namespace optcast::sim {

enum class model_kind { rounds, postal, logp, loggp };

struct model {
  model_kind kind = model_kind::rounds;
  double L = 1, o = 0, g = 1, G = 0;
  int ports = 1;
  // Choosing receivers (Karp et al. 3.5's modified model; not under rounds): arrived
  // messages wait in the receiver's buffer, and a free incoming channel takes the one
  // whose receive was posted first, not the one that arrived first.
  bool choose = false;
  // Under a layout (world_options::layout): the link between two ranks of one host.
  // None: the network's parameters there too (but still not through the rails).
  std::optional<loggp_link> host;
  model choosing() const {
    model c = *this;
    c.choose = true;
    return c;
  }

  static model rounds(int ports = 1) { return {model_kind::rounds, 1, 0, 1, 0, ports}; }
  static model postal(double L, int ports = 1) { return {model_kind::postal, L, 0, 1, 0, ports}; }
  static model logp(double L, double o, double g, int ports = 1) {
    return {model_kind::logp, L, o, g, 0, ports};
  }
  static model loggp(double L, double o, double g, double G, int ports = 1) {
    return {model_kind::loggp, L, o, g, G, ports};
  }

  // "rounds", "postal:L", "logp:L,o,g" or "loggp:L,o,g,G"; errc::invalid_argument with
  // `why` filled in otherwise (negative or non-finite parameters, L < 1 for postal, ...).
  static result<model> parse(std::string_view spec, int ports, std::string* why = nullptr);
  // The host link in the same notation (postal, logp or loggp; not rounds).
  static result<loggp_link> parse_link(std::string_view spec, std::string* why = nullptr);
  // The same notation back, e.g. "logp:6,2,4 (1 port)", with ", within a host loggp:..."
  // when the host link is given.
  std::string describe() const;
};

// A model time as reports and pictures print it: integers as integers, else six
// significant digits.
std::string format_time(double t);

}  // namespace optcast::sim
