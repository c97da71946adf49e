// The in-process fabric: P ranks in one process, on one event loop (an asio::io_context),
// for tests and for programs that embed many ranks. A message is copied once, straight
// into the posted receive, or into a recycled buffer when it arrives first.
#pragma once

#include <memory>
#include <vector>

#include "optcast/fabric.hpp"

namespace asio {
class io_context;
}

namespace optcast::local {

struct world_state;

// The world (and its event loop) must outlive the fabrics it hands out (and the
// communicators made of them: communicators_of(world), optcast/communicator.hpp).
class world {
public:
  // On the caller's event loop, or (first form) on one the world owns.
  explicit world(int p, int ports = 1);
  world(int p, asio::io_context& io, int ports = 1);
  ~world();
  world(const world&) = delete;
  world& operator=(const world&) = delete;

  int size() const noexcept;
  asio::io_context& io() noexcept;

  std::shared_ptr<optcast::fabric> fabric(int rank) const;

  // Simulates rank r dying: its pending operations fail, peers waiting on it get
  // errc::peer_lost, and later operations with it fail the same way.
  void kill(int rank);

  // Groups the ranks into hosts (topology::host_of; rails too), as a job of several ranks
  // per host is: the algorithms that use the topology (multi_lane) see it. The messages
  // stay in-process copies. Before the first collective.
  void set_layout(topology t);


private:
  std::unique_ptr<asio::io_context> owned_io_;
  std::shared_ptr<world_state> state_;
};

}  // namespace optcast::local
