// The cost models as text: model::parse, parse_link, describe (optcast/cost_model.hpp).
#include "optcast/cost_model.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace optcast::sim {

namespace {

bool parse_number(std::string_view s, double& v) {
  if (s.empty()) return false;
  const std::string str(s);
  char* end = nullptr;
  v = std::strtod(str.c_str(), &end);
  return end == str.c_str() + str.size() && std::isfinite(v);
}

}  // namespace

result<model> model::parse(std::string_view spec, int ports, std::string* why) {
  auto bad = [&](std::string w) -> result<model> {
    if (why) *why = std::move(w);
    return fail(errc::invalid_argument);
  };
  if (ports < 1) return bad("--ports must be at least 1");
  const auto colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  std::vector<double> v;
  if (colon != std::string_view::npos) {
    std::string_view rest = spec.substr(colon + 1);
    while (true) {
      const auto comma = rest.find(',');
      double x = 0;
      if (!parse_number(rest.substr(0, comma), x))
        return bad("model '" + std::string(spec) + "': '" + std::string(rest.substr(0, comma)) +
                   "' is not a number");
      if (x < 0) return bad("model '" + std::string(spec) + "': parameters must not be negative");
      v.push_back(x);
      if (comma == std::string_view::npos) break;
      rest = rest.substr(comma + 1);
    }
  }
  auto want = [&](std::size_t n, const char* form) -> bool {
    if (v.size() == n) return true;
    if (why) *why = "model '" + std::string(spec) + "': expected " + form;
    return false;
  };
  if (name == "rounds") {
    if (!want(0, "rounds")) return fail(errc::invalid_argument);
    return rounds(ports);
  }
  if (name == "postal") {
    if (!want(1, "postal:L")) return fail(errc::invalid_argument);
    if (v[0] < 1) return bad("postal: L must be at least 1 (a message takes at least the unit step)");
    return postal(v[0], ports);
  }
  if (name == "logp") {
    if (!want(3, "logp:L,o,g")) return fail(errc::invalid_argument);
    if (v[2] <= 0 && v[1] <= 0) return bad("logp: g and o cannot both be 0 (a rank would send unboundedly fast)");
    return logp(v[0], v[1], v[2], ports);
  }
  if (name == "loggp") {
    if (!want(4, "loggp:L,o,g,G")) return fail(errc::invalid_argument);
    if (v[2] <= 0 && v[1] <= 0) return bad("loggp: g and o cannot both be 0 (a rank would send unboundedly fast)");
    return loggp(v[0], v[1], v[2], v[3], ports);
  }
  return bad("unknown model '" + std::string(name) + "' (rounds, postal:L, logp:L,o,g, loggp:L,o,g,G)");
}

result<loggp_link> model::parse_link(std::string_view spec, std::string* why) {
  auto m = parse(spec, 1, why);
  if (!m) return fail(m.error());
  if (m->kind == model_kind::rounds) {
    if (why) *why = "the link within a host needs times (postal:L, logp:L,o,g or loggp:L,o,g,G), not rounds";
    return fail(errc::invalid_argument);
  }
  return loggp_link{m->L, m->o, m->g, m->G};
}

std::string format_time(double t) {
  char buf[64];
  if (t == std::floor(t) && std::fabs(t) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", t);
  else
    std::snprintf(buf, sizeof buf, "%.6g", t);
  return buf;
}

std::string model::describe() const {
  std::string s;
  switch (kind) {
    case model_kind::rounds: s = "rounds"; break;
    case model_kind::postal: s = "postal:" + format_time(L); break;
    case model_kind::logp: s = "logp:" + format_time(L) + "," + format_time(o) + "," + format_time(g); break;
    case model_kind::loggp:
      s = "loggp:" + format_time(L) + "," + format_time(o) + "," + format_time(g) + "," + format_time(G);
      break;
  }
  s += " (" + std::to_string(ports) + (ports == 1 ? " port" : " ports") + (choose ? ", choosing receivers" : "");
  if (host)
    s += ", within a host loggp:" + format_time(host->L) + "," + format_time(host->o) + "," + format_time(host->g) + "," + format_time(host->G);
  return s + ")";
}

}  // namespace optcast::sim
