// optcast-bench p2p: a fabric's point-to-point throughput against a plain socket copy of
// the same bytes, and its small-message latency.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <nlohmann/json.hpp>
#include <optcast/optcast.hpp>

#include "bootstrap/spawn.hpp"

#include "bench.hpp"
#include "cli.hpp"

namespace optcast::bench {

namespace {

// A connected pair of plain blocking loopback sockets, Nagle off on both.
struct socket_pair {
  asio::io_context io;
  asio::ip::tcp::socket out{io}, in{io};
  socket_pair() {
    asio::ip::tcp::acceptor acc(io, {asio::ip::make_address("127.0.0.1"), 0});
    std::thread connector([&] { out.connect(acc.local_endpoint()); });
    acc.accept(in);
    connector.join();
    out.set_option(asio::ip::tcp::no_delay(true));
    in.set_option(asio::ip::tcp::no_delay(true));
  }
};

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

// Point-to-point: rank 0 sends `count` messages of `bytes` to rank 1 over the TCP
// fabric; then the same bytes through a plain blocking socket pair. Both in this
// process, two threads each, so both see the same machine at the same time.
int p2p_cmd(int argc, char** argv) {
  CLI::App app{"Point-to-point throughput of a fabric (two ranks in this process, a thread each) against a plain\n"
               "socket copy of the same bytes, and the round-trip latency of small messages.",
               "optcast-bench p2p"};
  std::string fabric_name(fabric_table().front().name);
  std::size_t bytes = std::size_t{16} << 20;
  int count = 32, runs = 5;
  bool json = false, encrypt = false;
  cli::add_fabric(app, fabric_name, {}, "both ranks in this process, a thread each");
  app.add_option("--bytes", bytes, "message size")->transform(cli::byte_size())->capture_default_str();
  app.add_option("--count", count, "messages per run")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--runs", runs, "runs of each; the median is reported")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_flag("--json", json, "one JSON object");
  app.add_flag("--encrypt", encrypt, "tcp: encrypt every frame (OPTCAST_ENCRYPT)");
  int np = 0;  // the other commands' option: here refused with the reason, not as unknown
  app.add_option("--np", np)->group("");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (app.count("--np")) {
    std::fprintf(stderr, "optcast-bench p2p: --np is not an option here: p2p runs its two ranks in this process, a thread "
                         "each (coll, broadcast and model start rank processes with --np)\n");
    return 2;
  }

  // Two ranks, each with its own event loop and thread; built at once (a
  // libfabric rank waits in its bootstrap for the other's endpoint).
  // Authenticated, as jobs started with --np are.
  const std::string secret = "optcast-bench p2p's own job secret";
  const auto store = listen_loopback_store();
  std::vector<std::shared_ptr<fabric>> fabs(2);
  {
    std::vector<std::thread> starting;
    std::array<std::string, 2> errors;  // each thread its own: both may fail at once (a bad OPTCAST_POLL)
    for (int r = 0; r < 2; ++r)
      starting.emplace_back([&, r] {
        job_config c;
        try {
          c.read_rank_env([](const char* n) -> const char* { return std::getenv(n); });  // OPTCAST_POLL ...
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
          return;
        }
        c.rank = r;
        c.size = 2;
        c.store = {"127.0.0.1", store.port};
        c.store_fd = r == 0 ? store.fd : -1;  // rank 0 hosts the store
        c.secret = secret;
        c.encrypt = encrypt || c.encrypt;
        try {
          fabs[static_cast<std::size_t>(r)] = find_fabric(fabric_name)->connect(nullptr, c, {});
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (auto& t : starting) t.join();
    for (const auto& error : errors)
      if (!error.empty()) throw setup_error(make_error_code(errc::invalid_argument), error);
  }
  std::vector<communicator> comms;
  for (auto& f : fabs) comms.emplace_back(f);
  const std::string described = fabric_description(comms[0]) + (encrypt ? " (encrypted)" : "");

  // Round trips of 8 bytes, half of one is the latency.
  const int trips = 2000;
  auto pingpong = [&] {
    std::array<std::byte, 8> a{}, b{};
    std::thread echo([&] {
      for (int i = 0; i < trips; ++i) {
        if (!run(comms[1], recv(comms[1], 0, 2, b))) std::abort();
        if (!run(comms[1], send(comms[1], 0, 3, b))) std::abort();
      }
    });
    const auto t0 = clock_type::now();
    for (int i = 0; i < trips; ++i) {
      if (!run(comms[0], send(comms[0], 1, 2, a))) std::abort();
      if (!run(comms[0], recv(comms[0], 1, 3, a))) std::abort();
    }
    const double t = since(t0) / trips / 2;
    echo.join();
    return t;
  };
  std::vector<std::byte> src(bytes, std::byte{3}), dst(bytes);
  auto fabric_run = [&] {
    double t = 0;
    std::thread sender([&] {
      for (int i = 0; i < count; ++i)
        if (!run(comms[0], send(comms[0], 1, 1, src))) std::abort();
    });
    const auto t0 = clock_type::now();
    for (int i = 0; i < count; ++i)
      if (!run(comms[1], recv(comms[1], 0, 1, dst))) std::abort();
    t = since(t0);
    sender.join();
    return t;
  };

  // The same round trips between two threads on a plain blocking socket pair: what the
  // kernel and this machine's wake-ups cost without any library.
  auto socket_pingpong = [&] {
    socket_pair p;
    std::array<std::byte, 8> a{}, b{};
    std::thread echo([&] {
      for (int i = 0; i < trips; ++i) {
        asio::read(p.in, asio::buffer(b));
        asio::write(p.in, asio::buffer(b));
      }
    });
    const auto t0 = clock_type::now();
    for (int i = 0; i < trips; ++i) {
      asio::write(p.out, asio::buffer(a));
      asio::read(p.out, asio::buffer(a));
    }
    const double t = since(t0) / trips / 2;
    echo.join();
    return t;
  };

  // Plain sockets: blocking write of the same buffer, blocking read into one.
  auto socket_run = [&] {
    socket_pair p;
    auto& out = p.out;
    auto& in = p.in;
    std::thread writer([&] {
      for (int i = 0; i < count; ++i) asio::write(out, asio::buffer(src));
    });
    const auto t0 = clock_type::now();
    for (int i = 0; i < count; ++i) asio::read(in, asio::buffer(dst));
    const double t = since(t0);
    writer.join();
    return t;
  };

  fabric_run();  // warm up: connections open on first use
  socket_run();
  pingpong();
  socket_pingpong();
  std::vector<double> tf, ts, lat, plain;
  for (int k = 0; k < runs; ++k) {  // interleaved, so both see the same conditions
    tf.push_back(fabric_run());
    ts.push_back(socket_run());
    lat.push_back(pingpong());
    plain.push_back(socket_pingpong());
  }
  // Both communicators connected, no call pending, for a second: what an idle service pays.
  const double cpu0 = cpu_seconds();
  const auto idle0 = clock_type::now();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double idle = (cpu_seconds() - cpu0) / since(idle0);
  // Both ranks leave at once, as two processes would: rank 0, which hosts the store,
  // waits there for rank 1's goodbye.
  std::vector<result<void>> left(2);
  std::thread other([&] { left[1] = comms[1].leave(); });
  left[0] = comms[0].leave();
  other.join();
  for (int r = 0; r < 2; ++r)
    if (!left[static_cast<std::size_t>(r)]) {
      std::fprintf(stderr, "optcast-bench p2p: rank %d: %s\n", r,
                   describe(left[static_cast<std::size_t>(r)].error(), comms[static_cast<std::size_t>(r)].failure_detail()).c_str());
      return 1;
    }
  const double total = static_cast<double>(bytes) * count;
  const double gf = total / median(tf) / 1e9, gs = total / median(ts) / 1e9;
  if (json) {
    const nlohmann::ordered_json j = {{"benchmark", "p2p"},  {"fabric", described}, {"bytes", bytes},
                                      {"count", count},      {"optcast_GBps", gf}, {"socket_GBps", gs},
                                      {"ratio", gf / gs},    {"latency_8B_us", median(lat) * 1e6},
                                      {"socket_latency_8B_us", median(plain) * 1e6},
                                      {"latency_ratio", median(lat) / median(plain)},
                                      {"idle_core_fraction", idle}};
    std::puts(j.dump().c_str());
  } else {
    std::printf("point-to-point on loopback, %d messages of %s, median of %d runs\n", count, format_bytes(bytes).c_str(), runs);
    std::printf("  optcast %-22s: %.3f GB/s\n  plain socket copy             : %.3f GB/s\n  ratio                         : %.3f\n",
                described.c_str(), gf, gs, gf / gs);
    std::printf("  8-byte one-way latency        : %.1f us (half a round trip through the collective layer)\n", median(lat) * 1e6);
    std::printf("  plain socket, same round trip : %.1f us\n  latency ratio                 : %.2f\n", median(plain) * 1e6,
                median(lat) / median(plain));
    std::printf("  idle, both connected          : %.2f%% of a core\n", idle * 100);
  }
  return 0;
}

}  // namespace optcast::bench
