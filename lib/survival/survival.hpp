// What a fabric_base knows and does so that a job survives a member's failure: which
// peers are dead, which communicators each peer is in, which are revoked, and the
// agreements in progress (agreement.hpp), fed by control messages (control_wire.hpp).
// Not installed: fabric_base's public overrides and protected hooks are its face.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "control_wire.hpp"
#include "optcast/fabric_base.hpp"

namespace optcast::detail {

class agreement_session;

class survival {
public:
  explicit survival(fabric_base& f);
  ~survival();
  survival(const survival&) = delete;
  survival& operator=(const survival&) = delete;

  bool alive(int r) const noexcept;
  // Alive, and a member of communicator `id` as this process: a replacement is one only
  // of the communicators made since it came (its predecessor's are not its).
  bool alive_in(std::uint32_t id, int r) const noexcept;
  // A replacement for dead rank r is ready (grow): alive again, and among joiners().
  void revive(int r);
  const std::vector<int>& joiners() const noexcept { return joiners_; }
  // Tells replacement `to` it is a member of communicator `id`, of job ranks `members`.
  void admit(int to, std::uint32_t id, const std::vector<int>& members);
  // On a replacement: the communicator it was taken into, once told (admit), taken once.
  std::optional<std::pair<std::uint32_t, std::vector<int>>> take_admission();
  bool died(int r, std::error_code ec, const std::string& why);
  void enroll(std::uint32_t id, std::vector<int> members);
  void retire(std::uint32_t id) noexcept;
  // Locally, and (tell) to the other members once.
  void revoke(std::uint32_t id, std::error_code ec, std::string why, bool tell);
  std::error_code revoked(std::uint32_t id) const noexcept;
  std::string revocation(std::uint32_t id) const;
  void arrived(int src, std::span<const std::byte> bytes);
  void agree(std::uint32_t id, std::uint32_t n, std::vector<int> members, agreement mine, std::chrono::milliseconds timeout,
             agreement_done done);
  void end(std::error_code ec, const std::string& why);
  // "; agreement 2 of communicator 0 waiting for ranks 3, 5" for the stall inquiry.
  std::string waiting() const;

  // Control messages posted and not yet sent.
  std::size_t in_flight() const noexcept { return in_flight_; }
  bool agreeing() const noexcept { return !sessions_.empty(); }

  // For sessions.
  fabric_base& fabric() noexcept { return f_; }
  void send(int to, const control_message& m);
  void finished(std::uint32_t id, std::uint32_t n);
  // For the fabric's last_error().
  void note(std::string why);
  // Why job rank r is taken for dead, and the error it died with.
  std::string death_of(int r) const;
  std::error_code death_code(int r) const;

private:
  using key = std::pair<std::uint32_t, std::uint32_t>;  // (communicator, agreement)
  std::vector<int> members_of(std::uint32_t id) const;
  bool was_finished(key k) const;

  fabric_base& f_;
  std::vector<char> dead_;  // by job rank
  // Generations: a rank revived at epoch e is a member only of communicators enrolled at
  // epoch e or later (the job's, id 0, is of epoch 0).
  std::uint64_t epoch_ = 0;
  std::vector<std::uint64_t> revived_at_;  // by job rank
  std::map<std::uint32_t, std::uint64_t> epoch_of_;
  std::vector<int> joiners_;  // revived, not yet admitted by this rank
  std::optional<std::pair<std::uint32_t, std::vector<int>>> admission_;
  bool admission_taken_ = false;  // a replacement is admitted once: later words are the other members'
  std::map<int, std::pair<std::error_code, std::string>> dead_why_;
  std::map<std::uint32_t, std::vector<int>> comms_;  // enrolled, job ranks (id 0 implicit)
  struct revocation_t {
    std::error_code ec;
    std::string why;
  };
  std::map<std::uint32_t, revocation_t> revoked_;
  std::map<key, std::shared_ptr<agreement_session>> sessions_;
  // Messages of an agreement this rank has not begun yet (its peers are ahead), and the
  // latest agreements ended here, whose late messages are dropped.
  std::map<key, std::vector<std::pair<int, control_message>>> early_;
  std::size_t early_count_ = 0;
  std::size_t in_flight_ = 0;
  static constexpr std::size_t max_early = 4096;
  std::map<std::uint32_t, std::deque<std::uint32_t>> finished_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// Printable text from a peer: anything else becomes '?'.
std::string printable(std::string_view s);

}  // namespace optcast::detail
