#include "optcast/trace.hpp"

#include <time.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "optcast/log.hpp"

namespace optcast {

namespace {

double monotonic_seconds() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double now_on(const fabric& f) noexcept { return f.model_time().value_or(monotonic_seconds()); }

}  // namespace

trace_log::trace_log(std::size_t capacity, std::string path) : capacity_(capacity), path_(std::move(path)) {
  events_.reserve(std::min<std::size_t>(capacity_, 4096));
}

trace_log::~trace_log() {
  if (path_.empty()) return;
  std::ofstream out(path_);
  out << json() << "\n";
  if (!out) log(log_level::error, "cannot write the trace to " + path_);
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
}

std::string trace_log::json() const {
  nlohmann::ordered_json j = {{"rank", rank_}, {"clock", model_clock_ ? "model" : "monotonic"}, {"dropped", dropped_}};
  auto& ev = j["events"] = nlohmann::ordered_json::array();
  for (const auto& e : events_)
    ev.push_back({static_cast<int>(e.kind), e.peer, e.tg.seq, e.tg.step, e.bytes, e.posted, e.done, e.error});
  return j.dump();
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

}  // namespace optcast
