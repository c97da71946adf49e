// The simulator's report as JSON (the models as text are lib/core/cost_model.cpp's).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "state.hpp"

namespace optcast::sim {

std::string report::json() const {
  nlohmann::ordered_json j;
  j["model"] = model;
  j["finish_time"] = finish_time;
  j["comm_finish_time"] = comm_finish_time;
  j["rounds"] = rounds;
  j["messages"] = messages;
  j["bytes"] = bytes;
  j["longest_chain"] = longest_chain;
  j["unreceived"] = unreceived;
  j["error"] = error ? nlohmann::ordered_json(describe(error, error_detail)) : nlohmann::ordered_json(nullptr);
  auto& finish = j["per_rank_finish"] = nlohmann::ordered_json::array();
  auto& steps = j["per_rank_steps"] = nlohmann::ordered_json::array();
  for (const auto& r : ranks) {
    finish.push_back(r.finish);
    steps.push_back(r.steps);
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace optcast::sim
