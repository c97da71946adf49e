#include "launcher_detect.hpp"
#include "parse_number.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <map>
#include <set>

namespace optcast::launcher {

namespace {

setup_error bad(const std::string& what) { return setup_error(make_error_code(errc::invalid_argument), what); }

std::string get(const getenv_fn& env, const char* name) {
  const char* v = env(name);
  return v ? std::string(v) : std::string();
}

// FNV-1a: a launcher's job name (a string) as a job id, the same on every rank.
std::uint64_t hash64(std::string_view s) {
  std::uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h ? h : 1;
}

// A host in brackets when it is an IPv6 address, for "host:port".
std::string bracketed(const std::string& host) { return host.find(':') != std::string::npos ? "[" + host + "]" : host; }

found torchrun(const getenv_fn& env) {
  found f;
  f.name = "torchrun";
  f.rank = get(env, "RANK");
  f.size = get(env, "WORLD_SIZE");
  const std::string addr = get(env, "MASTER_ADDR"), port = get(env, "MASTER_PORT");
  if (!addr.empty() && !port.empty()) f.store = "tcp://" + bracketed(addr) + ":" + port;
  // torchrun's run id ("none" unless --rdzv-id is given) names the job when it is real.
  if (const std::string id = get(env, "TORCHELASTIC_RUN_ID"); !id.empty() && id != "none") {
    f.job_id = hash64("torchrun/" + id);
    f.job_name = "torchrun run " + id;
  }
  return f;
}

found slurm(const getenv_fn& env) {
  found f;
  f.name = "Slurm";
  f.rank = get(env, "SLURM_PROCID");
  f.size = get(env, "SLURM_STEP_NUM_TASKS");
  if (f.size.empty()) f.size = get(env, "SLURM_NTASKS");
  std::uint64_t job = 0, step = 0;
  const std::string js = get(env, "SLURM_JOB_ID").empty() ? get(env, "SLURM_JOBID") : get(env, "SLURM_JOB_ID");
  const std::string ss = get(env, "SLURM_STEP_ID").empty() ? get(env, "SLURM_STEPID") : get(env, "SLURM_STEP_ID");
  if (!parse_number(js, job) || !parse_number(ss, step) || job >= (std::uint64_t{1} << 32) || step >= (std::uint64_t{1} << 32))
    throw bad("Slurm's SLURM_JOB_ID='" + js + "' and SLURM_STEP_ID='" + ss + "' are not a job and a step number");
  f.job_id = (job << 32) | step;
  f.job_name = "Slurm job " + js + " step " + ss;
  std::string list = get(env, "SLURM_STEP_NODELIST");
  if (list.empty()) list = get(env, "SLURM_JOB_NODELIST");
  if (list.empty()) list = get(env, "SLURM_NODELIST");
  if (list.empty()) return f;  // OPTCAST_STORE must say
  auto nodes = expand_hostlist(list);
  if (!nodes || nodes->empty()) throw bad("Slurm's node list '" + list + "' is not a host list");
  // Task 0 runs on the step's first node under every distribution but an arbitrary one.
  // Its store's port: the step's reserved ports if Slurm reserves some (MpiParams=ports),
  // else one drawn from the job and step below the kernel's ephemeral range, so that two
  // steps on one node seldom meet (OPTCAST_STORE or OPTCAST_STORE_PORT choose otherwise).
  unsigned port = 0;
  if (const std::string resv = get(env, "SLURM_STEP_RESV_PORTS"); !resv.empty()) {
    const std::string first = resv.substr(0, resv.find_first_of("-,"));
    if (!parse_number(first, port) || port == 0 || port > 65535) throw bad("Slurm's SLURM_STEP_RESV_PORTS='" + resv + "' is not a port range");
  } else {
    port = static_cast<unsigned>(20000 + (job * 16 + step) % 10000);
  }
  f.store = "tcp://" + bracketed(nodes->front()) + ":" + std::to_string(port);
  return f;
}

}  // namespace

std::string looked_for() {
  return "OPTCAST_RANK and OPTCAST_SIZE; PMIx (PMIX_RANK, PMIX_NAMESPACE: mpirun, prterun, srun --mpi=pmix); "
         "torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); Slurm (SLURM_PROCID, SLURM_STEP_ID: srun)";
}

found detect(const getenv_fn& env) {
  const auto has = [&](const char* n) { return !get(env, n).empty(); };
  if (has("PMIX_RANK") && has("PMIX_NAMESPACE")) {
    found f;
    f.name = "PMIx";
    f.job_name = "PMIx namespace " + get(env, "PMIX_NAMESPACE");
    f.job_id = hash64("pmix/" + get(env, "PMIX_NAMESPACE"));
    f.store = "pmix:";
    return f;
  }
  if (has("RANK") && has("WORLD_SIZE")) return torchrun(env);
  if (has("SLURM_PROCID") && (has("SLURM_STEP_ID") || has("SLURM_STEPID"))) return slurm(env);
  return {};
}

result<std::vector<std::string>> expand_hostlist(std::string_view list) {
  // Split at the commas outside brackets.
  std::vector<std::string_view> names;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') {
      if (++depth > 1) return fail(errc::invalid_argument);
    } else if (c == ']') {
      if (--depth < 0) return fail(errc::invalid_argument);
    } else if (c == ',' && depth == 0) {
      if (i > start) names.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return fail(errc::invalid_argument);
  std::vector<std::string> out;
  for (const auto name : names) {
    // Expand the first bracket group, then the rest of the name, recursively.
    const auto open = name.find('[');
    if (open == std::string_view::npos) {
      out.emplace_back(name);
      continue;
    }
    const auto close = name.find(']', open);
    const std::string_view prefix = name.substr(0, open), ranges = name.substr(open + 1, close - open - 1);
    auto rest = expand_hostlist(name.substr(close + 1));
    if (!rest) return rest;
    if (rest->empty()) rest->push_back("");
    std::size_t p = 0;
    while (p <= ranges.size()) {
      const auto comma = std::min(ranges.find(',', p), ranges.size());
      const std::string_view r = ranges.substr(p, comma - p);
      const auto dash = r.find('-');
      const std::string_view lo_s = r.substr(0, dash), hi_s = dash == std::string_view::npos ? lo_s : r.substr(dash + 1);
      std::uint64_t lo = 0, hi = 0;
      if (!parse_number(lo_s, lo) || !parse_number(hi_s, hi) || hi < lo || hi - lo > 1'000'000) return fail(errc::invalid_argument);
      const std::size_t width = lo_s.size();  // "01-10": two digits, as Slurm writes them
      for (std::uint64_t v = lo; v <= hi; ++v) {
        std::string digits = std::to_string(v);
        if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
        for (const auto& tail : *rest) out.push_back(std::string(prefix) + digits + tail);
      }
      p = comma + 1;
    }
  }
  return out;
}

std::vector<interface_address> interfaces() {
  std::vector<interface_address> out;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return out;
  for (ifaddrs* a = all; a; a = a->ifa_next) {
    if (!a->ifa_addr || (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6)) continue;
    interface_address ia;
    ia.name = a->ifa_name;
    ia.up = (a->ifa_flags & IFF_UP) && (a->ifa_flags & IFF_RUNNING);
    ia.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      ia.address = text;
    } else {
      const auto* s6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      ia.v6 = true;
      ia.link_local = IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr);
      ::inet_ntop(AF_INET6, &s6->sin6_addr, text, sizeof text);
      ia.address = text;
      if (ia.link_local) ia.address += "%" + ia.name;
    }
    out.push_back(std::move(ia));
  }
  ::freeifaddrs(all);
  return out;
}

namespace {

// OPTCAST_IFNAME's list: whether it names the interfaces not to use ('^'), and each name
// with whether it must match exactly ('=') or as a prefix.
struct ifname_spec {
  bool exclude = false;
  std::vector<std::pair<std::string, bool>> names;  // name, exact
  explicit ifname_spec(std::string_view spec) {
    if (!spec.empty() && spec.front() == '^') {
      exclude = true;
      spec.remove_prefix(1);
    }
    for (std::size_t p = 0; p <= spec.size();) {
      const auto comma = std::min(spec.find(',', p), spec.size());
      std::string_view n = spec.substr(p, comma - p);
      const bool exact = !n.empty() && n.front() == '=';
      if (exact) n.remove_prefix(1);
      if (!n.empty()) names.emplace_back(std::string(n), exact);
      p = comma + 1;
    }
  }
  static bool matches(const std::string& iface, const std::pair<std::string, bool>& n) {
    return n.second ? iface == n.first : iface.compare(0, n.first.size(), n.first) == 0;
  }
};

}  // namespace

result<std::string> choose_address(std::string_view spec_text, int family, std::string* why) {
  const auto all = interfaces();
  const ifname_spec spec(spec_text);
  const bool exclude = spec.exclude;
  const auto& names = spec.names;
  const auto matches = [](const interface_address& ia, const std::pair<std::string, bool>& n) { return ifname_spec::matches(ia.name, n); };
  const auto fits_family = [&](const interface_address& ia, int fam) { return fam == 0 || (fam == 6) == ia.v6; };
  // Ranked candidates: list order (including), then family preference, then global before
  // link-local. Loopback only when asked for by name, or as the last resort of an empty spec.
  const auto pick = [&](bool allow_loopback) -> std::string {
    std::vector<int> families = family ? std::vector<int>{family} : std::vector<int>{4, 6};
    for (const int fam : families)
      for (const bool ll : {false, true}) {
        const auto try_iface = [&](const interface_address& ia) {
          return ia.up && fits_family(ia, fam) && ia.link_local == ll && (allow_loopback || !ia.loopback);
        };
        if (!names.empty() && !exclude) {
          for (const auto& n : names)
            for (const auto& ia : all)
              if (matches(ia, n) && try_iface(ia)) return ia.address;
        } else {
          for (const auto& ia : all) {
            if (!try_iface(ia)) continue;
            if (exclude && std::any_of(names.begin(), names.end(), [&](const auto& n) { return matches(ia, n); })) continue;
            return ia.address;
          }
        }
      }
    return {};
  };
  std::string a = pick(!names.empty() && !exclude);
  if (a.empty() && names.empty()) a = pick(true);
  if (!a.empty()) return a;
  if (why) {
    std::set<std::string> seen;
    std::string have;
    for (const auto& ia : all)
      if (seen.insert(ia.name).second) have += (have.empty() ? "" : ", ") + ia.name + (ia.up ? "" : " (down)");
    *why = "no interface that is up matches OPTCAST_IFNAME='" + std::string(spec_text) +
           "'" + (family ? " with an IPv" + std::to_string(family) + " address" : std::string()) + "; this host has " +
           (have.empty() ? std::string("none") : have);
  }
  return fail(errc::invalid_argument);
}

namespace {

std::string_view kind_of(std::string_view name) {
  while (!name.empty() && name.back() >= '0' && name.back() <= '9') name.remove_suffix(1);
  return name;
}

}  // namespace

std::vector<std::string> rail_addresses(std::string_view spec, const std::string& primary) {
  const auto all = interfaces();
  const auto at = std::find_if(all.begin(), all.end(), [&](const interface_address& ia) { return ia.address == primary; });
  if (at == all.end() || at->loopback) return {primary};
  const bool v6 = at->v6;
  const ifname_spec parsed(spec);
  const bool exclude = parsed.exclude;
  const auto& names = parsed.names;
  const auto matches = &ifname_spec::matches;
  // One address per interface: the primary's own where it is that interface's, else
  // the interface's first global one of the family.
  std::map<std::string, std::string> address_of;
  for (const auto& ia : all) {
    if (!ia.up || ia.loopback || ia.v6 != v6 || ia.link_local) continue;
    auto [it, fresh] = address_of.emplace(ia.name, ia.address);
    if (!fresh && ia.address == primary) it->second = primary;
  }
  std::vector<std::string> chosen;  // interface names, in rail order
  const auto take = [&](const std::string& iface) {
    if (std::find(chosen.begin(), chosen.end(), iface) == chosen.end()) chosen.push_back(iface);
  };
  if (!names.empty() && !exclude) {
    for (const auto& n : names)
      for (const auto& [iface, addr] : address_of)  // name order within a prefix
        if (matches(iface, n)) take(iface);
  } else {
    for (const auto& [iface, addr] : address_of) {
      const auto& name = iface;  // a structured binding: clang 14 cannot capture one
      if (exclude && std::any_of(names.begin(), names.end(), [&](const auto& n) { return matches(name, n); })) continue;
      if (kind_of(iface) == kind_of(at->name)) take(iface);
    }
  }
  if (std::find(chosen.begin(), chosen.end(), at->name) == chosen.end()) return {primary};
  std::vector<std::string> out;
  for (const auto& iface : chosen) out.push_back(iface == at->name ? primary : address_of[iface]);
  return out;
}

result<std::string> resolve(const std::string& host, int family, std::string* why) {
  in6_addr a6{};
  in_addr a4{};
  const std::string bare = host.substr(0, host.find('%'));
  if (::inet_pton(AF_INET, host.c_str(), &a4) == 1 || ::inet_pton(AF_INET6, bare.c_str(), &a6) == 1) return host;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = family == 4 ? AF_INET : family == 6 ? AF_INET6 : AF_UNSPEC;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
    if (why) *why = "cannot resolve '" + host + "': " + ::gai_strerror(rc);
    return fail(errc::invalid_argument);
  }
  std::string v4, v6;
  for (addrinfo* r = res; r; r = r->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (r->ai_family == AF_INET && v4.empty())
      v4 = ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(r->ai_addr)->sin_addr, text, sizeof text);
    else if (r->ai_family == AF_INET6 && v6.empty())
      v6 = ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(r->ai_addr)->sin6_addr, text, sizeof text);
  }
  ::freeaddrinfo(res);
  if (family == 6 ? !v6.empty() : !v4.empty()) return family == 6 ? v6 : v4;
  if (!v6.empty()) return v6;
  if (why) *why = "'" + host + "' has no address";
  return fail(errc::invalid_argument);
}

bool is_loopback(const std::string& address) {
  in_addr a4{};
  in6_addr a6{};
  if (::inet_pton(AF_INET, address.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  const std::string bare = address.substr(0, address.find('%'));
  if (::inet_pton(AF_INET6, bare.c_str(), &a6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
  return false;
}

std::string host_identity() {
  // The boot id tells machines apart; the network namespace's inode, containers and the
  // namespaces of one machine.
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st{};
  const auto ns = ::stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : std::string("?");
  return (boot.empty() ? std::string("?") : boot) + "/" + ns;
}

}  // namespace optcast::launcher
