// Measuring a live fabric's LogGP parameters the way Alexandrov et al. (Section 3) do:
// timing loops that repeat one communication primitive many times, between ranks 0 and 1
// (where the fabric's layout puts ranks on hosts: rank 0 and the first rank of another
// host, then the host link between rank 0 and the next rank of its own).
//
//   o  the sending overhead: how long a send of one byte takes to complete on a free
//      channel (median of spaced sends);
//   g  the gap: the slope of the time to stream n one-byte messages back to back against n;
//   G  the gap per byte: the slope of the time to stream n messages of b bytes against
//      n (b - 1), for the largest b measured;
//   L  the latency: half the ping-pong round trip of one byte, less the two overheads
//      (2 (o + L + o) = RTT), clamped at 0;
//   round  (beside LogGP) the time per round of a dissemination barrier (every rank
//      signals and hears from k ranks a round, all at once): what the rounds of a schedule pay at least where
//      ranks share cores or a switch, which the two-rank ping-pong does not see (the
//      model's `round`, the floor of round_time());
//   gamma  (beside LogGP) the time per byte to combine two operands, the built-in sum of
//      doubles on 1 MiB, on rank 0; 0 on the simulator, whose clock charges no compute.
//   sharing  (beside LogGP) what a schedule whose links change partners every round loses
//      on this network (fabric.hpp): a circulant against a ring broadcast of 16 big_bytes
//      over every rank, each against its prediction; needs 3 ranks, 0 on the simulator.
// Each is measured `trials` times; the model is the medians, the spread min..max. Times
// are seconds on real fabrics, the model's units on the simulator (its virtual clock),
// where the measurement recovers the simulated parameters (calibrate_test).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "optcast/communicator.hpp"
#include "optcast/task.hpp"

namespace optcast {

struct calibrate_options {
  int trials = 5;               // independent measurements of every parameter
  int repetitions = 50;         // round trips (and spaced sends) per trial
  int stream = 200;             // messages per streaming loop (also run with stream / 4)
  std::size_t big_bytes = 1 << 20;  // message size for G
  // Told on rank 0 what is being measured ("trial 2 of 5", "sharing"): a progress line.
  std::function<void(const std::string& what)> progress;
};

struct calibration {
  struct spread {
    double min = 0, median = 0, max = 0;
  };
  loggp_params model;  // the medians
  spread L, o, g, G, gamma, sharing;
  spread round;  // a round with every rank exchanging at once (model.round)
  // Where rank 0 shares its host with other ranks (fabric::layout()): the host link,
  // measured between rank 0 and the next rank of its host (model.host); L, o, g, G above
  // are then between rank 0 and the first rank of another host. Zero otherwise.
  spread host_L, host_o, host_g, host_G;
  std::string fabric;  // what was measured ("tcp", "local", ...)
  int ranks = 0;
  std::string json() const;
};

// Every rank of `c` calls it; ranks 0 and 1 measure, every rank gets the result. Needs at
// least 2 ranks (errc::invalid_argument otherwise, with the reason in c.last_error()).
task<result<calibration>> calibrate(communicator& c, calibrate_options o = {});

// A calibration's JSON back (the "model" object: L, o, g, G, and gamma and sharing if there; a file
// without it keeps communicator_options' default), e.g. from a file that
// `optcast calibrate --output` wrote; errc::invalid_argument with `why` if it is not one.
result<loggp_params> parse_calibration(std::string_view json, std::string* why = nullptr);
// The same from a file (OPTCAST_CALIBRATION names one for every communicator a job makes).
result<loggp_params> load_calibration(const std::string& path, std::string* why = nullptr);

}  // namespace optcast
