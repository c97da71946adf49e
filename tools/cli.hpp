// A small command-line parser for optcast's programs: --name value / --name=value
// options and flags, sizes with units, and --help text built from the declarations.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace optcast::cli {

// "64MiB", "1k", "4096", "8B" -> bytes; nullopt when it is not a size.
inline std::optional<std::uint64_t> parse_size(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return std::nullopt;
  std::string unit(end);
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::map<std::string, double> units{
      {"", 1}, {"b", 1}, {"k", 1024}, {"kb", 1e3}, {"kib", 1024}, {"m", 1 << 20}, {"mb", 1e6},
      {"mib", 1 << 20}, {"g", 1 << 30}, {"gb", 1e9}, {"gib", 1 << 30}};
  auto it = units.find(unit);
  if (it == units.end()) return std::nullopt;
  const double bytes = v * it->second;
  if (bytes > 1e15 || bytes != static_cast<double>(static_cast<std::uint64_t>(bytes))) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

inline std::string format_size(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && u < 3 && static_cast<std::uint64_t>(v) % 1024 == 0) {
    v /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g %s", v, units[u]);
  return buf;
}

class parser {
public:
  parser(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

  parser& option(const std::string& name, const std::string& meta, const std::string& help, std::string def = {}) {
    decls_.push_back({name, meta, help, def, false});
    if (!def.empty()) values_[name] = def;
    return *this;
  }
  parser& flag(const std::string& name, const std::string& help) {
    decls_.push_back({name, {}, help, {}, true});
    return *this;
  }
  parser& note(const std::string& text) {
    notes_ += text + "\n";
    return *this;
  }

  // Exits with the help text on --help, and with status 2 and a message on bad input.
  void parse(int argc, char** argv, int first = 1) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::fputs(help().c_str(), stdout);
        std::exit(0);
      }
      if (a.rfind("--", 0) != 0) die("unexpected argument '" + a + "'");
      std::string name = a.substr(2), val;
      bool has_val = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        val = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_val = true;
      }
      const decl* d = find(name);
      if (!d) die("unknown option --" + name);
      if (d->is_flag) {
        if (has_val) die("--" + name + " takes no value");
        flags_[name] = true;
        continue;
      }
      if (!has_val) {
        if (i + 1 >= argc) die("--" + name + " needs a value (" + d->meta + ")");
        val = argv[++i];
      }
      values_[name] = val;
    }
  }

  bool has(const std::string& name) const { return values_.count(name) || flags_.count(name); }
  bool get_flag(const std::string& name) const { return flags_.count(name) > 0; }
  std::string get(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::string() : it->second;
  }
  long long get_int(const std::string& name, long long lo, long long hi) const {
    const std::string v = get(name);
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end || x < lo || x > hi)
      die("--" + name + " '" + v + "': need a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
    return x;
  }
  std::uint64_t get_size(const std::string& name) const {
    auto s = parse_size(get(name));
    if (!s) die("--" + name + " '" + get(name) + "': need a size such as 4096, 64KiB or 16MiB");
    return *s;
  }
  std::vector<std::uint64_t> get_sizes(const std::string& name) const {
    std::vector<std::uint64_t> out;
    std::string v = get(name);
    std::size_t pos = 0;
    while (pos <= v.size()) {
      auto comma = v.find(',', pos);
      const std::string part = v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      auto s = parse_size(part);
      if (!s) die("--" + name + ": '" + part + "' is not a size");
      out.push_back(*s);
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    return out;
  }

  [[noreturn]] void die(const std::string& msg) const {
    std::fprintf(stderr, "%s: %s (see --help)\n", program_.c_str(), msg.c_str());
    std::exit(2);
  }

  std::string help() const {
    std::string h = "usage: " + program_ + " [options]\n\n" + summary_ + "\n\noptions:\n";
    for (const auto& d : decls_) {
      std::string left = "  --" + d.name + (d.meta.empty() ? "" : " " + d.meta);
      if (left.size() < 28) left.resize(28, ' ');
      else left += "\n" + std::string(28, ' ');
      h += left + d.help + (d.def.empty() ? "" : " (default " + d.def + ")") + "\n";
    }
    h += "  --help                    this text\n";
    if (!notes_.empty()) h += "\n" + notes_;
    return h;
  }

private:
  struct decl {
    std::string name, meta, help, def;
    bool is_flag;
  };
  const decl* find(const std::string& n) const {
    for (const auto& d : decls_)
      if (d.name == n) return &d;
    return nullptr;
  }
  std::string program_, summary_, notes_;
  std::vector<decl> decls_;
  std::map<std::string, std::string> values_;
  std::map<std::string, bool> flags_;
};

}  // namespace optcast::cli
