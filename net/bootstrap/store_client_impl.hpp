// The state of a rank's connection to its job's store and its read loop (store.hpp's
// client), apart from the calls that use it (store_client.cpp). Internal.
#pragma once

#include "store_io.hpp"

namespace optcast::store {

using namespace proto;
using namespace io;
using asio::ip::tcp;

// ---------------------------------------------------------------------------- client
//
// The connection lives on an io_context of its own, run by a thread of its own once the
// handshake is done: the store's word (a lost rank, a failure) arrives and the blocking
// calls (set_wait, bye) finish whatever the rank's event loop is doing, and whoever runs
// it. What the rank must see runs on its loop (`events`); a ping is answered from there,
// so that a rank whose loop is stuck is found by the store's inquiry.

struct client::impl : std::enable_shared_from_this<client::impl> {
  explicit impl(asio::any_io_executor ev) : events(std::move(ev)) {}
  asio::io_context io{1};
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  asio::any_io_executor events;
  tcp::socket sock{io};
  std::thread thread;
  outbox out;
  std::uint64_t job_id = 0;
  std::string local_host;
  std::uint32_t next_id = 1;
  std::unordered_map<std::uint32_t, std::function<void(result<message>)>> pending;
  std::function<void(int)> lost;
  std::function<void(std::error_code)> closed;
  std::function<void(std::uint64_t, int, std::string)> failed;
  std::function<void(int)> rejoined;
  std::function<void()> verdict;
  std::function<std::string(std::uint32_t)> call_of;  // answer_inquiries'
  // What the store said before the rank set its callbacks (a job can fail while a slow
  // rank is still joining): held, and told once on_events sets them.
  bool events_set = false;
  std::vector<std::function<void()>> held;
  bool leaving = false;
  // A replacement (job_config::rejoin): what it waits for in the store (the job's layout)
  // is there already, and a member's death is the members' to deal with (they shrink).
  bool rejoining = false;
  std::string server_name;
  // Encrypted (OPTCAST_ENCRYPT): the two directions' channels, made at the challenge;
  // what this end reads is sealed from the message after the welcome on (`sealed_in`),
  // what it sends once the handshake is done (`sealing`).
  std::unique_ptr<auth::channel> seal_out, open_in;
  bool sealing = false, sealed_in = false;

  // Shared with the thread that waits in bye(): the job's outcome once the store gives
  // it, and whether the goodbye is on the wire.
  std::mutex mu;
  std::condition_variable cv;
  std::optional<result<void>> outcome;
  std::string outcome_why;
  bool bye_sent = false;
  std::string job_failure;  // what the store said failed the job, while the rank was not leaving
  void settle(result<void> r, std::string why) {
    std::lock_guard lock(mu);
    if (outcome) return;
    outcome = std::move(r);
    outcome_why = std::move(why);
    cv.notify_all();
  }

  void send(const message& m) { out.send(shared_from_this(), sock, on_wire(m, sealing ? seal_out.get() : nullptr)); }

  void request(message m, std::function<void(result<message>)> done) {
    if (!sock.is_open()) {
      done(fail(errc::peer_lost));
      return;
    }
    m.id = next_id++;
    pending.emplace(m.id, std::move(done));
    send(m);
  }

  // `f` on the rank's loop.
  template <class F>
  void to_rank(F f) {
    asio::post(events, std::move(f));
  }

  static asio::awaitable<void> read_loop(std::shared_ptr<impl> self) {
    std::error_code why;
    for (;;) {
      auto m = co_await read_message(self->sock, max_field, self->sealed_in ? self->open_in.get() : nullptr);
      if (!m) {
        why = m.error();
        if (why == errc::protocol_violation && self->sealed_in)
          log(log_level::error, "a message from the store fails authentication (forged, or altered on the way): the connection is closed");
        break;
      }
      if (m->type == m_welcome && self->open_in) self->sealed_in = true;
      if (m->type == m_peer_lost) {
        if (self->leaving)
          self->settle(fail(errc::peer_lost), "rank " + std::to_string(m->arg) + " died before the job's end");
        else
          self->tell([me = self.get(), r = static_cast<int>(m->arg)] {
            if (me->lost) me->to_rank([f = me->lost, r] { f(r); });
          });
        continue;
      }
      if (m->type == m_job_failed) {
        if (self->leaving)
          self->settle(fail(told_error(m->id)), wire::printable(m->val, max_failure_text));
        else {
          {
            std::lock_guard lock(self->mu);
            if (self->job_failure.empty()) self->job_failure = wire::printable(m->val, max_failure_text);
          }
          // arg: the rank that failed (its own report, or the one a stall's inquiry found
          // silent), -1 for the job as a whole.
          const int who = m->arg == static_cast<std::uint32_t>(-1) ? -1 : static_cast<int>(m->arg);
          // A rank waiting for keys that will never come (a rank that did not join) hears
          // why now, not at its timeout.
          if (!self->rejoining || who < 0)
            for (auto& [id, done] : std::exchange(self->pending, {})) done(fail(told_error(m->id)));
          self->tell([me = self.get(), code = std::uint64_t{m->id}, who, why = wire::printable(m->val, max_failure_text)] {
            if (me->failed) me->to_rank([f = me->failed, code, who, why] { f(code, who, why); });
          });
        }
        continue;
      }
      if (m->type == m_rejoined) {
        if (!self->leaving)
          self->tell([me = self.get(), r = static_cast<int>(m->arg)] {
            if (me->rejoined) me->to_rank([f = me->rejoined, r] { f(r); });
          });
        continue;
      }
      if (m->type == m_farewell) {
        self->settle({}, {});
        continue;
      }
      if (m->type == m_ping) {  // the store asks who is alive: answered once this rank's loop runs
        self->to_rank([self, id = m->id, seq = m->arg, call_of = self->call_of] {
          std::string call = call_of ? call_of(seq) : std::string();
          asio::post(self->io, [self, id, call = std::move(call)] {
            if (self->sock.is_open()) self->send({m_pong, id, 0, call, {}});
          });
        });
        continue;
      }
      if (m->type == m_verdict) {
        if (self->verdict) self->to_rank(self->verdict);
        continue;
      }
      auto it = self->pending.find(m->id);
      if (it == self->pending.end()) continue;
      auto done = std::move(it->second);
      self->pending.erase(it);
      done(std::move(*m));
    }
    auto pending = std::move(self->pending);
    for (auto& [id, done] : pending) done(fail(errc::peer_lost));
    if (self->leaving)
      self->settle(fail(errc::peer_lost), "the store closed before the job's end (" + why.message() + "): its process (rank 0, unless it runs apart) died?");
    else
      self->tell([me = self.get(), why] {
        if (me->closed) me->to_rank([f = me->closed, why] { f(why); });
      });
  }

  // On this connection's thread: `f` now, or once the rank has set its callbacks. What is
  // held refers to this object by a plain pointer (held by it, run by on_events' handler,
  // which owns a reference): a shared one would keep it alive for ever.
  void tell(std::function<void()> f) {
    if (events_set) f();
    else held.push_back(std::move(f));
  }
};

}  // namespace optcast::store
