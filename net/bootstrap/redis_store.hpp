// A job's store in a Redis server the service already runs:
// `OPTCAST_STORE=redis://[:password@]host:port/prefix`. Built on hiredis (Debian
// libhiredis-dev); absent from a build without it (optcast::has_redis_store says).
//
// Keys are "<prefix>/<job_session>/<key>", so jobs sharing a server never read each other's; each
// expires a day after it was last written, so a server shared by many jobs does not fill
// up with theirs. get and wait poll (1 ms, backing off to 20 ms): a job reads its store
// only while it starts and ends. add is INCRBY (atomic on the server). One connection per
// store object, made at the first call (retried until the connect timeout: the ranks may
// start before the server is up), and made again if the server drops it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "optcast/net/kv_store.hpp"

namespace optcast {

bool has_redis_store() noexcept;

class redis_kv_store final : public kv_store {
public:
  struct options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 6379;
    std::string password;  // empty: no AUTH
    std::string prefix;    // put before every key, then '/' (the job's id, say)
    std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
    std::chrono::seconds ttl{std::chrono::hours(24)};
  };
  // Throws setup_error without hiredis in the build.
  explicit redis_kv_store(options o);
  ~redis_kv_store() override;

  result<void> set(const std::string& key, const std::string& value) override;
  result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  result<std::int64_t> add(const std::string& key, std::int64_t delta) override;
  result<void> wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  // What the last failure was, in the server's or hiredis's words (for error messages).
  std::string last_error() const override;
  const options& settings() const noexcept { return o_; }

private:
  struct conn;
  struct answer;
  // One command (connecting first if need be), under mu_; what the server answered.
  result<answer> call(const std::vector<std::string>& words);
  std::string key_of(const std::string& key) const;
  options o_;
  mutable std::mutex mu_;
  std::unique_ptr<conn> c_;
  std::string last_error_;
  bool ever_connected_ = false;
  std::chrono::steady_clock::time_point born_;
};

}  // namespace optcast
