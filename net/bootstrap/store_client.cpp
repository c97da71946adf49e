// A rank's connection to its job's store.
#include "store_client_impl.hpp"

namespace optcast::store {

using namespace proto;
using namespace io;
using asio::ip::tcp;

namespace {

template <class Pred>
bool drive(asio::io_context& io, Pred done, clock::time_point deadline) {
  while (!done()) {
    if (clock::now() >= deadline) return false;
    if (io.stopped()) io.restart();
    io.run_one_until(deadline);
  }
  return true;
}

tcp::endpoint resolve(asio::io_context& io, const address& a) {
  std::error_code ec;
  auto ip = asio::ip::make_address(a.host, ec);
  if (!ec) return {ip, a.port};
  tcp::resolver res(io);
  auto eps = res.resolve(a.host, std::to_string(a.port), ec);
  if (ec || eps.empty()) throw setup_error(ec ? ec : make_error_code(errc::invalid_argument),
                                           "cannot resolve store host '" + a.host + "'");
  return *eps.begin();
}

// Waits for the answer `start(done)` gives on the client's thread, up to `timeout`.
template <class T, class Start>
result<T> wait_answer(asio::io_context& io, std::chrono::milliseconds timeout, Start start) {
  struct slot {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<result<T>> value;
  };
  auto s = std::make_shared<slot>();
  asio::post(io, [s, start = std::move(start)]() mutable {
    start([s](result<T> v) {
      std::lock_guard lock(s->mu);
      s->value = std::move(v);
      s->cv.notify_all();
    });
  });
  std::unique_lock lock(s->mu);
  if (!s->cv.wait_for(lock, timeout, [&] { return s->value.has_value(); })) return fail(errc::timeout);
  return std::move(*s->value);
}

}  // namespace

client::client(const asio::any_io_executor& events, const address& server, int rank, int size,
               std::chrono::milliseconds timeout, std::string_view secret, std::uint64_t job_id, bool encrypt, bool rejoin)
    : impl_(std::make_shared<impl>(events)) {
  auto& io = impl_->io;
  try {
    handshake(server, rank, size, timeout, secret, job_id, encrypt, rejoin);
  } catch (...) {
    // The read loop ends on the closed socket and lets go of the connection's state.
    std::error_code ignored;
    impl_->sock.close(ignored);
    impl_->work.reset();
    io.restart();
    io.run();
    throw;
  }
  std::error_code ec;
  auto ep = impl_->sock.local_endpoint(ec);
  impl_->local_host = ec ? std::string("127.0.0.1") : ep.address().to_string();
  impl_->thread = std::thread([&io] { io.run(); });
}

// Before the thread starts: the calling thread drives the connection's io_context.
void client::handshake(const address& server, int rank, int size, std::chrono::milliseconds timeout,
                       std::string_view secret, std::uint64_t job_id, bool encrypt, bool rejoin) {
  auto& io = impl_->io;
  impl_->rejoining = rejoin;
  const auto key = auth::key::from_secret(secret);
  if (encrypt && !key) throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_ENCRYPT needs a job secret (OPTCAST_SECRET)");
  const auto deadline = clock::now() + timeout;
  const auto ep = resolve(io, server);
  impl_->server_name = server.str();
  // Rank 0 may not be listening yet: retry until the deadline.
  std::error_code last;  // the latest real failure, not our own cancel at the deadline
  for (;;) {
    bool fin = false;
    impl_->sock.async_connect(ep, [&](std::error_code ec) {
      if (ec != asio::error::operation_aborted) last = ec;
      fin = true;
    });
    if (!drive(io, [&] { return fin; }, deadline)) {
      std::error_code ignored;
      impl_->sock.close(ignored);
      drive(io, [&] { return fin; }, clock::now() + std::chrono::seconds(1));
      throw setup_error(make_error_code(errc::timeout),
                        "cannot reach the optcast store at " + server.str() + " within " +
                            std::to_string(timeout.count()) + " ms" +
                            (last ? " (" + last.message() + ")" : std::string()) +
                            "; is rank 0 running, and OPTCAST_STORE right?");
    }
    if (!last) break;
    std::error_code ignored;
    impl_->sock.close(ignored);
    asio::steady_timer pause(io, std::chrono::milliseconds(50));
    bool waited = false;
    pause.async_wait([&](std::error_code) { waited = true; });
    drive(io, [&] { return waited; }, clock::time_point::max());
  }
  impl_->sock.set_option(tcp::no_delay(true));
  asio::co_spawn(io, impl::read_loop(impl_), asio::detached);

  // The handshake's messages all carry id 0; each answer is awaited before the next.
  auto exchange = [&](message m) -> result<message> {
    bool fin = false;
    result<message> answer = fail(errc::timeout);
    impl_->pending.emplace(0, [&](result<message> a) {
      answer = std::move(a);
      fin = true;
    });
    impl_->send(m);
    if (!drive(io, [&] { return fin; }, deadline)) {
      impl_->pending.erase(0);
      throw setup_error(make_error_code(errc::timeout), "the store at " + server.str() + " did not answer");
    }
    if (!answer) throw setup_error(answer.error(), "the store at " + server.str() + " closed the connection during the handshake");
    if (answer->type == m_error)
      throw setup_error(make_error_code(errc::protocol_violation),
                        "the store at " + server.str() + " refused rank " + std::to_string(rank) + ": " + wire::printable(answer->val, 400));
    return answer;
  };
  transcript t(static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(size));
  if (key) t.client_nonce = auth::fresh_nonce();
  auto answer = exchange({m_hello, static_cast<std::uint32_t>(size), static_cast<std::uint32_t>(rank), hello_key(job_id, encrypt, rejoin),
                          key ? as_string(t.client_nonce) : std::string()});
  if (key) {
    if (answer->type != m_challenge || !copy_exact(t.server_nonce, answer->val))
      throw setup_error(make_error_code(errc::protocol_violation),
                        "the store at " + server.str() + " did not ask for the job secret, which this rank has "
                        "(an old store, or a secret set for some ranks only?)");
    if (encrypt) {  // before the welcome comes: the read loop opens what follows it
      impl_->seal_out = std::make_unique<auth::channel>(key->prove(client_seal_label, t.client_parts()));
      impl_->open_in = std::make_unique<auth::channel>(key->prove(server_seal_label, t.client_parts()));
    }
    answer = exchange({m_proof, 0, 0, {}, as_string(key->prove(client_label, t.client_parts()))});
  }
  const std::size_t want = key ? 8 + auth::proof_bytes : 8;
  if (answer->type != m_welcome || answer->val.size() != want)
    throw setup_error(make_error_code(errc::protocol_violation), "unexpected answer from the store at " + server.str());
  std::memcpy(t.job.data(), answer->val.data(), 8);
  auth::proof p{};
  if (key && (!copy_exact(p, std::string_view(answer->val).substr(8)) || !key->check(p, server_label, t.server_parts())))
    throw setup_error(make_error_code(errc::protocol_violation),
                      "the store at " + server.str() + " could not prove it knows the job secret: not this job's store");
  impl_->job_id = wire::get_u64(t.job.data());
  impl_->sealing = encrypt;
}

client::~client() {
  asio::post(impl_->io, [s = impl_] {
    std::error_code ignored;
    s->leaving = true;
    s->lost = nullptr;
    s->closed = nullptr;
    s->failed = nullptr;
    s->rejoined = nullptr;
    s->verdict = nullptr;
    s->sock.close(ignored);
  });
  impl_->work.reset();  // the thread ends once the read loop has
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint64_t client::job_id() const noexcept { return impl_->job_id; }

std::string client::local_host() const { return impl_->local_host; }

void client::set(std::string key, std::string val, std::function<void(result<void>)> done) {
  asio::post(impl_->io, [s = impl_, key = std::move(key), val = std::move(val), done = std::move(done)]() mutable {
    s->request({m_set, 0, 0, std::move(key), std::move(val)}, [s, done = std::move(done)](result<message> m) {
      s->to_rank([done, r = m ? result<void>{} : result<void>(fail(m.error()))] { done(r); });
    });
  });
}

void client::get(std::string key, std::function<void(result<std::string>)> done) {
  asio::post(impl_->io, [s = impl_, key = std::move(key), done = std::move(done)]() mutable {
    s->request({m_get, 0, 0, std::move(key), {}}, [s, done = std::move(done)](result<message> m) {
      s->to_rank([done, r = m ? result<std::string>(std::move(m->val)) : result<std::string>(fail(m.error()))] { done(r); });
    });
  });
}

result<void> client::set_wait(std::string key, std::string val, std::chrono::milliseconds timeout) {
  return wait_answer<void>(impl_->io, timeout, [s = impl_, key = std::move(key), val = std::move(val)](auto done) mutable {
    s->request({m_set, 0, 0, std::move(key), std::move(val)}, [done](result<message> m) {
      done(m ? result<void>{} : result<void>(fail(m.error())));
    });
  });
}

result<std::string> client::get_wait(std::string key, std::chrono::milliseconds timeout) {
  return wait_answer<std::string>(impl_->io, timeout, [s = impl_, key = std::move(key)](auto done) mutable {
    s->request({m_get, 0, 0, std::move(key), {}}, [done](result<message> m) {
      done(m ? result<std::string>(std::move(m->val)) : result<std::string>(fail(m.error())));
    });
  });
}

result<std::vector<std::string>> client::get_all_wait(std::vector<std::string> keys, std::chrono::milliseconds timeout) {
  using values = std::vector<std::string>;
  return wait_answer<values>(impl_->io, timeout, [s = impl_, keys = std::move(keys)](auto done) mutable {
    // Every request in flight at once; the first failure, or all the values in order.
    struct gather {
      values got;
      std::size_t left = 0;
      bool over = false;
    };
    auto g = std::make_shared<gather>();
    g->got.resize(keys.size());
    g->left = keys.size();
    if (keys.empty()) return done(values{});
    for (std::size_t i = 0; i < keys.size(); ++i)
      s->request({m_get, 0, 0, std::move(keys[i]), {}}, [g, i, done](result<message> m) {
        if (g->over) return;
        if (!m) {
          g->over = true;
          return done(fail(m.error()));
        }
        g->got[i] = std::move(m->val);
        if (--g->left == 0) {
          g->over = true;
          done(std::move(g->got));
        }
      });
  });
}

std::string client::job_failure() const {
  std::lock_guard lock(impl_->mu);
  return impl_->job_failure;
}

void client::on_events(std::function<void(int)> lost, std::function<void(std::error_code)> closed,
                       std::function<void(std::uint64_t, int, std::string)> failed, std::function<void(int)> rejoined) {
  asio::post(impl_->io, [s = impl_, lost = std::move(lost), closed = std::move(closed), failed = std::move(failed),
                         rejoined = std::move(rejoined)]() mutable {
    s->lost = std::move(lost);
    s->closed = std::move(closed);
    s->failed = std::move(failed);
    s->rejoined = std::move(rejoined);
    if (s->events_set) return;
    s->events_set = true;
    for (auto& f : std::exchange(s->held, {})) f();
  });
}

void client::report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck, std::string call) {
  why.resize(std::min(why.size(), max_failure_text));
  asio::post(impl_->io, [s = impl_, seq, why = std::move(why), nobody_stuck = std::move(nobody_stuck), call = std::move(call)]() mutable {
    if (s->leaving || !s->sock.is_open()) return;
    s->verdict = std::move(nobody_stuck);
    s->send({m_stalled, 0, seq, std::move(call), std::move(why)});
  });
}

void client::answer_inquiries(std::function<std::string(std::uint32_t)> call_of) {
  asio::post(impl_->io, [s = impl_, call_of = std::move(call_of)]() mutable { s->call_of = std::move(call_of); });
}

void client::say(std::uint8_t type) {
  asio::post(impl_->io, [s = impl_, type] {
    if (s->leaving || !s->sock.is_open()) return;
    s->send({type, 0, 0, {}, {}});
  });
}

void client::rejoin() { say(m_rejoin); }
void client::admitted() { say(m_admit); }

void client::excuse(const std::vector<int>& ranks) {
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
  asio::post(impl_->io, [s = impl_, list = std::move(list)]() mutable {
    if (s->leaving || !s->sock.is_open()) return;
    s->send({m_excuse, 0, 0, {}, std::move(list)});
  });
}

void client::report_failure(std::uint32_t code, std::string why) {
  why.resize(std::min(why.size(), max_failure_text));
  asio::post(impl_->io, [s = impl_, code, why = std::move(why)]() mutable {
    if (s->leaving || !s->sock.is_open()) return;
    s->send({m_failed, 0, code, {}, std::move(why)});
  });
}

result<void> client::bye(std::chrono::milliseconds wait, std::string* why, std::uint32_t last_seq, std::string last_call) {
  auto& s = *impl_;
  {
    std::unique_lock lock(s.mu);
    if (!s.outcome) {
      lock.unlock();
      asio::post(s.io, [self = impl_, last_seq, last_call = std::move(last_call)] {
        if (self->leaving) return;
        self->leaving = true;
        if (!self->sock.is_open()) {
          self->settle(fail(errc::peer_lost), "the connection to the store on rank 0 was lost");
          return;
        }
        self->send({m_bye, 0, last_seq, last_call, {}});
        self->out.on_drained([self] {
          std::lock_guard l(self->mu);
          self->bye_sent = true;
          self->cv.notify_all();
        });
      });
      lock.lock();
      // On the wire before anything else, whatever `wait` (else the store takes this
      // rank for dead).
      s.cv.wait_for(lock, std::chrono::seconds(5), [&] { return s.bye_sent || s.outcome.has_value(); });
      if (!s.cv.wait_for(lock, wait, [&] { return s.outcome.has_value(); })) {
        s.outcome = fail(errc::timeout);
        s.outcome_why = "not every rank finished within " + std::to_string(wait.count()) +
                        " ms of this rank's end (a rank stalled, or is still in a collective)";
      }
      lock.unlock();
      asio::post(s.io, [self = impl_] {
        self->leaving = true;
        std::error_code ec;
        self->sock.shutdown(tcp::socket::shutdown_both, ec);
        self->sock.close(ec);
      });
      lock.lock();
    }
    if (why) *why = s.outcome_why;
    return *s.outcome;
  }
}

}  // namespace optcast::store
