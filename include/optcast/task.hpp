// optcast's coroutine task: lazy, single-owner, resumes its awaiter by symmetric
// transfer (cppcoro's design).
//
// Why our own task and not asio::awaitable: the same algorithm coroutine must run on
// fabrics that have no Asio in them at all (the virtual-time simulator drives 100,000
// ranks from its own event queue; libfabric completes from a CQ), and asio::awaitable
// can only await Asio operations and other awaitables. With our own task, a fabric
// operation is a small awaiter that lives in the awaiting coroutine's frame and is
// completed by whichever event loop the fabric has, so a running collective performs no
// heap allocation per message. Asio stays out of the round loops: the TCP fabric, the
// event loop the multi-process fabrics share (net/common) and the completion-token entry
// points (optcast/asio.hpp) use it.
#pragma once

#include <cassert>
#include <cstddef>
#include <coroutine>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

namespace optcast {

template <class T = void>
class task;

namespace detail {

class frame_arena;  // lib/core/frame_arena.hpp

// Every optcast coroutine's frame comes from here: from the heap, or, while this thread
// is inside a frame_scope of an arena (a simulated world's run loop), from that arena.
void* frame_allocate(std::size_t n);
void frame_free(void* p, std::size_t n) noexcept;
// Advice that [p, p + bytes), allocated but not yet touched, be backed by huge pages
// where the kernel offers them: a world of 10^5 ranks fills arrays of tens of MiB in one
// sweep, and at a page fault per 4 KiB its set-up cost four times its collective. The
// 2 MiB pages inside the range are advised, and one that the range reaches within the
// same 4 KiB page at either end (that page is the allocation's own: malloc's header before
// a large block, the rest of its mapping after); small ranges are left alone.
void prefer_huge_pages(void* p, std::size_t bytes) noexcept;

// v.reserve(n), for an array a large world fills at once: a large capacity is rounded up
// so that malloc asks the kernel for whole 2 MiB units (which Linux places at a 2 MiB
// boundary), and the whole block is advised as huge pages. Where the allocator or kernel
// place it otherwise, only the pages inside are (prefer_huge_pages): never worse than
// reserve.
template <class V>
void reserve_huge(V& v, std::size_t n) {
  constexpr std::size_t unit = std::size_t{2} << 20, header = 4 * sizeof(std::size_t);  // malloc's chunk header, rounding
  constexpr std::size_t size = sizeof(typename V::value_type);
  if (n * size >= unit / 4) n = ((n * size + header + unit - 1) / unit * unit - header) / size;
  v.reserve(n);
  prefer_huge_pages(v.data(), v.capacity() * size);
}

class frame_scope {
public:
  explicit frame_scope(frame_arena* a) noexcept;  // nullptr: the heap
  ~frame_scope();
  frame_scope(const frame_scope&) = delete;
  frame_scope& operator=(const frame_scope&) = delete;

private:
  frame_arena* mine_;
  frame_arena* prev_;
};

struct frame_allocation {
  static void* operator new(std::size_t n) { return frame_allocate(n); }
  static void operator delete(void* p, std::size_t n) noexcept { frame_free(p, n); }
};

struct promise_base : frame_allocation {
  std::coroutine_handle<> continuation = std::noop_coroutine();
  std::exception_ptr exception;

  std::suspend_always initial_suspend() noexcept { return {}; }

  struct final_awaiter {
    bool await_ready() noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      return h.promise().continuation;
    }
    void await_resume() noexcept {}
  };
  final_awaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { exception = std::current_exception(); }
};

template <class T>
struct task_promise : promise_base {
  std::optional<T> value;
  task<T> get_return_object() noexcept;
  template <class U>
  void return_value(U&& v) {
    value.emplace(std::forward<U>(v));
  }
  T take() {
    if (exception) std::rethrow_exception(exception);
    assert(value);
    return std::move(*value);
  }
};

template <>
struct task_promise<void> : promise_base {
  task<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() {
    if (exception) std::rethrow_exception(exception);
  }
};

}  // namespace detail

template <class T>
class [[nodiscard]] task {
public:
  using promise_type = detail::task_promise<T>;
  using handle = std::coroutine_handle<promise_type>;

  task() noexcept = default;
  explicit task(handle h) noexcept : h_(h) {}
  task(task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  task& operator=(task&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() {
    if (h_) h_.destroy();
  }

  bool valid() const noexcept { return static_cast<bool>(h_); }

  // For a driver that starts many tasks itself (run_all): starts the task; `then` is
  // resumed when it has finished, and take() then gives its value (or rethrows).
  void start(std::coroutine_handle<> then) {
    assert(h_);
    h_.promise().continuation = then;
    h_.resume();
  }
  bool done() const noexcept { return h_ && h_.done(); }
  T take() { return h_.promise().take(); }

  auto operator co_await() && noexcept {
    struct awaiter {
      handle h;
      bool await_ready() const noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<> cont) noexcept {
        h.promise().continuation = cont;
        return h;
      }
      T await_resume() { return h.promise().take(); }
    };
    assert(h_);
    return awaiter{h_};
  }

private:
  handle h_;
};

template <class T>
task<T> detail::task_promise<T>::get_return_object() noexcept {
  return task<T>(std::coroutine_handle<task_promise<T>>::from_promise(*this));
}
inline task<void> detail::task_promise<void>::get_return_object() noexcept {
  return task<void>(std::coroutine_handle<task_promise<void>>::from_promise(*this));
}

namespace detail {

// An eager, self-destroying coroutine: the root of a chain of tasks started from
// ordinary code. It hands the task's value to a callback when done.
struct detached {
  struct promise_type : frame_allocation {
    detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

// A coroutine that counts how often it is resumed, into `n`: the continuation of many
// tasks at once (run_all), instead of a coroutine frame of its own for each task.
class counter {
public:
  struct promise_type : frame_allocation {
    counter get_return_object() noexcept { return counter(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
  explicit counter(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
  counter(counter&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  counter& operator=(counter&&) = delete;
  ~counter() {
    if (h_) h_.destroy();
  }
  std::coroutine_handle<> handle() const noexcept { return h_; }

private:
  std::coroutine_handle<promise_type> h_;
};

// Resumed once, it waits; every later resumption adds one to n.
inline counter count_into(std::size_t& n) {
  for (;;) {
    co_await std::suspend_always{};
    ++n;
  }
}

template <class T, class F>
detached run_detached(task<T> t, F on_done) {
  if constexpr (std::is_void_v<T>) {
    std::exception_ptr ep;
    try {
      co_await std::move(t);
    } catch (...) {
      ep = std::current_exception();
    }
    on_done(ep);
  } else {
    std::optional<T> v;
    std::exception_ptr ep;
    try {
      v.emplace(co_await std::move(t));
    } catch (...) {
      ep = std::current_exception();
    }
    on_done(std::move(v), ep);
  }
}

}  // namespace detail

// Starts `t` now; it runs until its first suspension, then continues wherever the
// operations it awaits are completed. `on_done(value-or-nullopt, exception_ptr)` (or
// `on_done(exception_ptr)` for task<void>) runs when it finishes.
template <class T, class F>
void spawn(task<T> t, F on_done) {
  detail::run_detached(std::move(t), std::move(on_done));
}

// Runs every task at once and finishes when all have; the values in order. The first
// exception, if any, is rethrown after all have finished.
template <class T>
task<std::vector<T>> when_all_tasks(std::vector<task<T>> tasks) {
  struct state {
    std::size_t left = 0;
    std::coroutine_handle<> waiter;
    std::vector<std::optional<T>> out;
    std::exception_ptr error;
  };
  state st;
  st.out.resize(tasks.size());
  struct awaiter {
    state& st;
    std::vector<task<T>>& tasks;
    bool await_ready() const noexcept { return tasks.empty(); }
    bool await_suspend(std::coroutine_handle<> h) {
      st.waiter = h;
      st.left = tasks.size() + 1;  // held while starting
      for (std::size_t i = 0; i < tasks.size(); ++i)
        spawn(std::move(tasks[i]), [s = &st, i](std::optional<T> v, std::exception_ptr e) {
          s->out[i] = std::move(v);
          if (e && !s->error) s->error = e;
          if (--s->left == 0) s->waiter.resume();
        });
      return --st.left != 0;
    }
    void await_resume() const noexcept {}
  };
  co_await awaiter{st, tasks};
  if (st.error) std::rethrow_exception(st.error);
  std::vector<T> values;
  values.reserve(st.out.size());
  for (auto& v : st.out) values.push_back(std::move(*v));
  co_return values;
}

}  // namespace optcast
