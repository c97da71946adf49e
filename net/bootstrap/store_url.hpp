// Where the ranks of a job meet (OPTCAST_STORE, or the launcher's word for it): one table
// of store schemes, read by the URL parser, by job_config::from_env and by the messages
// that list what is accepted. A scheme of one's own is one row here.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "optcast/error.hpp"
#include "optcast/net/job.hpp"

namespace optcast::launcher {

// An OPTCAST_STORE split by its scheme's row. IPv6 hosts in brackets: tcp://[fd00::1]:29500.
struct store_url {
  std::string scheme;  // a row's name: "tcp", "file", "redis", "pmix"
  std::string host;
  std::uint16_t port = 0;
  std::string path;      // file: the directory; redis: the key prefix (may be empty)
  std::string password;  // redis only
};

struct store_scheme {
  enum class shape : std::uint8_t {
    address,         // [user:password@]host[:port][/prefix]
    absolute_path,   // /a/directory
    nothing,         // "pmix:" alone
  };
  std::string_view name;
  std::string_view form;       // how it is written: "redis://[:password@]host[:port][/prefix]"
  std::string_view summary;    // what it is, for messages and docs
  shape takes;
  std::uint16_t default_port;  // 0: the URL must give one
  bool credentials;            // an address may carry a password and a /prefix
  // Keys of several jobs may share the store (a directory, a Redis server): every rank
  // must know the job id before it reads anything there.
  bool needs_job_id;
  // Puts the store `u` names into `c` (optcast's store's address, a kv_store, PMIx);
  // `env` reads the environment. Throws setup_error.
  void (*configure)(job_config& c, const store_url& u, const std::function<const char*(const char*)>& env);
};

std::span<const store_scheme> store_schemes() noexcept;
const store_scheme* find_store_scheme(std::string_view name) noexcept;
// "host:port, file:///shared/dir, ..." for messages.
std::string store_forms();

// "host:port" is tcp://host:port; "pmix:" the launcher's PMIx server.
result<store_url> parse_store_url(std::string_view s, std::string* why = nullptr);

}  // namespace optcast::launcher
