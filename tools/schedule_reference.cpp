// Träff's Algorithms 3-6 transcribed as printed (2024, Section 2): the yardstick that
// `optcast verify --timing` times lib/traff/circulant.cpp against, in the same run.
//
// Kept deliberately plain: the doubly linked list of Algorithm 4 in arrays (index -1
// shifted to 0), the recursive call continuing at e as printed, the sentinel
// skip[q + 1] = 2p that ends the search once all q blocks are found, BASEBLOCK computed
// by each schedule separately, and each send-schedule violation a full RECVSCHEDULE of
// the to-processor. No speed-ups: those belong to the library.
#include "tools.hpp"

#include <array>
#include <chrono>
#include <cstdint>

#include "traff/circulant.hpp"

namespace optcast::tools {

namespace {

constexpr int max_q = circulant::max_q;

struct reference_schedules {
  int p, q;
  std::array<std::int64_t, max_q + 2> skip{};
  // The list, indexed e + 1 so that e = -1 is a slot.
  std::array<int, max_q + 2> next_{}, prev_{};
  int& next(int e) { return next_[static_cast<unsigned>(e + 1)]; }
  int& prev(int e) { return prev_[static_cast<unsigned>(e + 1)]; }

  explicit reference_schedules(int procs) : p(procs), q(circulant::ceil_log2(procs)) {
    // Algorithm 2.
    skip[static_cast<unsigned>(q)] = p;
    for (int k = q; k > 0; --k) skip[static_cast<unsigned>(k - 1)] = (skip[static_cast<unsigned>(k)] + 1) / 2;
    skip[static_cast<unsigned>(q + 1)] = 2 * static_cast<std::int64_t>(p);
  }
  std::int64_t sk(int k) const { return skip[static_cast<unsigned>(k)]; }

  // Algorithm 3.
  int baseblock(int r) const {
    if (q == 0) return 0;
    int k = q;
    std::int64_t rp = 0;
    do {
      k = k - 1;
      if (rp + sk(k) == r) return k;
      if (rp + sk(k) < r) rp = rp + sk(k);
    } while (k != 0);
    return q;
  }

  // Algorithm 4.
  int allblocks(std::int64_t r, std::int64_t rp, std::int64_t s, int e, int k, int* recvblock) {
    while (e != -1) {
      if (rp + sk(e) <= r - sk(k) && rp + sk(e) < s) {
        if (rp + sk(e) <= r - sk(k + 1)) k = allblocks(r, rp + sk(e), s, e, k, recvblock);
        if (rp > r - sk(k + 1)) return k;
        s = rp + sk(e);
        recvblock[k] = e;
        k = k + 1;
        next(prev(e)) = next(e);
        prev(next(e)) = prev(e);
      }
      e = next(e);
    }
    return k;
  }

  // Algorithm 5.
  void recvschedule(int r, int* recvblock) {
    if (q == 0) return;
    for (int e = 0; e <= q; ++e) {
      next(e) = e - 1;
      prev(e) = e + 1;
    }
    prev(q) = -1;
    next(-1) = q;
    prev(-1) = 0;
    const int b = baseblock(r);
    next(prev(b)) = next(b);
    prev(next(b)) = prev(b);
    allblocks(static_cast<std::int64_t>(p) + r, 0, 2 * static_cast<std::int64_t>(p), q, 0, recvblock);
    for (int k = 0; k < q; ++k) {
      if (recvblock[k] == q)
        recvblock[k] = b;
      else
        recvblock[k] = recvblock[k] - q;
    }
  }

  // Algorithm 6.
  void sendschedule(int r, int* sendblock) {
    if (q == 0) return;
    if (r == 0) {
      for (int k = 0; k < q; ++k) sendblock[k] = k;
      return;
    }
    const int b = baseblock(r);
    std::int64_t rp = r, e = p;
    int c = b;
    std::array<int, max_q> block{};
    for (int k = q - 1; k >= 1; --k) {
      if (rp < sk(k)) {
        if (rp + sk(k) < e || e < sk(k - 1) || (k == 1 && b > 0)) {
          sendblock[k] = c;
        } else {
          recvschedule(static_cast<int>((r + sk(k)) % p), block.data());
          sendblock[k] = block[static_cast<unsigned>(k)];
        }
        if (e > sk(k)) e = sk(k);
      } else {
        c = k - q;
        if (k == 1 || rp > sk(k) || e - sk(k) < sk(k - 1)) {
          sendblock[k] = c;
        } else if (rp + sk(k) > e) {
          recvschedule(static_cast<int>((r + sk(k)) % p), block.data());
          sendblock[k] = block[static_cast<unsigned>(k)];
        } else {
          sendblock[k] = c;
        }
        rp = rp - sk(k);
        e = e - sk(k);
      }
    }
    sendblock[0] = b - q;
  }
};

}  // namespace

void reference_schedule(int p, int r, std::span<int> recv, std::span<int> send) {
  reference_schedules s(p);
  s.recvschedule(r, recv.data());
  s.sendschedule(r, send.data());
}

double time_reference_schedules(int p, long long& sink) {
  using clock = std::chrono::steady_clock;
  reference_schedules s(p);  // Algorithm 2 once per p, outside the clock as the library's
  std::array<int, max_q> recv{}, send{};
  const auto t0 = clock::now();
  for (int r = 0; r < p; ++r) {
    s.recvschedule(r, recv.data());
    s.sendschedule(r, send.data());
    sink += recv[0] + send[0];
  }
  return std::chrono::duration<double>(clock::now() - t0).count();
}

}  // namespace optcast::tools
