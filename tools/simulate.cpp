// optcast simulate: run one collective on P simulated ranks under a cost model
// (optcast::sim::simulate) and print what the simulator measured beside the time the
// algorithm's paper proves. The algorithms are the registry's (--list).
#include "tools.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "optcast/log.hpp"
#include "optcast/picture.hpp"
#include "optcast/progress.hpp"
#include "optcast/simulate.hpp"
#include "cli.hpp"

namespace optcast::tools {

int cmd_simulate(int argc, char** argv) {
  CLI::App app{"Runs a collective on P simulated ranks (one process, virtual time) under a cost model and prints\n"
               "what happened: finish time, rounds, messages, bytes, the longest chain of messages, per-rank\n"
               "finish times, and the time the algorithm's paper proves (exit status 1 when it is missed).\n"
               "Every rank's result is checked unless the buffers would not fit in memory.",
               "optcast simulate"};
  sim::run_request req;
  std::string coll, alg_name = "automatic", model_spec = "rounds", host_spec;
  int ports = 1;
  bool choose = false, json = false, list = false, markdown = false, no_verify = false, quiet = false;
  std::string svg_path, tree_path;
  int svg_rows = 64;
  app.add_option("--collective", coll, "one of " + collective_names());
  app.add_option("--algorithm", alg_name, "an algorithm of that collective (see --list)")->capture_default_str();
  app.add_option("--p", req.p, "number of ranks")->check(CLI::Range(1, 1 << 24));
  app.add_option("--per-host", req.per_host, "ranks per host, in blocks (multi_lane decomposes by host; p a multiple of it)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--rails", req.rails, "network interfaces per host (multi_lane's lanes)")->check(CLI::Range(1, 8));
  app.add_option("--bytes", req.bytes,
                 "message size (allgather, scatter, gather: per rank; alltoall: per pair of ranks; allgatherv, "
                 "reduce_scatter(_block): in total; summation: the operand count n; stream: per item)")
      ->transform(cli::byte_size())->capture_default_str();
  app.add_option("--blocks", req.blocks, "pipelining depth (default: the library's choice under the model; stream: items, 1)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--root", req.root, "root rank of broadcast, scatter, gather, reduce, summation, stream")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--counts", req.counts, "allgatherv / reduce_scatter counts: even, skewed (every 4th rank 0), one (all on the last rank)")
      ->check(CLI::IsMember({"even", "skewed", "one"}))->capture_default_str();
  app.add_option("--model", model_spec, "rounds, postal:L, logp:L,o,g or loggp:L,o,g,G")->capture_default_str();
  app.add_option("--host-model", host_spec,
                 "with --per-host or --rails, the link between two ranks of one host (postal:L, logp:L,o,g or "
                 "loggp:L,o,g,G; default: --model's); --model is then one rail's, shared by the host's ranks");
  app.add_option("--ports", ports, "ports per rank (k-port model)")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_flag("--choose", choose, "receivers choose among arrived messages, receives posted first first (Karp et al. 3.5)");
  app.add_flag("--explain", req.explain,
               "broadcast, allreduce: print what the automatic choice predicts for every algorithm, and what it picks "
               "(allreduce always prints it)");
  app.add_flag("--json", json, "one JSON object instead of text");
  app.add_flag("--list", list, "list every collective and algorithm with its source, and exit");
  app.add_flag("--markdown", markdown, "with --list: README's algorithm table");
  app.add_flag("--no-verify", no_verify, "do not check results (and share one buffer among all ranks)");
  app.add_flag("--quiet", quiet, "no progress line (shown only on a terminal, for long runs)");
  app.add_option("--svg", svg_path,
                 "also draw the run's timeline into this SVG file: a row per rank, every message's overheads, gap, wire "
                 "and block, the finish time and the paper's bound (rounds model: the grid of rounds x ranks)");
  app.add_option("--svg-rows", svg_rows, "ranks drawn in --svg (the rest are noted)")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--tree-svg", tree_path,
                 "also draw who informed whom, each rank at the time it had the datum (one-item broadcasts: Karp et "
                 "al.'s Figure 1, Fibonacci and k-trees)");
  app.footer("Units: model time units (rounds, or the cycles of L, o, g, G); G is per byte.\n"
             "Example: optcast simulate --collective allgather --p 1000 --bytes 64 --blocks 4 --model loggp:5,1,2,0.01");
  app.callback([&] {
    if (list) return;
    if (coll.empty()) throw CLI::ValidationError("--collective", "required (see --list)");
    if (app.count("--p") == 0) throw CLI::ValidationError("--p", "required");
    if (req.root >= req.p) throw CLI::ValidationError("--root", "must be below --p");
    const auto which = parse_collective(coll);
    if (!which) throw CLI::ValidationError("--collective", "'" + coll + "': one of " + collective_names());
    req.coll = *which;
    const auto alg = parse_algorithm(alg_name);
    if (!alg || (*alg != algorithm::automatic && !find(*which, *alg)))
      throw CLI::ValidationError("--algorithm",
                                 "'" + alg_name + "': for " + coll + " one of automatic, " + algorithm_names(*which) + " (see --list)");
    req.alg = *alg;
    std::string why;
    auto model = sim::model::parse(model_spec, ports, &why);
    if (!model) throw CLI::ValidationError("--model", why);
    if (choose && model->kind == sim::model_kind::rounds)
      throw CLI::ValidationError("--choose", "not under the rounds model (postal, logp or loggp)");
    model->choose = choose;
    if (!host_spec.empty()) {
      if (req.per_host == 1 && req.rails == 1) throw CLI::ValidationError("--host-model", "needs --per-host or --rails");
      if (model->kind == sim::model_kind::rounds || choose)
        throw CLI::ValidationError("--host-model", "under postal, logp or loggp --model without --choose (rounds keeps every rank's own ports)");
      auto link = sim::model::parse_link(host_spec, &why);
      if (!link) throw CLI::ValidationError("--host-model", why);
      model->host = *link;
    }
    req.model = *model;
    if (req.explain && req.coll != collective::broadcast && req.coll != collective::allreduce)
      throw CLI::ValidationError("--explain", "for --collective broadcast or allreduce");
  });
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (list && markdown) {
    std::puts("| collective | algorithm | paper | model | needs | automatic | what it does |\n| --- | --- | --- | --- | --- | --- | --- |");
    for (const auto& e : registry()) {
      std::string needs = e.needs.ports > 1 ? std::to_string(e.needs.ports) + " ports" : "";
      if (e.needs.commutative) needs += needs.empty() ? "commutative operator" : ", commutative operator";
      if (e.needs.lanes) needs += needs.empty() ? "hosts of several ranks or rails" : ", hosts of several ranks or rails";
      std::string automatic = e.automatic ? "candidate" : "";
      if (e.needs.order_free) automatic += " (order-free operators)";
      std::printf("| %s | `%s` | %s, %s | %s | %s | %s | %s |\n", std::string(to_string(e.coll)).c_str(),
                  std::string(to_string(e.alg)).c_str(), std::string(e.paper).c_str(), std::string(e.where).c_str(),
                  std::string(to_string(e.model)).c_str(), needs.c_str(), automatic.c_str(), std::string(e.summary).c_str());
    }
    return 0;
  }
  if (list) {
    for (const auto& e : registry())
      std::printf("%-21s %-15s %s, %s (%s): %s\n", std::string(to_string(e.coll)).c_str(), std::string(to_string(e.alg)).c_str(),
                  std::string(e.paper).c_str(), std::string(e.where).c_str(), std::string(to_string(e.model)).c_str(),
                  std::string(e.summary).c_str());
    return 0;
  }
  req.verify = !no_verify;
  req.record = !svg_path.empty() || !tree_path.empty();
  progress_line progress(quiet);
  if (progress.on())
    req.progress = [&](double now, std::uint64_t messages) {
      if (progress.due())
        progress.show("simulate: virtual time " + std::to_string(now) + ", " + std::to_string(messages) + " messages so far");
    };
  std::string why;
  const auto ran = sim::simulate(req, &why);
  progress.clear();
  if (!ran) {
    std::fprintf(stderr, "optcast simulate: %s\n", why.c_str());
    return 2;
  }
  const auto& out = *ran;
  if (req.record) {
    const auto* source = find(req.coll, out.alg);
    const std::string title = coll + ", " + std::string(to_string(out.alg)) + ", p = " + std::to_string(req.p) + ", " +
                              format_bytes(req.bytes) + ", n = " + std::to_string(out.blocks) + ", " + out.rep.model;
    const auto write = [&](const std::string& path, const std::string& text) {
      std::ofstream f(path, std::ios::binary);
      f << text;
      if (!f.flush()) {
        std::fprintf(stderr, "optcast simulate: cannot write %s\n", path.c_str());
        return false;
      }
      return true;
    };
    if (!svg_path.empty()) {
      picture::timeline_options po{.title = title, .max_rows = svg_rows};
      if (source) po.subtitle = std::string(source->paper) + ", " + std::string(source->where) + ": " + std::string(source->summary);
      if (out.paper && out.paper->how != proven_time::reference) {
        po.bound = out.paper->value;
        po.bound_label = "paper: " + std::string(out.paper->promise()) + out.paper->name + " = " + sim::format_time(out.paper->value) +
                         (out.paper->by_communication ? " (communication finish)" : "");
      }
      if (!write(svg_path, picture::timeline_svg(out.rep, req.model, po))) return 2;
    }
    if (!tree_path.empty()) {
      std::string no;
      const auto tree = picture::tree_svg(out.rep, req.root, {.title = title}, &no);
      if (!tree) {
        std::fprintf(stderr, "optcast simulate: --tree-svg: %s\n", no.c_str());
        return 2;
      }
      if (!write(tree_path, *tree)) return 2;
    }
  }
  const auto& rep = out.rep;
  if (req.verify && !out.verified && out.ok && !json)
    std::fprintf(stderr, "simulate: the buffers of every rank would not fit; timing only (results not checked)\n");
  const std::string alg_ran(to_string(out.alg));
  const auto* row = find(req.coll, out.alg);
  const auto& paper = out.paper;

  if (json) {
    auto j = nlohmann::ordered_json::parse(rep.json());
    j["collective"] = coll;
    j["algorithm"] = alg_ran;
    j["p"] = req.p;
    j["message_bytes"] = req.bytes;
    j["blocks"] = out.blocks;
    j["root"] = req.root;
    j["ok"] = out.ok;
    j["verified"] = out.verified;
    j["wall_seconds"] = out.wall_seconds;
    if (paper)
      j["paper_figure"] = {{"name", paper->name}, {"value", paper->value}, {"promise", paper->promise()}, {"met", out.paper_met}};
    if (out.hosts) j["hosts_bound"] = {{"name", out.hosts->name}, {"value", out.hosts->value}};
    if (!out.explained.empty()) j["explain"] = out.explained;
    for (const auto& [name, v] : out.measured) j["measured"][name] = v;
    std::puts(j.dump().c_str());
  } else {
    std::printf("%s, %s, p = %d, %s, n = %s, model %s\n", coll.c_str(), alg_ran.c_str(), req.p,
                format_bytes(req.bytes).c_str(), std::to_string(out.blocks).c_str(), rep.model.c_str());
    if (row)
      std::printf("  source          %s, %s: %s\n", std::string(row->paper).c_str(), std::string(row->where).c_str(),
                  std::string(row->summary).c_str());
    if (!out.explained.empty()) std::printf("  automatic       %s\n", out.explained.c_str());
    const auto paper_note = [&] {
      std::printf("   (paper: %s%s = %g; %s)", paper->promise(), paper->name.c_str(), paper->value,
                  paper->how == proven_time::reference ? "not promised under this model" : out.paper_met ? "met" : "MISSED");
    };
    std::printf("  finish time     %g", rep.finish_time);
    if (paper && !paper->by_communication) paper_note();
    std::printf("\n");
    if (req.model.kind != sim::model_kind::rounds) {
      std::printf("  comm. finish    %g", rep.comm_finish_time);
      if (paper && paper->by_communication) paper_note();
      std::printf("   (every rank free to communicate again)\n");
    }
    if (out.hosts)
      std::printf("  hosts' rails    %g   (%s; finish %.3gx that)\n", out.hosts->value, out.hosts->name.c_str(),
                  rep.finish_time / out.hosts->value);
    std::printf("  rounds          %llu", static_cast<unsigned long long>(rep.rounds));
    for (const auto& [name, v] : out.measured) std::printf("\n  %-24s %g", name.c_str(), v);
    std::printf("\n  messages        %llu\n  bytes           %llu\n  longest chain   %u messages\n",
                static_cast<unsigned long long>(rep.messages), static_cast<unsigned long long>(rep.bytes), rep.longest_chain);
    if (!rep.ranks.empty()) {
      auto [lo, hi] = std::minmax_element(rep.ranks.begin(), rep.ranks.end(),
                                          [](const auto& a, const auto& b) { return a.finish < b.finish; });
      std::printf("  rank finish     %g (rank %td) .. %g (rank %td)\n", lo->finish, lo - rep.ranks.begin(), hi->finish,
                  hi - rep.ranks.begin());
    }
    if (rep.unreceived) std::printf("  unreceived      %llu messages\n", static_cast<unsigned long long>(rep.unreceived));
    std::printf("  result          %s\n", !out.ok ? ("FAILED: " + out.error).c_str()
                                          : out.verified ? "verified on every rank" : "not checked (timing only)");
    std::printf("  simulated in    %.3f s\n", out.wall_seconds);
  }
  return out.ok && out.paper_met ? 0 : 1;
}

}  // namespace optcast::tools
