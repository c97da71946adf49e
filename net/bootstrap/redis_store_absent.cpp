// Built without hiredis: the Redis store says so where it is asked for.
#include "redis_store.hpp"

namespace optcast {

bool has_redis_store() noexcept { return false; }

struct redis_kv_store::conn {};
struct redis_kv_store::answer {};

redis_kv_store::redis_kv_store(options o) : o_(std::move(o)) {
  throw setup_error(make_error_code(errc::invalid_argument),
                    "this optcast was built without the Redis store (Debian: apt install libhiredis-dev, then build again)");
}
redis_kv_store::~redis_kv_store() = default;
std::string redis_kv_store::last_error() const { return {}; }
std::string redis_kv_store::key_of(const std::string& key) const { return key; }
result<redis_kv_store::answer> redis_kv_store::call(const std::vector<std::string>&) { return fail(errc::invalid_argument); }
result<void> redis_kv_store::set(const std::string&, const std::string&) { return fail(errc::invalid_argument); }
result<std::string> redis_kv_store::get(const std::string&, std::chrono::milliseconds) { return fail(errc::invalid_argument); }
result<std::int64_t> redis_kv_store::add(const std::string&, std::int64_t) { return fail(errc::invalid_argument); }
result<void> redis_kv_store::wait(const std::vector<std::string>&, std::chrono::milliseconds) { return fail(errc::invalid_argument); }

}  // namespace optcast
