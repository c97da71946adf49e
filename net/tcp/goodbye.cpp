// The TCP fabric's orderly goodbye. A rank that finishes first leaves while the others
// may still be at work (forwarding its data to a slow rank): the end of its connections
// must then read as a goodbye, not as the loss of a peer, which fails the job. A process
// that dies has its connections closed by the kernel in the same way, so only a frame
// can tell the two apart: frame_bye, the last frame on each connection of a rank that
// closes with no failure and nothing in flight. (Its reading is receive.cpp's read_bye.)
#include <poll.h>

#include <thread>

#include "tcp_fabric.hpp"

namespace optcast::tcp::impl {

bool tcp_fabric::idle() const noexcept {
  if (!any_posted_.empty()) return false;
  for (const auto& pe : peers_) {
    if (!pe.posted.empty() || !pe.lent.empty()) return false;
    for (const auto& out : pe.out)
      if (!out.queue.empty() || out.writing) return false;
    for (const auto& c : pe.in)
      if (c && c->target) return false;
  }
  return true;
}

void tcp_fabric::say_goodbye() noexcept {
  frame_header f;
  f.kind = frame_header::bye;
  const auto [seq, sig] = newest_finished();
  f.sig = sig;
  for (int r = 0; r < cfg_.size; ++r) {
    if (r == cfg_.rank) continue;
    auto& outs = peer(r).out;
    // The receiver counts the goodbyes: one on every connection to it that is up.
    const auto up = std::count_if(outs.begin(), outs.end(), [](const out_conn& o) { return o.st == out_conn::state::ready; });
    f.tg = {seq, static_cast<std::uint32_t>(up)};
    for (auto& out : outs) {
      if (out.st != out_conn::state::ready || out.writing || !out.queue.empty()) continue;
      std::vector<std::byte> frame(frame_bytes + (out.chan ? auth::channel::tag_bytes : 0));
      encode(std::span<std::byte, frame_bytes>(frame.data(), frame_bytes), f);
      if (out.chan) out.chan->seal(std::span(frame.data(), frame_bytes), nullptr, nullptr, 0, frame.data() + frame_bytes);
      std::error_code ec;
      const std::size_t n = out.sock.write_some(asio::buffer(frame), ec);
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again) continue;  // it is gone: nobody to tell
      if (n == frame.size()) continue;  // closed with the others: the kernel sends the rest first
      // Its peer is still reading what this rank sent before: the socket stays open, with
      // the rest of the goodbye, until the job's outcome is known.
      frame.erase(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(n));
      goodbyes_.push_back({std::move(out.sock), std::move(frame)});
      out.sock = link(ex_);
    }
  }
}

void tcp_fabric::finish_goodbyes(std::chrono::milliseconds within) noexcept {
  const auto until = std::chrono::steady_clock::now() + within;
  for (auto& g : goodbyes_) {
    std::size_t done = 0;
    while (done < g.rest.size()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
      if (left <= 0) break;
      std::error_code ec;
      done += g.sock.write_some(asio::buffer(g.rest.data() + done, g.rest.size() - done), ec);
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again && ec != asio::error::interrupted) break;  // the peer is gone
      if (!ec) continue;
      // Room comes as the peer reads: a socket says when; a ring is looked at again shortly.
      if (g.sock.in_memory()) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      pollfd p{g.sock.socket().native_handle(), POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000))) < 0 && errno != EINTR) break;
    }
    std::error_code ignored;
    g.sock.close(ignored);
  }
  goodbyes_.clear();
}

}  // namespace optcast::tcp::impl
