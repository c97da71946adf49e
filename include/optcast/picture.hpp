// Pictures of runs and schedules, as SVG text: a timeline of a simulated run (the papers'
// timing diagrams; under the rounds model, the grid of rounds x ranks of their tables),
// the tree of who informed whom in a one-item broadcast (Karp et al.'s Figure 1 with its
// labels), and a table of numbers per rank (Träff's schedule Tables 1-3).
//
//   sim::run_request req{...};  req.record = true;
//   auto run = sim::simulate(req);
//   std::ofstream("run.svg") << picture::timeline_svg(run->rep, req.model, {.title = "..."});
//
// The output depends only on the input (no clock, no locale): the same run gives the
// same bytes. Elements carry their numbers as data- attributes (rank, time, block), so
// that a program (or a test) can read a picture back.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "optcast/error.hpp"
#include "optcast/net/sim.hpp"

namespace optcast::picture {

struct timeline_options {
  std::string title;     // first line, e.g. the collective, algorithm, p and model
  std::string subtitle;  // second line
  int max_rows = 64;     // ranks 0 .. max_rows-1 drawn, a note for the rest
  std::size_t max_messages = 20000;  // messages drawn; a note counts the rest
  std::optional<double> bound;       // the time the paper proves, drawn as a dashed line
  std::string bound_label;           // e.g. "paper: T(P) = 24"
};

// One row per rank, time left to right in model units. In a row's upper lane each send:
// its sending overhead and injection (start .. last byte) in the colour of its block,
// then the gap g before the channel takes another (lighter); an arrow for the wire from
// the first byte's injection to its arrival window at the receiver; in the receiver's
// lower lane the receiving overhead (o, or a thin mark when o = 0). Idle rounds and
// computations hatched. Lines for the finish time and the paper's bound. Under the
// rounds model a round is one cell of a grid. Needs a report recorded with
// world_options::record (sim::run_request::record).
std::string timeline_svg(const sim::report& rep, const sim::model& m, const timeline_options& o = {});

struct tree_options {
  std::string title;
  int max_nodes = 512;
};

// The tree of a run in which every rank but the root received exactly one message and
// the root none (a one-item broadcast): nodes at the time each rank had the datum (its
// label), edges from the sender, children left to right in the order they were sent
// to. errc::invalid_argument, with the reason in *why, for any other run.
result<std::string> tree_svg(const sim::report& rep, int root, const tree_options& o = {}, std::string* why = nullptr);

// A table of small integers, one column per rank: cells coloured by value (negative
// values, e.g. Träff's blocks of the previous phase, in greys).
struct table {
  std::string title;
  std::string subtitle;
  std::vector<std::string> columns;                              // column heads
  std::vector<std::pair<std::string, std::vector<int>>> rows;   // row name, one value per column
};
std::string table_svg(const table& t);

}  // namespace optcast::picture
