// A job's store in a directory every rank can reach: a shared file system (NFS, Lustre,
// CephFS) across hosts, or any directory on one host. `OPTCAST_STORE=file:///shared/dir`.
//
// One file per key, written under a temporary name and renamed into place (rename is
// atomic on POSIX file systems, NFS included), so a reader sees a whole value or none;
// get and wait poll (1 ms, backing off to 20 ms); add holds an flock on the key's lock
// file while it reads, adds and renames. Keys become file names with every byte outside
// [A-Za-z0-9._-] written as %XX, so no key escapes the directory.
#pragma once

#include <string>

#include "optcast/net/kv_store.hpp"

namespace optcast {

class file_kv_store final : public kv_store {
public:
  // `dir` is created (mode 0700) if missing; throws setup_error when it cannot be, or is
  // not a writable directory. `prefix` (a job id, say) is put before every key, so that
  // jobs sharing the directory never read each other's keys.
  explicit file_kv_store(std::string dir, std::string prefix = {});

  result<void> set(const std::string& key, const std::string& value) override;
  result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  result<std::int64_t> add(const std::string& key, std::int64_t delta) override;
  result<void> wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  // The file that holds `key` (for tools and tests).
  std::string path_of(const std::string& key) const;

private:
  result<void> write(const std::string& path, const std::string& value);
  std::string dir_;
  std::string prefix_;
};

}  // namespace optcast
