#include "optcast/error.hpp"

namespace optcast {

namespace {

class category final : public std::error_category {
public:
  const char* name() const noexcept override { return "optcast"; }
  std::string message(int code) const override {
    switch (static_cast<errc>(code)) {
      case errc::peer_lost: return "peer lost";
      case errc::timeout: return "timed out";
      case errc::cancelled: return "cancelled";
      case errc::protocol_violation: return "protocol violation";
      case errc::size_mismatch: return "message size mismatch";
      case errc::invalid_argument: return "invalid argument";
      case errc::broken: return "communicator broken by an earlier failure";
      case errc::deadlock: return "deadlock (every waiting rank waits on another, nothing in flight)";
      case errc::port_violation: return "port violation (more concurrent messages than the model's ports)";
      case errc::limit_exceeded: return "limit exceeded (more unexpected message bytes than this rank may hold)";
      case errc::call_mismatch: return "the ranks called the collective differently";
      case errc::revoked: return "the communicator was revoked";
    }
    return "unknown optcast error " + std::to_string(code);
  }
};

}  // namespace

const std::error_category& error_category() noexcept {
  static const category instance;
  return instance;
}

std::string describe(std::error_code ec, const std::string& detail) {
  std::string out = ec.message();
  if (!detail.empty()) out += ": " + detail;
  return out;
}

}  // namespace optcast
