#include "file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>


namespace optcast {

namespace {

std::error_code errno_code() { return {errno, std::system_category()}; }

// Closes on every path out.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

// The whole file, or ENOENT's error when there is none yet.
result<std::string> read_file(const std::string& path) {
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return fail(errno_code());
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno_code());
    if (n == 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

bool missing(const std::error_code& ec) { return ec == std::errc::no_such_file_or_directory; }

}  // namespace

file_kv_store::file_kv_store(std::string dir, std::string prefix) : dir_(std::move(dir)), prefix_(std::move(prefix)) {
  if (dir_.empty()) throw setup_error(make_error_code(errc::invalid_argument), "the file store needs a directory");
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
    throw setup_error(errno_code(), "cannot create the store's directory '" + dir_ + "': " + std::strerror(errno));
  struct stat st{};
  if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw setup_error(make_error_code(errc::invalid_argument), "the file store's '" + dir_ + "' is not a directory");
  if (::access(dir_.c_str(), W_OK | X_OK) != 0)
    throw setup_error(errno_code(), "the file store's directory '" + dir_ + "' is not writable: " + std::strerror(errno));
}

std::string file_kv_store::path_of(const std::string& key) const {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string name;
  for (const unsigned char c : prefix_ + key) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
        (c == '.' && !name.empty()))  // never a leading dot: "." and ".." and hidden temporaries
      name += static_cast<char>(c);
    else {
      name += '%';
      name += hex[c >> 4];
      name += hex[c & 15];
    }
  }
  return dir_ + "/" + name;
}

result<void> file_kv_store::write(const std::string& path, const std::string& value) {
  // A name of this process's and thread's own beside the target, so that the rename stays
  // on one file system and two writers never share a temporary.
  static std::atomic<unsigned long> counter{0};
  const std::string tmp = dir_ + "/.tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "." +
                          std::to_string(counter++);
  {
    fd_guard f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)};
    if (f.fd < 0) return fail(errno_code());
    std::size_t done = 0;
    while (done < value.size()) {
      const ssize_t n = ::write(f.fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const auto ec = errno_code();
        ::unlink(tmp.c_str());
        return fail(ec);
      }
      done += static_cast<std::size_t>(n);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const auto ec = errno_code();
    ::unlink(tmp.c_str());
    return fail(ec);
  }
  return {};
}

result<void> file_kv_store::set(const std::string& key, const std::string& value) { return write(path_of(key), value); }

result<std::string> file_kv_store::get(const std::string& key, std::chrono::milliseconds timeout) {
  const std::string path = path_of(key);
  std::string value;
  auto r = poll_until(
      [&]() -> result<bool> {
        auto v = read_file(path);
        if (v) {
          value = std::move(*v);
          return true;
        }
        if (missing(v.error())) return false;
        return fail(v.error());
      },
      timeout);
  if (!r) return fail(r.error());
  return value;
}

result<std::int64_t> file_kv_store::add(const std::string& key, std::int64_t delta) {
  const std::string path = path_of(key);
  fd_guard lock{::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (lock.fd < 0) return fail(errno_code());
  while (::flock(lock.fd, LOCK_EX) != 0)
    if (errno != EINTR) return fail(errno_code());
  std::int64_t now = 0;
  if (auto v = read_file(path)) {
    auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), now);
    if (ec != std::errc{} || end != v->data() + v->size()) return fail(errc::invalid_argument);
  } else if (!missing(v.error())) {
    return fail(v.error());
  }
  const std::int64_t sum = now + delta;
  if (auto w = write(path, std::to_string(sum)); !w) return fail(w.error());
  return sum;  // the lock goes with its descriptor
}

result<void> file_kv_store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> paths;
  for (const auto& k : keys) paths.push_back(path_of(k));
  std::size_t next = 0;  // the keys before it are there
  return poll_until(
      [&]() -> result<bool> {
        for (; next < paths.size(); ++next) {
          struct stat st{};
          if (::stat(paths[next].c_str(), &st) == 0) continue;
          if (errno == ENOENT) return false;
          return fail(errno_code());
        }
        return true;
      },
      timeout);
}

}  // namespace optcast
