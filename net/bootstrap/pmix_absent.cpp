// Built without libpmix: a PMIx launcher's ranks are told what to do instead.
#include "pmix.hpp"

namespace optcast::pmix {

bool available() noexcept { return false; }

place init() {
  throw setup_error(make_error_code(errc::invalid_argument),
                    "started by a PMIx launcher (PMIX_RANK is set), but this optcast was built without PMIx (Debian: apt install "
                    "libpmix-dev, then build again); or set OPTCAST_RANK, OPTCAST_SIZE and OPTCAST_STORE");
}
result<void> publish(const std::string&, const std::string&, std::chrono::milliseconds, std::string*) { return fail(errc::invalid_argument); }
result<std::string> get(const std::string&, std::string*) { return fail(errc::invalid_argument); }
void on_death(std::function<void(int, std::string)>) {}

}  // namespace optcast::pmix
