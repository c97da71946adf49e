// libfabric, loaded on first use instead of linked. Loading libfabric runs the library
// constructors of its providers' dependencies (on Debian 12, libinfinipath calibrates a
// clock with about 0.2 s of usleep), which every program linked with optcast paid at
// every start, whether it made a libfabric fabric or not. The functions are looked up
// by the symbol versions a link against the build's libfabric would have bound
// (libfabric_symbols.sh), so a newer libfabric serves the same interface as before.
#include "ofi_fabric.hpp"

#include <dlfcn.h>

#include "net/libfabric_symbols.h"

namespace optcast::ofi::impl {

namespace {

struct loaded {
  libfabric_api api{};
  std::string why;  // empty: loaded
};

template <class F>
bool find(void* lib, const char* path, F& out, const char* name, const char* version, std::string& why) {
  out = reinterpret_cast<F>(dlvsym(lib, name, version));
  if (!out) why = std::string("libfabric (") + path + ") has no " + name + "@" + version + ": older than the one optcast was built with";
  return out != nullptr;
}

loaded load() {
  loaded l;
  const char* path = std::getenv("OPTCAST_LIBFABRIC");
  if (!path || !*path) path = OPTCAST_FI_SONAME;
  // rxm posts FI_OFI_RXM_MSG_RX_SIZE receive buffers of about 16 KiB to its shared
  // receive context when an endpoint is enabled, zeroed: at its default (4,096 in 1.17)
  // 68 MiB and 17,400 page faults an endpoint, 0.17 s of fi_enable on this VM, paid by
  // every rank of a job at start and by every endpoint of a world of threads. 1,024 (one
  // chunk of its pool, 4,500 faults) still buffer 16 MiB of eager messages; the 8 B to
  // 4 MiB collectives of optcast-bench coll on 4 ranks timed the same within their noise
  // (not tried: a flood of small messages that outruns 1,024 buffers). The
  // provider reads its parameters from the environment only, once, when fi_getinfo first
  // runs: set here, before that, and never over the user's own value.
  ::setenv("FI_OFI_RXM_MSG_RX_SIZE", "1024", 0);
  // Never closed: providers keep threads and handlers inside it.
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    l.why = std::string("cannot load libfabric (") + path + "): " + (e ? e : "unknown error") +
            " (Debian: apt install libfabric1; OPTCAST_LIBFABRIC names another)";
    return l;
  }
  auto& a = l.api;
  (void)(find(lib, path, a.getinfo, "fi_getinfo", OPTCAST_FI_GETINFO_VERSION, l.why) &&
         find(lib, path, a.freeinfo, "fi_freeinfo", OPTCAST_FI_FREEINFO_VERSION, l.why) &&
         find(lib, path, a.dupinfo, "fi_dupinfo", OPTCAST_FI_DUPINFO_VERSION, l.why) &&
         find(lib, path, a.fabric, "fi_fabric", OPTCAST_FI_FABRIC_VERSION, l.why) &&
         find(lib, path, a.strerror, "fi_strerror", OPTCAST_FI_STRERROR_VERSION, l.why));
  return l;
}

const loaded& library() {
  static const loaded l = load();  // once, thread-safe
  return l;
}

}  // namespace

const libfabric_api* try_lf(std::string* why) noexcept {
  const auto& l = library();
  if (!l.why.empty()) {
    if (why) *why = l.why;
    return nullptr;
  }
  return &l.api;
}

const libfabric_api& lf() {
  std::string why;
  if (const auto* a = try_lf(&why)) return *a;
  throw setup_error(make_error_code(errc::invalid_argument), why);
}

}  // namespace optcast::ofi::impl
