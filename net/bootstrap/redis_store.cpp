#include "redis_store.hpp"

#include <hiredis/hiredis.h>

#include <cerrno>
#include <thread>


namespace optcast {

bool has_redis_store() noexcept { return true; }

namespace {

timeval to_timeval(std::chrono::milliseconds d) {
  return timeval{static_cast<time_t>(d.count() / 1000), static_cast<suseconds_t>((d.count() % 1000) * 1000)};
}

// A command that no answer comes to (a server stopped, a network cut) fails after this,
// rather than holding the rank forever.
constexpr std::chrono::milliseconds k_command_timeout{std::chrono::seconds(10)};

}  // namespace

struct redis_kv_store::conn {
  redisContext* c = nullptr;
  ~conn() {
    if (c) redisFree(c);
  }
};

struct redis_kv_store::answer {
  int type = 0;
  std::string str;
  long long integer = 0;
};

redis_kv_store::redis_kv_store(options o) : o_(std::move(o)), born_(std::chrono::steady_clock::now()) {
  if (o_.host.empty()) throw setup_error(make_error_code(errc::invalid_argument), "the Redis store needs a host");
  if (o_.ttl.count() <= 0) throw setup_error(make_error_code(errc::invalid_argument), "the Redis store's keys need a positive lifetime");
}

redis_kv_store::~redis_kv_store() = default;

std::string redis_kv_store::last_error() const {
  std::lock_guard l(mu_);
  return last_error_;
}

std::string redis_kv_store::key_of(const std::string& key) const { return o_.prefix.empty() ? key : o_.prefix + "/" + key; }

result<redis_kv_store::answer> redis_kv_store::call(const std::vector<std::string>& words) {
  const std::string where = "Redis at " + o_.host + ":" + std::to_string(o_.port);
  // Until the first connection, the server may not be up yet: it is tried again until the
  // connect timeout. Once connected, a lost connection is made again once per command.
  for (int attempt = 0; !c_; ++attempt) {
    auto c = std::make_unique<conn>();
    c->c = redisConnectWithTimeout(o_.host.c_str(), o_.port, to_timeval(std::chrono::seconds(5)));
    if (c->c && !c->c->err) {
      redisSetTimeout(c->c, to_timeval(k_command_timeout));
      if (!o_.password.empty()) {
        std::string why;
        auto* r = static_cast<redisReply*>(redisCommand(c->c, "AUTH %b", o_.password.data(), o_.password.size()));
        const bool ok = r && r->type != REDIS_REPLY_ERROR;
        if (r) why = r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : std::string();
        else why = c->c->errstr;
        if (r) freeReplyObject(r);
        if (!ok) {
          last_error_ = where + " refused the password: " + why;
          return fail(errc::protocol_violation);
        }
      }
      c_ = std::move(c);
      ever_connected_ = true;
      break;
    }
    last_error_ = "cannot reach " + where + ": " + (c->c ? std::string(c->c->errstr) : std::string("out of memory"));
    if (ever_connected_ || std::chrono::steady_clock::now() - born_ >= o_.connect_timeout)
      return fail(std::make_error_code(std::errc::connection_refused));
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt < 10 ? 20 : 200));
  }
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  for (const auto& w : words) {
    argv.push_back(w.data());
    lens.push_back(w.size());
  }
  auto* r = static_cast<redisReply*>(redisCommandArgv(c_->c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (!r) {
    // The context cannot be used again after an error: the next command connects anew.
    last_error_ = where + ": " + c_->c->errstr;
    const int e = c_->c->err == REDIS_ERR_IO ? errno : 0;
    c_.reset();
    return fail(e ? std::error_code(e, std::system_category()) : std::make_error_code(std::errc::connection_aborted));
  }
  answer a;
  a.type = r->type;
  if (r->str) a.str.assign(r->str, r->len);
  a.integer = r->integer;
  freeReplyObject(r);
  if (a.type == REDIS_REPLY_ERROR) {
    last_error_ = where + " answered: " + a.str;
    return fail(errc::protocol_violation);
  }
  return a;
}

result<void> redis_kv_store::set(const std::string& key, const std::string& value) {
  std::lock_guard l(mu_);
  auto a = call({"SET", key_of(key), value, "EX", std::to_string(o_.ttl.count())});
  if (!a) return fail(a.error());
  return {};
}

result<std::string> redis_kv_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string k = key_of(key);
  std::string value;
  auto r = poll_until(
      [&]() -> result<bool> {
        std::lock_guard l(mu_);
        auto a = call({"GET", k});
        if (!a) return fail(a.error());
        if (a->type == REDIS_REPLY_NIL) return false;
        if (a->type != REDIS_REPLY_STRING) {
          last_error_ = "Redis holds something other than a string at '" + k + "'";
          return fail(errc::protocol_violation);
        }
        value = std::move(a->str);
        return true;
      },
      timeout);
  if (!r) return fail(r.error());
  return value;
}

result<std::int64_t> redis_kv_store::add(const std::string& key, std::int64_t delta) {
  const std::string k = key_of(key);
  std::lock_guard l(mu_);
  // One script, atomic on the server, so that the key never lives without its expiry.
  auto a = call({"EVAL", "local v = redis.call('INCRBY', KEYS[1], ARGV[1]) redis.call('EXPIRE', KEYS[1], ARGV[2]) return v", "1", k,
                 std::to_string(delta), std::to_string(o_.ttl.count())});
  if (!a) return fail(a.error());
  if (a->type != REDIS_REPLY_INTEGER) {
    last_error_ = "Redis did not answer an integer for '" + k + "'";
    return fail(errc::protocol_violation);
  }
  return static_cast<std::int64_t>(a->integer);
}

result<void> redis_kv_store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> ks;
  for (const auto& k : keys) ks.push_back(key_of(k));
  std::size_t next = 0;  // the keys before it are there
  return poll_until(
      [&]() -> result<bool> {
        std::lock_guard l(mu_);
        for (; next < ks.size(); ++next) {
          auto a = call({"EXISTS", ks[next]});
          if (!a) return fail(a.error());
          if (a->integer == 0) return false;
        }
        return true;
      },
      timeout);
}

}  // namespace optcast
