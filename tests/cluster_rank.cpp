// One rank of a job started across hosts by a launcher (tests/cluster_test.sh): joins
// from the environment as a user's program does (optcast::join), runs a broadcast, an
// allreduce and a scatter, checks every element, leaves, and prints one line:
//   rank R of P ok at ADDRESS
// or, on failure, "rank R: <why>" on stderr and exit 1 (a setup error: exit 2).
#include <cstdio>
#include <string>
#include <vector>

#include <optcast/optcast.hpp>

int main(int argc, char** argv) try {
  if (argc > 1 && std::string(argv[1]) == "--help")
    return std::puts("usage: cluster_rank [--bytes N]   (rank, size and store from the launcher's environment)"), 0;
  const std::size_t n = argc > 2 && std::string(argv[1]) == "--bytes" ? std::stoul(argv[2]) / sizeof(std::int64_t) : 100000;
  optcast::communicator comm = optcast::join("tcp");
  const int p = comm.size(), me = comm.rank();
  const auto check = [&](bool ok, const char* what) {
    if (!ok) throw std::runtime_error(std::string(what) + ": wrong data");
  };
  std::vector<std::int64_t> b(n, me == p - 1 ? 7 : 0);
  auto r = optcast::run(comm, optcast::broadcast(comm, std::span(b), p - 1));
  if (r) {
    for (auto v : b) check(v == 7, "broadcast");
    std::vector<std::int64_t> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int64_t>(i) * (me + 1);
    r = optcast::run(comm, optcast::allreduce(comm, std::span<const std::int64_t>(in), std::span(out), optcast::ops::sum));
    const std::int64_t sum = std::int64_t{p} * (p + 1) / 2;
    if (r)
      for (std::size_t i = 0; i < n; ++i) check(out[i] == static_cast<std::int64_t>(i) * sum, "allreduce");
  }
  if (r) {
    const std::size_t each = n / static_cast<std::size_t>(p) + 1;
    std::vector<std::int64_t> all(me == 0 ? each * static_cast<std::size_t>(p) : 0), mine(each);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
    r = optcast::run(comm, optcast::scatter(comm, std::span<const std::int64_t>(all), std::span(mine), 0));
    if (r)
      for (std::size_t i = 0; i < each; ++i) check(mine[i] == static_cast<std::int64_t>(each * static_cast<std::size_t>(me) + i), "scatter");
  }
  if (r) r = comm.leave();
  if (!r) {
    std::fprintf(stderr, "rank %d: %s\n", me, optcast::describe(r.error(), comm.failure_detail()).c_str());
    return 1;
  }
  std::printf("rank %d of %d ok at %s\n", me, p, optcast::tcp::listen_address(comm.get_fabric()).c_str());
} catch (const optcast::setup_error& e) {
  std::fprintf(stderr, "cluster_rank: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cluster_rank: %s\n", e.what());
  return 1;
}
