// What a recorded run's messages let each rank know of the others (the barrier's check in
// the simulator).
#pragma once

#include <string>

#include "optcast/net/sim.hpp"

namespace optcast::sim {

// A barrier's promise, on the recorded run: when a rank finishes it has heard, directly
// or through ranks that heard before they sent, from every rank since that rank entered
// (all enter at 0). Messages in time order; a receive completing at t counts for a send
// posted at t (a round loop posts the next round's sends once the last round's receives
// are done), never the other way.
bool heard_from_all(const report& rep, int p, std::string& why);

}  // namespace optcast::sim
