// How a fabric that owns its loop waits for the network while a call is pending
// (job_config::poll_mode). A wake-up from epoll_wait costs tens of microseconds on a
// virtual machine, and a collective of log p rounds pays it log p times: polling the
// sockets without sleeping answers within a microsecond or two, at the price of the core.
// `adaptive` pays that price only where it buys something: it polls while most recent
// waits ended within the limit, and not when a yield shows other processes want the core.
#pragma once

#include <chrono>

#include <asio/io_context.hpp>

#include "optcast/fabric.hpp"
#include "optcast/net/job.hpp"

namespace optcast::detail {

class poller {
public:
  poller(asio::io_context& io, job_config::poll_mode mode, std::chrono::microseconds limit) noexcept
      : io_(io), mode_(mode), limit_(limit) {}

  // Runs the loop's handlers until done() holds.
  void run_until(stop_predicate done);

private:
  using clock = std::chrono::steady_clock;
  // Polls without sleeping, up to the limit (or for good, spinning): true once a handler ran.
  bool poll_for_a_while();
  void record(bool within_limit) noexcept { hits_ = 0.875 * hits_ + (within_limit ? 0.125 : 0.0); }

  asio::io_context& io_;
  job_config::poll_mode mode_;
  std::chrono::microseconds limit_;
  double hits_ = 1.0;  // start by polling: a job's first calls come close together
};

}  // namespace optcast::detail
