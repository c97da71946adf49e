// Errors as values: result<T> = tl::expected<T, std::error_code>, with optcast's own
// category for what collectives can go wrong with. Codes from other categories (asio's,
// the system's) pass through unchanged where they say more than ours would.
#pragma once

#include <stdexcept>
#include <string>
#include <system_error>

#include <tl/expected.hpp>

namespace optcast {

enum class errc {
  peer_lost = 1,       // a peer died or closed its connection while it was needed
  timeout,             // the collective's deadline passed
  cancelled,           // cancelled by the caller or by the communicator's shutdown
  protocol_violation,  // malformed frame, bad handshake, out-of-protocol message
  size_mismatch,       // a message's size differs from the posted receive's
  invalid_argument,    // bad input from the caller (root, counts, buffer sizes)
  broken,              // the communicator failed earlier and can run no collective
  deadlock,            // simulator: ranks wait on each other and nothing is in flight
  port_violation,      // simulator: more concurrent sends or receives than the model allows
  limit_exceeded,      // peers sent more for receives not yet posted than this rank may hold
  call_mismatch,       // ranks called a collective differently (root, size, operator, type, ...)
  revoked,             // a rank revoked the communicator (optcast::revoke)
};

const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

template <class T>
using result = tl::expected<T, std::error_code>;

inline tl::unexpected<std::error_code> fail(std::error_code ec) { return tl::unexpected(ec); }
inline tl::unexpected<std::error_code> fail(errc e) { return tl::unexpected(make_error_code(e)); }

// A failure while setting up a job (bad environment, store unreachable, handshake
// refused), with a message that says what to fix. Setup throws; collectives return.
class setup_error : public std::runtime_error {
public:
  setup_error(std::error_code ec, const std::string& what) : std::runtime_error(what), ec_(ec) {}
  std::error_code code() const noexcept { return ec_; }

private:
  std::error_code ec_;
};

// "message: detail" when a detail is known, for printing an error to a user.
std::string describe(std::error_code ec, const std::string& detail = {});

}  // namespace optcast

template <>
struct std::is_error_code_enum<optcast::errc> : std::true_type {};
