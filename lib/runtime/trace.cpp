#include "optcast/trace.hpp"

#include <time.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <queue>
#include <tuple>

#include <nlohmann/json.hpp>

#include "optcast/communicator.hpp"
#include "optcast/log.hpp"
#include "runtime/comm_access.hpp"

namespace optcast {

namespace {

double monotonic_seconds() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double now_on(const fabric& f) noexcept { return f.model_time().value_or(monotonic_seconds()); }

// Lanes for slices that may overlap: a slice takes the lane that has been free longest,
// if it is free, else a new one. Slices in one lane never overlap, as trace viewers
// need of one thread's slices.
class lanes {
public:
  int take(double start, double end) {
    if (!free_.empty() && free_.top().first <= start) {
      const int lane = free_.top().second;
      free_.pop();
      free_.push({std::max(end, start), lane});
      return lane;
    }
    const int lane = count_++;
    free_.push({std::max(end, start), lane});
    return lane;
  }
  int count() const noexcept { return count_; }

private:
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> free_;
  int count_ = 0;
};

// Both ends of a message compute the same id: sender, receiver, tag, and how many
// messages with that sender, receiver and tag came before it (they match in order).
std::uint64_t flow_id(int src, int dst, tag t, std::uint64_t nth) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint64_t v : {static_cast<std::uint64_t>(src), static_cast<std::uint64_t>(dst), static_cast<std::uint64_t>(t.seq),
                          static_cast<std::uint64_t>(t.step), nth})
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h & ((std::uint64_t{1} << 53) - 1);  // exact in a JSON number
}

constexpr int call_tid = 1, send_tid = 1000, recv_tid = 2000, wait_tid = 3000, lane_cap = 999;

}  // namespace

double trace_clock(const fabric& f) noexcept { return now_on(f); }

void trace_unexpected(const fabric& f, const operation& op, double arrived) noexcept {
  const auto& log = f.trace();
  if (!log || !op.trace_id || op.trace_id > log->events_.size() || arrived < 0) return;
  log->events_[op.trace_id - 1].arrived = arrived;
}

namespace {
// The files live logs will write: two communicators of one process tracing into one
// directory as the same rank would overwrite each other's file at the end.
std::mutex claimed_mu;
std::set<std::string> claimed;
}  // namespace

trace_log::trace_log(std::size_t capacity, std::string path) : capacity_(capacity), path_(std::move(path)) {
  events_.reserve(std::min<std::size_t>(capacity_, 4096));
  if (path_.empty()) return;
  std::lock_guard lock(claimed_mu);
  if (!claimed.insert(path_).second)
    throw std::invalid_argument("another traced communicator of this process writes " + path_ +
                                " already: give each communicator a directory of its own");
}

trace_log::~trace_log() {
  if (path_.empty()) return;
  {
    std::lock_guard lock(claimed_mu);
    claimed.erase(path_);
  }
  try {
    std::ofstream out(path_);
    out << chrome_json() << "\n";
    if (!out) log(log_level::error, "cannot write the trace to " + path_);
  } catch (const std::exception& e) {
    log(log_level::error, "cannot write the trace to " + path_ + ": " + e.what());
  }
}

std::uint32_t trace_log::begin(const fabric& f, const operation& op) {
  if (events_.size() >= capacity_ || events_.size() >= 0xffffffffu) {
    ++dropped_;
    return 0;
  }
  rank_ = f.rank();
  model_clock_ = f.model_time().has_value();
  const double t = now_on(f);
  events_.push_back({op.kind, op.peer, op.tg, op.size, t, t - 1, 0});
  return static_cast<std::uint32_t>(events_.size());
}

void trace_log::end(const fabric& f, const operation& op) noexcept {
  if (op.trace_id > events_.size()) return;  // a log set after the operation began
  auto& e = events_[op.trace_id - 1];
  e.done = now_on(f);
  e.error = op.ec.value();
  if (e.peer < 0) e.peer = op.peer;  // a receive from any rank: the sender, once known
}

std::uint32_t trace_log::begin_call(const fabric& f, const trace_call& c) {
  if (calls_.size() >= capacity_ || calls_.size() >= 0xffffffffu) {
    ++dropped_;
    return 0;
  }
  model_clock_ = f.model_time().has_value();
  calls_.push_back(c);
  calls_.back().start = now_on(f);
  calls_.back().end = calls_.back().start - 1;
  return static_cast<std::uint32_t>(calls_.size());
}

void trace_log::end_call(const fabric& f, std::uint32_t id, int error) noexcept {
  if (id == 0 || id > calls_.size()) return;
  auto& c = calls_[id - 1];
  c.end = now_on(f);
  c.error = error;
}

std::string trace_log::chrome_json() const {
  using json = nlohmann::ordered_json;
  const double us = 1e6;  // seconds (or model units) to the format's microseconds
  json ev = json::array();
  const int pid = rank_;
  ev.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  ev.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", rank_}}}});
  auto thread = [&](int tid, const std::string& name) {
    ev.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
    ev.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  };
  const auto dur = [](double start, double end) { return end >= start ? end - start : 0.0; };

  lanes call_lanes;
  for (const auto& c : calls_) {
    const int tid = call_tid + std::min(call_lanes.take(c.start, std::max(c.end, c.start)), lane_cap);
    json args = {{"algorithm", std::string(to_string(c.alg))}, {"bytes", c.bytes}, {"blocks", c.blocks}, {"seq", c.seq},
                 {"ranks", c.ranks}, {"rank", c.rank}};
    if (c.root >= 0) args["root"] = c.root;
    if (c.end < c.start) args["error"] = "never finished";
    else if (c.error) args["error"] = describe(std::error_code(c.error, error_category()), "");
    ev.push_back({{"ph", "X"}, {"cat", "collective"}, {"name", std::string(to_string(c.coll))}, {"pid", pid}, {"tid", tid},
                  {"ts", c.start * us}, {"dur", dur(c.start, c.end) * us}, {"args", std::move(args)}});
  }
  for (int i = 0; i < std::min(call_lanes.count(), lane_cap + 1); ++i)
    thread(call_tid + i, i ? "collectives " + std::to_string(i + 1) : "collectives");

  // Sends and receives, each kind in its own lanes, in order of posting.
  lanes send_lanes, recv_lanes, wait_lanes;
  std::map<std::tuple<int, int, std::uint32_t, std::uint32_t>, std::uint64_t> nth;
  for (const auto& e : events_) {
    if (e.kind != op_kind::send && e.kind != op_kind::recv) continue;
    const bool is_send = e.kind == op_kind::send;
    const double end = std::max(e.done, e.posted);
    const int tid = (is_send ? send_tid : recv_tid) + std::min((is_send ? send_lanes : recv_lanes).take(e.posted, end), lane_cap);
    json args = {{"peer", e.peer}, {"seq", e.tg.seq}, {"step", e.tg.step}, {"bytes", e.bytes}};
    if (e.done < e.posted) args["error"] = "never completed";
    else if (e.error) args["error"] = describe(std::error_code(e.error, error_category()), "");
    if (!is_send && e.arrived >= 0 && e.arrived <= e.posted) {
      // The message waited in the fabric for this receive: that wait, on lanes of its own.
      args["waited_for_receive_us"] = (e.posted - e.arrived) * us;
      const int wtid = wait_tid + std::min(wait_lanes.take(e.arrived, e.posted), lane_cap);
      ev.push_back({{"ph", "X"}, {"cat", "unexpected"}, {"name", "unexpected from " + std::to_string(e.peer)}, {"pid", pid},
                    {"tid", wtid}, {"ts", e.arrived * us}, {"dur", (e.posted - e.arrived) * us},
                    {"args", {{"peer", e.peer}, {"seq", e.tg.seq}, {"step", e.tg.step}, {"bytes", e.bytes}}}});
    }
    ev.push_back({{"ph", "X"}, {"cat", is_send ? "send" : "recv"},
                  {"name", (is_send ? "send to " : "recv from ") + std::to_string(e.peer)}, {"pid", pid}, {"tid", tid},
                  {"ts", e.posted * us}, {"dur", dur(e.posted, e.done) * us}, {"args", std::move(args)}});
    if (e.peer < 0 || e.error || e.done < e.posted) continue;  // no message to draw
    const int src = is_send ? rank_ : e.peer, dst = is_send ? e.peer : rank_;
    const auto id = flow_id(src, dst, e.tg, nth[{src, dst, e.tg.seq, e.tg.step}]++);
    // The arrow leaves the send where it was posted and enters the receive where it
    // completed (a flow binds to the slice that encloses it on its thread).
    if (is_send)
      ev.push_back({{"ph", "s"}, {"cat", "message"}, {"name", "message"}, {"id", id}, {"pid", pid}, {"tid", tid}, {"ts", e.posted * us}});
    else
      ev.push_back({{"ph", "f"}, {"bp", "e"}, {"cat", "message"}, {"name", "message"}, {"id", id}, {"pid", pid}, {"tid", tid},
                    {"ts", std::max(e.done, e.posted) * us}});
  }
  for (int i = 0; i < std::min(send_lanes.count(), lane_cap + 1); ++i) thread(send_tid + i, "sends " + std::to_string(i + 1));
  for (int i = 0; i < std::min(recv_lanes.count(), lane_cap + 1); ++i) thread(recv_tid + i, "receives " + std::to_string(i + 1));
  for (int i = 0; i < std::min(wait_lanes.count(), lane_cap + 1); ++i)
    thread(wait_tid + i, "unexpected messages " + std::to_string(i + 1));

  json j = {{"traceEvents", std::move(ev)}, {"displayTimeUnit", "ns"}};
  j["optcast"] = {{"rank", rank_},
                  {"clock", model_clock_ ? "model" : "monotonic"},
                  {"clock_offset_s", clock_ ? json(clock_->offset) : json(nullptr)},
                  {"clock_error_s", clock_ ? json(clock_->error) : json(nullptr)},
                  {"dropped", dropped_},
                  {"calls", calls_.size()},
                  {"events", events_.size()}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool fabric::post_traced(operation& op) noexcept {
  try {
    op.trace_id = trace_->begin(*this, op);
  } catch (...) {  // out of memory for the log: the operation goes on untraced
    op.trace_id = 0;
  }
  const bool now = op.kind == op_kind::idle || op.kind == op_kind::compute ? start_local(op) : start(op);
  if (now) trace_end(op);
  return now;
}

void fabric::trace_end(operation& op) noexcept {
  if (trace_ && op.trace_id) trace_->end(*this, op);
  op.trace_id = 0;
}

namespace {

// Rank j sends its time t1; rank 0 answers with its time t2; j reads it at t3. Rank 0's
// clock at j's (t1 + t3) / 2 is t2, within half the round trip.
constexpr int clock_rounds = 8;
constexpr std::uint32_t clock_step = 0xfffffff1u;

}  // namespace

task<result<clock_offset>> measure_clock_offset(communicator& c, std::chrono::milliseconds timeout) {
  auto& f = c.get_fabric();
  const std::uint32_t seq = detail::comm_access::next_seq(c);
  const int p = c.size(), me = c.rank();
  const auto token = f.arm_deadline(seq, timeout);
  struct disarm {
    fabric& f;
    std::uint64_t t;
    ~disarm() { f.disarm_deadline(t); }
  } guard{f, token};
  std::array<std::byte, 8> out{}, in{};
  auto stamp = [&](double t) { std::memcpy(out.data(), &t, 8); };
  if (me == 0) {
    for (int j = 1; j < p; ++j)
      for (int k = 0; k < clock_rounds; ++k) {
        if (auto r = co_await f.recv(j, {seq, clock_step}, in); !r) co_return fail(r.error());
        stamp(monotonic_seconds());
        if (auto r = co_await f.send(j, {seq, clock_step}, out); !r) co_return fail(r.error());
      }
    co_return clock_offset{};
  }
  clock_offset best{0, 1e300};
  for (int k = 0; k < clock_rounds; ++k) {
    const double t1 = monotonic_seconds();
    stamp(t1);
    if (auto r = co_await f.send(0, {seq, clock_step}, out); !r) co_return fail(r.error());
    if (auto r = co_await f.recv(0, {seq, clock_step}, in); !r) co_return fail(r.error());
    const double t3 = monotonic_seconds();
    double t2 = 0;
    std::memcpy(&t2, in.data(), 8);
    if (!std::isfinite(t2)) co_return fail(errc::protocol_violation);
    if ((t3 - t1) / 2 < best.error) best = {t2 - (t1 + t3) / 2, (t3 - t1) / 2};
  }
  co_return best;
}

}  // namespace optcast
