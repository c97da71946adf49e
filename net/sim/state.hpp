// The simulator's state, shared by its translation units: the fabric (sim.cpp), the
// event loop and the world (sim.cpp), the models and reports (model.cpp). Internal to
// net/sim.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optcast/net/sim.hpp"
#include "optcast/task.hpp"
#include "../common/buffer_pool.hpp"
#include "../common/op_queue.hpp"
#include "core/frame_arena.hpp"
#include "core/huge_vector.hpp"

namespace optcast::sim {

constexpr std::uint32_t none = 0xffffffffu;

// Where an operation is, in op.transport.state.
enum : std::uintptr_t { st_idle = 0, st_posted, st_bound, st_sending, st_ready };

// One message from send to delivery.
struct message {
  int src = 0, dst = 0;
  tag tg{};
  std::size_t size = 0;
  call_signature sig;          // the sender's call
  double first = 0, last = 0;  // first and last byte into the network
  std::uint32_t chain = 0;
  operation* sender = nullptr;  // the send, until it completes
  operation* bound = nullptr;   // the receive it matched, once one has
  bool available = false;       // at the receiver, overhead paid
  bool buffered = false;        // the payload is in `payload`, not yet in a receive
  bool in_list = false;         // in the receiver's list of unmatched messages
  bool rx_done = false;         // handed to a receive, or dropped (its receive failed)
  bool arrived = false;         // choosing receivers: in the receiver's buffer
  bool served = false;          // choosing receivers: its arrival window is taken
  std::uint8_t events = 0;      // scheduled events that refer to it
  std::uint8_t route = 0;       // route_*: which channels time it
  std::uint8_t rail = 0;        // route_rail: the hosts' rail it travels on
  detail::message_buffer payload;
  std::uint32_t next = none, prev = none;  // the receiver's list of unmatched messages
  std::uint32_t rec = none;     // its entry in world_state::log, when recording
};

// Messages by index, in pages that never move: a vector's doubling copied every message
// in flight and faulted in fresh pages each time (the wavefront of a 10^5-rank broadcast
// holds most of its messages at once). Pages come from the kernel, 4 MiB each, touched
// only as they fill, as huge pages (core/frame_arena.hpp): at a fault per 4 KiB, a large
// world's first page alone cost a tenth of its broadcast.
template <class T>
class paged_store {
public:
  static constexpr std::size_t mapped_bytes = std::size_t{4} << 20;
  static constexpr std::uint32_t per_page = mapped_bytes / sizeof(T);
  paged_store() = default;
  paged_store(const paged_store&) = delete;
  paged_store& operator=(const paged_store&) = delete;
  ~paged_store() { clear(); }

  T& operator[](std::uint32_t i) noexcept { return pages_[i / per_page][i % per_page]; }
  const T& operator[](std::uint32_t i) const noexcept { return pages_[i / per_page][i % per_page]; }
  std::uint32_t size() const noexcept { return size_; }
  // A new default element; its index.
  std::uint32_t add() {
    if (size_ == pages_.size() * per_page) {
      pages_.reserve(pages_.size() + 1);
      void* page = pages_.empty() ? spare().take() : nullptr;
      if (!page) page = detail::map_pages(mapped_bytes, true);
      if (!page) throw std::bad_alloc();
      pages_.push_back(static_cast<T*>(page));
    }
    new (&(*this)[size_]) T();
    return size_++;
  }
  void clear() noexcept {
    for (std::uint32_t i = 0; i < size_; ++i) (*this)[i].~T();
    for (std::size_t i = 0; i < pages_.size(); ++i)
      if (i > 0 || !spare().keep(pages_[i])) detail::unmap_pages(pages_[i], mapped_bytes);
    pages_.clear();
    size_ = 0;
  }

private:
  // First pages of worlds this thread has ended, kept for its next worlds: a sweep of
  // thousands of small simulations otherwise maps a page per world and faults its memory
  // in afresh (a sixth of such a sweep's time). Later pages go back to the kernel.
  struct spares {
    static constexpr std::size_t most = 4;
    T* kept[most] = {};
    std::size_t n = 0;
    void* take() noexcept { return n ? kept[--n] : nullptr; }
    bool keep(T* page) noexcept {
      if (n == most) return false;
      kept[n++] = page;
      return true;
    }
    ~spares() {
      while (n) detail::unmap_pages(kept[--n], mapped_bytes);
    }
  };
  static spares& spare() noexcept {
    thread_local spares s;
    return s;
  }
  std::vector<T*> pages_;
  std::uint32_t size_ = 0;
};

// Which channels time a message (sim.hpp's "Hosts and rails"): the ranks' own ports (no
// layout, or the rounds model), the ranks' host-local channels, or their hosts' rail.
enum : std::uint8_t { route_rank = 0, route_host, route_rail };

enum class ev : std::uint8_t { send_done, arrive, available, port_free, serve };

struct event {
  std::uint32_t msg;
  ev kind;
};

// Pending events in time order, events of one time in the order they were scheduled.
// However many events are pending (a million-rank broadcast's wavefront), only a few
// distinct times are: each time holds a FIFO of its events, and the times sit in a
// small ordered map, so scheduling and taking an event cost O(log distinct times) rather
// than O(log events) with a cache miss per level of a heap of them all.
class event_queue {
public:
  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  void push(double t, event e) {
    if (!last_ || last_t_ != t) {
      auto it = times_.lower_bound(t);
      if (it == times_.end() || it->first != t) it = insert_time(it, t);
      last_ = it->second;
      last_t_ = t;
    }
    last_->items.push_back(e);
    ++size_;
  }
  // The earliest event and its time; the queue must not be empty.
  event pop(double& t) {
    const auto it = times_.begin();
    bucket* b = it->second;
    t = it->first;
    const event e = b->items[b->head++];
    --size_;
    if (b->head == b->items.size()) {
      if (last_ == b) last_ = nullptr;
      b->items.clear();
      b->head = 0;
      free_.push_back(b);
      free_nodes_.push_back(times_.extract(it));
    }
    return e;
  }
  void clear() {
    for (auto& [t, b] : times_) {
      b->items.clear();
      b->head = 0;
      free_.push_back(b);
    }
    times_.clear();
    last_ = nullptr;
    size_ = 0;
  }

private:
  struct bucket {
    std::vector<event> items;
    std::size_t head = 0;
  };
  using time_map = std::map<double, bucket*>;
  // A new distinct time reuses a node of a time already passed, so a run allocates
  // only while its number of distinct pending times grows, not once per message.
  time_map::iterator insert_time(time_map::iterator hint, double t) {
    bucket* b = take_bucket();
    if (free_nodes_.empty()) return times_.emplace_hint(hint, t, b);
    auto nh = std::move(free_nodes_.back());
    free_nodes_.pop_back();
    nh.key() = t;
    nh.mapped() = b;
    return times_.insert(hint, std::move(nh));
  }
  bucket* take_bucket() {
    if (free_.empty()) {
      all_.push_back(std::make_unique<bucket>());
      return all_.back().get();
    }
    bucket* b = free_.back();
    free_.pop_back();
    return b;
  }
  time_map times_;
  std::vector<time_map::node_type> free_nodes_;
  std::vector<std::unique_ptr<bucket>> all_;
  std::vector<bucket*> free_;
  bucket* last_ = nullptr;  // the bucket of the time scheduled last (often the next one's)
  double last_t_ = 0;
  std::size_t size_ = 0;
};

struct channel {
  double next_start = 0;   // out: when the next sending overhead may begin
  double busy_until = 0;   // rounds model: end of the round in use
  double next_window = 0;  // in: earliest start of the next arrival window
  double overhead_free = 0;
};

struct rank_state {
  detail::op_queue posted, bound, sending;
  std::uint32_t unmatched_head = none, unmatched_tail = none;
  // The rank's ports, in the world's flat arrays (no allocation per rank: a world may
  // have a million ranks).
  std::span<channel> out, in;
  std::span<std::uint32_t> busy_with;  // rounds model: message on each out channel
  std::span<std::uint32_t> in_with;    // rounds model: message on each in channel
  rank_stats stats;
  double last_post = -1;
};

class sim_fabric;

// The world's per-rank arrays, on huge pages of their own.
using detail::huge_vector;

// Where a world's fabrics (and their shared_ptr control blocks) live: one run of huge
// pages rather than 10^5 separate blocks of malloc's, each faulting in its own memory.
// It goes when the world and every fabric carved from it have: a fabric may outlive its
// world. A rank whose fabric is made again (world::fabric after the first was dropped)
// gets one from the heap when the slab is full.
class fabric_slab {
public:
  static fabric_slab* create(std::size_t bytes) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    bytes = 0;  // the sanitizers see each fabric only as a heap block of its own
#endif
    // A small world's fabrics come from the heap, whose memory the next world reuses: a
    // slab of its own would fault fresh pages in for each of a sweep's thousands of worlds.
    constexpr std::size_t huge = std::size_t{2} << 20;
    bytes = bytes < huge ? 0 : (bytes + huge - 1) / huge * huge;  // a partial huge page would fault per 4 KiB
    auto* s = new fabric_slab;
    s->size_ = bytes;
    s->base_ = bytes ? static_cast<char*>(detail::map_pages(bytes, true)) : nullptr;
    if (!s->base_) s->size_ = 0;
    return s;
  }
  void* take(std::size_t n) {
    n = (n + 15) & ~std::size_t{15};
    if (size_ - used_ >= n) {
      void* p = base_ + used_;
      used_ += n;
      refs_.fetch_add(1, std::memory_order_relaxed);
      return p;
    }
    return ::operator new(n);
  }
  void give(void* p) noexcept {
    if (static_cast<char*>(p) >= base_ && static_cast<char*>(p) < base_ + size_) release();
    else ::operator delete(p);
  }
  void release() noexcept {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (base_) detail::unmap_pages(base_, size_);
    delete this;
  }

private:
  char* base_ = nullptr;
  std::size_t size_ = 0, used_ = 0;
  std::atomic<std::size_t> refs_{1};  // the world's, and one per block carved
};

template <class T>
struct slab_allocator {
  using value_type = T;
  fabric_slab* slab;
  explicit slab_allocator(fabric_slab* s) noexcept : slab(s) {}
  template <class U>
  slab_allocator(const slab_allocator<U>& o) noexcept : slab(o.slab) {}
  T* allocate(std::size_t n) { return static_cast<T*>(slab->take(n * sizeof(T))); }
  void deallocate(T* p, std::size_t) noexcept { slab->give(p); }
  template <class U>
  bool operator==(const slab_allocator<U>& o) const noexcept { return slab == o.slab; }
};

// Held by the world: its reference to the slab.
class slab_hold {
public:
  slab_hold() = default;
  ~slab_hold() {
    if (s_) s_->release();
  }
  slab_hold(const slab_hold&) = delete;
  slab_hold& operator=(const slab_hold&) = delete;
  void reset(fabric_slab* s) noexcept {
    if (s_) s_->release();
    s_ = s;
  }
  fabric_slab* get() const noexcept { return s_; }

private:
  fabric_slab* s_ = nullptr;
};

inline std::string fmt_time(double t) { return format_time(t); }


// The world's coroutine frames (frame_arena.hpp), held for the world's lifetime.
class frame_hold {
public:
  frame_hold() : a_(detail::frame_arena::create()) {}
  ~frame_hold() {
    if (a_) a_->release();
  }
  frame_hold(const frame_hold&) = delete;
  frame_hold& operator=(const frame_hold&) = delete;
  detail::frame_arena* get() const noexcept { return a_; }

private:
  detail::frame_arena* a_;
};

struct world_state {
  frame_hold frames;  // first: destroyed last
  sim::model m;
  world_options opts;
  huge_vector<rank_state> ranks;
  huge_vector<channel> channels;          // every rank's out ports, then every rank's in ports
  huge_vector<std::uint32_t> port_msgs;   // rounds model: the same for busy_with and in_with
  // Under a layout (not the rounds model): every host's rails out, then every host's rails
  // in ([host * rails + rail]), and every rank's host-local channel out, then in.
  std::vector<channel> rails;
  huge_vector<channel> host_links;
  int rails_per_host = 1;
  huge_vector<sim_fabric*> fabrics;
  slab_hold slab;  // where fabrics come from
  paged_store<message> msgs;
  std::vector<std::uint32_t> free_msgs;
  event_queue events;
  detail::op_queue ready;  // completions decided outside the event loop (abort)
  detail::buffer_pool pool;
  double now = 0;
  std::uint64_t messages = 0, bytes = 0;
  std::uint32_t steps_to_progress = 1u << 16;
  std::vector<message_record> log;  // world_options::record
  std::vector<local_record> local;
  message_record* record_of(const message& mg) { return mg.rec == none ? nullptr : &log[mg.rec]; }
  std::error_code error;
  std::string error_detail;

  bool rounds() const noexcept { return m.kind == model_kind::rounds; }
  std::uint64_t posts = 0;  // receives posted so far: their order, for choosing receivers

  bool by_hosts() const noexcept { return !rails.empty(); }
  int host_of(int r) const noexcept { return opts.layout->host_of[static_cast<std::size_t>(r)]; }
  channel& rail_out(int host, int rail) { return rails[static_cast<std::size_t>(host * rails_per_host + rail)]; }
  channel& rail_in(int host, int rail) {
    return rails[rails.size() / 2 + static_cast<std::size_t>(host * rails_per_host + rail)];
  }
  channel& host_out(int r) { return host_links[static_cast<std::size_t>(r)]; }
  channel& host_in(int r) { return host_links[ranks.size() + static_cast<std::size_t>(r)]; }
  // The link parameters a message's route pays.
  loggp_link link_of(const message& mg) const noexcept {
    if (mg.route == route_host && m.host) return *m.host;
    return {m.L, m.o, m.g, m.G};
  }

  // A message's arrival window and receiving overhead on a free incoming channel of
  // its receiver (of its host's rail, then the receiver's own overhead), from now.
  void take_window(message& mg, std::uint32_t idx) {
    auto& dst = ranks[static_cast<std::size_t>(mg.dst)];
    const auto least = [&](auto key) {
      return &*std::min_element(dst.in.begin(), dst.in.end(), [&](const channel& a, const channel& b) { return key(a) < key(b); });
    };
    channel* in = nullptr;  // the window's channel
    channel* cpu = nullptr;  // the receiving overhead's
    switch (mg.route) {
      case route_host: in = cpu = &host_in(mg.dst); break;
      case route_rail:
        in = &rail_in(host_of(mg.dst), mg.rail);
        cpu = least([](const channel& c) { return c.overhead_free; });
        break;
      default: in = cpu = least([](const channel& c) { return c.next_window; });
    }
    const loggp_link lk = link_of(mg);
    const double ws = std::max(now, in->next_window);
    const double wl = ws + (mg.last - mg.first);
    in->next_window = wl + lk.g;
    const double rs = std::max(wl, cpu->overhead_free);
    cpu->overhead_free = rs + lk.o;
    if (auto* r = record_of(mg)) {
      r->window = ws;
      r->rx_start = rs;
    }
    schedule(rs + lk.o, idx, ev::available);
    if (m.choose) schedule(in->next_window, idx, ev::port_free);
  }

  // Choosing receivers (model::choose): while an incoming channel of rank d is free,
  // it takes, of the messages in its buffer whose receive is posted, the one whose
  // receive was posted first.
  void serve(int d);

  void schedule(double t, std::uint32_t msg, ev k) {
    ++msgs[msg].events;
    events.push(t, {msg, k});
  }

  std::uint32_t new_message() {
    if (!free_msgs.empty()) {
      auto i = free_msgs.back();
      free_msgs.pop_back();
      return i;
    }
    return msgs.add();
  }
  void free_message(std::uint32_t i) {
    auto& mg = msgs[i];
    if (mg.buffered) pool.give_back(std::move(mg.payload));
    mg = message{};
    free_msgs.push_back(i);
  }
  // A message lives until no event refers to it, its send has completed, and its
  // receiver has it (or will never have it).
  void maybe_free(std::uint32_t i) {
    const auto& mg = msgs[i];
    if (mg.events == 0 && !mg.sender && !mg.in_list && mg.rx_done) free_message(i);
  }

  void make_ready(operation& op, std::error_code ec) {
    op.ec = ec;
    op.transport.state = st_ready;
    ready.push_back(op);
  }

  void note_completion(int rank) {
    auto& st = ranks[static_cast<std::size_t>(rank)].stats;
    st.finish = std::max(st.finish, now);
  }

  // The receive `op` has its message: copy, count, and say whether it failed.
  std::error_code deliver(message& mg, operation& op);

  void fail_world(std::error_code ec, const std::string& detail);
  bool step();
  std::string describe_waiting() const;
};

}  // namespace optcast::sim
