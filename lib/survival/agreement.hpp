// One fault-tolerant agreement on one rank (survivable::agree): a rotating coordinator with
// perfect failure detection (a dead peer is one every survivor is told of, or one whose
// links the survivors cut), and a decision that every member passes on once before it
// returns it. docs/DESIGN.md, "Agreeing among survivors", has the argument.
//
// The coordinator is the lowest member not known dead (its index is the ballot). A member
// sends its contribution (flag, words, the members it knows dead) to its coordinator, and
// again to the next one when that one dies. A coordinator decides once it holds a
// contribution from every member it does not know dead (AND of the flags, OR of the words,
// the union of the dead); a decision that reaches it from any member it takes instead. On
// its first decision a member sends it to every member it does not know dead, then returns
// it; it takes a decision from its coordinator, or one whose ballot is at least its own.
// It answers a contribution that comes after its decision with the decision, and stays
// (after returning) until every member not known dead has sent it theirs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "control_wire.hpp"
#include "optcast/fabric.hpp"

namespace optcast::detail {

class survival;

class agreement_session : public std::enable_shared_from_this<agreement_session> {
public:
  agreement_session(survival& s, std::uint32_t comm, std::uint32_t n, std::vector<int> members, int me, agreement mine,
                    std::chrono::milliseconds timeout, agreement_done done);
  ~agreement_session();

  // Each may call `done` (last) and end the session; the caller holds a shared_ptr to it.
  void begin();
  void message(int src, const control_message& m);  // src: a job rank
  void death(int job_rank);
  void fail(std::error_code ec, const std::string& why);
  // "agreement 2 of communicator 0 waiting for ranks 3, 5", empty if it waits on nobody.
  std::string waiting() const;
  // Returned, and every member not known dead has sent its decision.
  bool over() const noexcept { return over_; }

private:
  int index_of(int job_rank) const noexcept;
  bool live(int i) const noexcept { return !dead_[static_cast<std::size_t>(i)]; }
  void advance();
  void decide(const control_message& x);
  control_message contribution() const;
  void check_over();
  void disarm() noexcept;

  survival& s_;
  const std::uint32_t comm_, n_;
  const std::vector<int> members_;  // job ranks
  const int me_;                    // index among them
  agreement mine_;
  agreement_done done_;
  std::vector<char> dead_;
  int ballot_ = -1;        // the coordinator's index
  int contributed_ = -1;   // the ballot this rank last sent its contribution to
  std::vector<std::optional<control_message>> contrib_;  // as coordinator, by index
  std::vector<char> heard_;  // their decision came
  std::optional<control_message> decision_;
  bool returned_ = false, over_ = false;
  std::uint64_t deadline_ = 0;
  bool armed_ = false;
};

}  // namespace optcast::detail
