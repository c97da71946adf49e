// The store rank 0 hosts: the job table (store_protocol.hpp) behind a listening socket.
#include "store_io.hpp"

namespace optcast::store {

using namespace proto;
using namespace io;
using asio::ip::tcp;

result<address> parse_address(std::string_view s) {
  const auto colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == s.size())
    return fail(errc::invalid_argument);
  unsigned long port = 0;
  for (char c : s.substr(colon + 1)) {
    if (c < '0' || c > '9') return fail(errc::invalid_argument);
    port = port * 10 + static_cast<unsigned long>(c - '0');
    if (port > 65535) return fail(errc::invalid_argument);
  }
  std::string host(s.substr(0, colon));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return address{host, static_cast<std::uint16_t>(port)};
}

// ---------------------------------------------------------------------------- server

struct server_conn : std::enable_shared_from_this<server_conn> {
  explicit server_conn(tcp::socket s) : sock(std::move(s)) {}
  tcp::socket sock;
  outbox out;
  // Encrypted (OPTCAST_ENCRYPT): the two directions' channels, made at the proof; what
  // this end sends is sealed once its welcome is out (`sealing`).
  std::unique_ptr<auth::channel> seal_out, open_in;
  bool sealing = false;
  void send(const message& m) { out.send(shared_from_this(), sock, on_wire(m, sealing ? seal_out.get() : nullptr)); }
};

struct server::impl : std::enable_shared_from_this<server::impl> {
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  int size = 0;
  std::uint64_t job_id = 0;
  std::uint16_t port = 0;
  std::optional<auth::key> key;  // none: no authentication
  bool encrypt = false;          // every connection sealed after its handshake
  std::thread thread;

  std::vector<std::shared_ptr<server_conn>> ranks;
  // Every connection, ranks or not yet, for the shutdown to close.
  std::vector<std::weak_ptr<server_conn>> conns;
  std::optional<table> state;  // the protocol's part (store_protocol.hpp)

  mutable std::mutex mu;
  std::condition_variable cv;
  int joined = 0;    // ranks' connections made (a replacement's too)
  int open = 0;      // ranks' connections open now
  int slots = 0;     // ranks that have joined at least once
  std::vector<bool> ever;  // by rank: has joined (under mu)
  bool job_failed = false;  // under mu: state->failed(), for other threads

  void start() {
    port = acceptor.local_endpoint().port();
    ranks.assign(static_cast<std::size_t>(size), nullptr);
    ever.assign(static_cast<std::size_t>(size), false);
    state.emplace(size, [this](int r, const message& m) {
      if (auto& c = ranks[static_cast<std::size_t>(r)]) c->send(m);
    });
    asio::co_spawn(io, accept_loop(shared_from_this()), asio::detached);
    thread = std::thread([this] { io.run(); });
  }

  // The job's state as the table has it now: a failure of a rank the survivors went on
  // without (shrink) is forgotten there, and so here.
  void note_failure() {
    {
      std::lock_guard lock(mu);
      if (job_failed == state->failed()) return;
      job_failed = state->failed();
    }
    cv.notify_all();
  }

  asio::steady_timer join_timer{io};  // expect_all_within
  // After every message: a stall inquiry that has just opened is closed after its window.
  asio::steady_timer inquiry_timer{io};
  std::uint32_t timed_inquiry = 0;
  void after_message() {
    note_failure();
    // A rank the survivors went on without is cut off from the store as well: it is out of
    // the job (a stopped one finds so when it runs again), and rank 0 need not wait for it.
    for (int r = 0; r < size; ++r)
      if (auto& c = ranks[static_cast<std::size_t>(r)]; c && state->excused(r) && !state->replacing(r)) {
        std::error_code ignored;
        c->sock.shutdown(tcp::socket::shutdown_both, ignored);
      }
    const auto q = state->inquiry();
    if (!q || q == timed_inquiry) return;
    timed_inquiry = q;
    inquiry_timer.expires_after(inquiry_window);
    inquiry_timer.async_wait([self = shared_from_this(), q](std::error_code ec) {
      if (ec || self->state->inquiry() != q) return;
      self->state->conclude();
      self->note_failure();
    });
  }

  static asio::awaitable<void> accept_loop(std::shared_ptr<impl> self) {
    for (;;) {
      auto [ec, sock] = co_await self->acceptor.async_accept(use_nothrow);
      if (ec) {
        if (ec == asio::error::operation_aborted || !self->acceptor.is_open()) co_return;
        continue;  // e.g. EMFILE: keep serving the connections we have
      }
      std::error_code ignored;
      sock.set_option(tcp::no_delay(true), ignored);
      auto c = std::make_shared<server_conn>(std::move(sock));
      std::erase_if(self->conns, [](auto& w) { return w.expired(); });
      self->conns.push_back(c);
      asio::co_spawn(self->io, serve(self, c), asio::detached);
    }
  }

  void rank_finished() {
    {
      std::lock_guard lock(mu);
      --open;
    }
    cv.notify_all();
  }

  // The hello, and with a secret the challenge and proof; welcomes the client and returns
  // its rank, or refuses it and returns -1.
  static asio::awaitable<int> handshake(std::shared_ptr<impl> self, std::shared_ptr<server_conn> c) {
    auto first = co_await read_message(c->sock, max_hello_field);
    if (!first) co_return -1;  // a stranger that closed, sent garbage or nothing: nothing to answer
    const message& h = *first;
    auto refuse = [&](const std::string& why) {
      log(log_level::warn, "store: refused " + describe_peer(c->sock) + ": " + why);
      c->send({m_error, 0, 0, {}, why});
      return -1;
    };
    if (auto no = judge_hello(h, self->key.has_value())) co_return refuse(*no);
    transcript t(h.arg, h.id);
    if (self->key) {
      copy_exact(t.client_nonce, h.val);
      t.server_nonce = auth::fresh_nonce();
      c->send({m_challenge, 0, 0, {}, as_string(t.server_nonce)});
      auto answer = co_await read_message(c->sock, max_hello_field);
      if (!answer) co_return -1;
      auth::proof p{};
      if (answer->type != m_proof || !copy_exact(p, answer->val) || !self->key->check(p, client_label, t.client_parts()))
        co_return refuse("authentication failed: the client does not know the job secret");
    }
    // Only now, talking to a member of the job, say more than "no".
    if (auto no = judge_job(h, self->job_id)) co_return refuse(*no);
    if (auto no = judge_sealing(h, self->encrypt)) co_return refuse(*no);
    auto no = judge_member(h, self->size, [&](int r) { return self->state->taken(r); });
    if (!no) no = self->state->judge_rejoin(static_cast<int>(h.arg), rejoins(h));
    if (no) {
      // A member (it passed authentication, or there is none to pass) that counts another
      // size: the job cannot run, and its ranks would wait for their deadlines otherwise.
      if (h.id != static_cast<std::uint32_t>(self->size)) {
        self->state->misfit(h.arg, "the ranks disagree on the job's size: " + *no);
        self->note_failure();
      }
      co_return refuse(*no);
    }
    wire::put_u64(t.job.data(), self->job_id);
    std::string val = as_string(t.job);
    if (self->key) val += as_string(self->key->prove(server_label, t.server_parts()));
    if (self->encrypt) {
      c->seal_out = std::make_unique<auth::channel>(self->key->prove(server_seal_label, t.client_parts()));
      c->open_in = std::make_unique<auth::channel>(self->key->prove(client_seal_label, t.client_parts()));
    }
    c->send({m_welcome, 0, 0, {}, std::move(val)});
    c->sealing = self->encrypt;
    co_return static_cast<int>(h.arg);
  }

  static asio::awaitable<void> serve(std::shared_ptr<impl> self, std::shared_ptr<server_conn> c) {
    asio::steady_timer deadline(self->io, hello_timeout);
    deadline.async_wait([c](std::error_code ec) {
      if (ec) return;  // the handshake finished
      log(log_level::warn, "store: dropped " + describe_peer(c->sock) + ", which did not finish its handshake within 10 s");
      std::error_code ignored;
      c->sock.close(ignored);
    });
    const int r = co_await handshake(self, c);
    deadline.cancel();
    if (r < 0) co_return;
    self->ranks[static_cast<std::size_t>(r)] = c;
    self->state->join(r);
    {
      std::lock_guard lock(self->mu);
      ++self->joined;
      ++self->open;
      if (!self->state->said_bye(r) && !self->ever[static_cast<std::size_t>(r)]) {
        self->ever[static_cast<std::size_t>(r)] = true;
        ++self->slots;
      }
    }

    for (;;) {
      auto m = co_await read_message(c->sock, max_field, c->open_in.get());
      if (!m) {
        if (m.error() == errc::protocol_violation && c->open_in)
          log(log_level::error, "store: rank " + std::to_string(r) + "'s message fails authentication (forged, or altered on the way): its connection is closed");
        break;
      }
      const bool in_protocol = self->state->on_message(r, *m);
      self->after_message();
      if (!in_protocol) break;
    }
    // Gone: after its goodbye it finished; without, it died, and every other rank is told.
    self->ranks[static_cast<std::size_t>(r)] = nullptr;
    if (!self->state->said_bye(r)) log(log_level::info, "store: rank " + std::to_string(r) + " disconnected without goodbye");
    self->state->leave(r);
    self->note_failure();
    std::error_code ignored;
    c->sock.shutdown(tcp::socket::shutdown_both, ignored);
    self->rank_finished();
  }
};

namespace {
std::shared_ptr<server::impl> make_server(int size, std::uint64_t job_id, std::string_view secret, bool encrypt) {
  if (size < 1) throw setup_error(make_error_code(errc::invalid_argument), "store: a job needs at least one rank");
  auto s = std::make_shared<server::impl>();
  s->size = size;
  s->job_id = job_id;
  s->key = auth::key::from_secret(secret);
  if (encrypt && !s->key) throw setup_error(make_error_code(errc::invalid_argument), "store: OPTCAST_ENCRYPT needs a job secret (OPTCAST_SECRET)");
  s->encrypt = encrypt;
  return s;
}
}  // namespace

server::server(const std::string& host, std::uint16_t port, int size, std::uint64_t job_id, std::string_view secret, bool encrypt)
    : impl_(make_server(size, job_id, secret, encrypt)) {
  std::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) throw setup_error(ec, "store: '" + host + "' is not an IP address to listen on");
  tcp::endpoint ep(addr, port);
  impl_->acceptor.open(ep.protocol(), ec);
  if (!ec) impl_->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl_->acceptor.bind(ep, ec);
  if (!ec) impl_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw setup_error(ec, "store: cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  impl_->start();
}

server::server(int listening_fd, int size, std::uint64_t job_id, std::string_view secret, bool encrypt)
    : impl_(make_server(size, job_id, secret, encrypt)) {
  std::error_code ec;
  impl_->acceptor.assign(tcp::v4(), listening_fd, ec);
  if (ec) throw setup_error(ec, "store: cannot serve on inherited socket " + std::to_string(listening_fd) + ": " + ec.message());
  impl_->start();
}

server::~server() {
  // Not io.stop(): the coroutines' frames, left pending in the io_context that the impl
  // owns, would hold the impl forever. With every socket closed they all end, and run()
  // returns when nothing is left.
  asio::post(impl_->io, [s = impl_.get()] {
    std::error_code ec;
    s->acceptor.close(ec);
    s->inquiry_timer.cancel();
    s->join_timer.cancel();
    for (auto& w : s->conns)
      if (auto c = w.lock()) c->sock.close(ec);
  });
  if (impl_->thread.joinable()) impl_->thread.join();
}

std::uint16_t server::port() const noexcept { return impl_->port; }
std::uint64_t server::job_id() const noexcept { return impl_->job_id; }

bool server::failed() const {
  std::lock_guard lock(impl_->mu);
  return impl_->job_failed;
}

void server::expect_all_within(std::chrono::milliseconds timeout) {
  asio::post(impl_->io, [s = impl_, timeout] {
    s->join_timer.expires_after(timeout);
    s->join_timer.async_wait([s, timeout](std::error_code ec) {
      if (ec) return;
      s->state->missing_after(timeout);
      s->note_failure();
    });
  });
}

bool server::wait_all_done(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  // Every slot joined and no connection open: a replacement counts as its slot.
  return impl_->cv.wait_for(lock, timeout, [&] { return impl_->slots >= impl_->size && impl_->open == 0; });
}

bool server::wait_over(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  return impl_->cv.wait_for(lock, timeout, [&] {
    return (impl_->slots >= impl_->size && impl_->open == 0) || (impl_->job_failed && impl_->open == 0);
  });
}

}  // namespace optcast::store
