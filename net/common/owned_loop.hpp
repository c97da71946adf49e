// A fabric that owns its event loop: the blocking form of connect() for plain programs,
// where nothing else runs an io_context. The loop outlives the fabric (whose close may
// still drive it), and nothing outside can reach it.
#pragma once

#include <functional>
#include <memory>

#include <asio/io_context.hpp>

#include "optcast/fabric.hpp"

namespace optcast::detail {

template <class Connect>
std::shared_ptr<fabric> with_own_loop(Connect connect) {
  struct holder {
    asio::io_context io{1};  // one thread runs it: handlers posted from it stay its own
    std::shared_ptr<fabric> f;
    ~holder() { f.reset(); }  // the fabric first, while its loop still exists
  };
  auto h = std::make_shared<holder>();
  h->f = connect(h->io);
  fabric* raw = h->f.get();
  return std::shared_ptr<fabric>(std::move(h), raw);
}

}  // namespace optcast::detail
