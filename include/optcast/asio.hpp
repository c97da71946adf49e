// Asio completion tokens for every call, for programs built on Asio: a collective
// co_awaited from an asio::awaitable coroutine, or handed a callback, asio::use_future,
// asio::experimental::deferred, asio::experimental::as_tuple(...), or any other token.
//
//   auto ec = co_await optcast::async_allreduce(comm, in, out, optcast::ops::sum, asio::use_awaitable);
//   optcast::async_broadcast(comm, buf, 0, [](std::error_code ec) { ... });
//
// Each async_NAME(comm, args..., token) takes NAME's arguments (collectives.hpp) and
// completes with void(std::error_code) (NAME returns result<void>) or
// void(std::error_code, T) (NAME returns result<T>: summation, split). Of survive.hpp:
// async_revoke(comm, why, token) completes with void(std::error_code) once the revocation
// is made (from any thread: it runs on the communicator's loop), async_agree(comm[, flag],
// token) with void(std::error_code, agreement), and async_shrink(comm, token),
// async_grow(comm[, replacements], token) and async_admitted(world, wait, token) with
// void(std::error_code, std::optional<communicator>) (a value when it succeeds, as
// split's). async_run(comm, task, token) does the same for any optcast task, such as a
// coroutine of the caller's that runs several calls.
//
// The call runs on the communicator's event loop (fabric::executor()); its handler is
// invoked on the handler's associated executor (by default that event loop), never
// inside the initiating call, and keeps that executor's work counted until then. An
// exception escaping the call (out of memory) completes it with its error code
// (std::errc::not_enough_memory; a std::system_error's own code).
//
// Cancellation: a terminal cancellation through the handler's cancellation slot (an
// asio::cancellation_signal, awaitable_operators' ||, a parallel_group) ends the call
// with errc::cancelled and, as any failure does, breaks the communicator: every other
// rank fails too, told why. Partial and total cancellation are not supported (a
// collective cannot be withdrawn without leaving the ranks out of step) and are ignored.
// The communicator's deadline still applies.
#pragma once

#include <chrono>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>

#include <asio/any_io_executor.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>

#include "optcast/collectives.hpp"
#include "optcast/survive.hpp"

namespace optcast {

namespace detail {

template <class R>
struct async_signature;
template <>
struct async_signature<result<void>> {
  using type = void(std::error_code);
};
template <class U>
struct async_signature<result<U>> {
  using type = void(std::error_code, U);
};

inline std::error_code error_of(std::exception_ptr e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return std::make_error_code(std::errc::not_enough_memory);
  } catch (const std::system_error& x) {
    return x.code();
  } catch (const setup_error& x) {
    return x.code();
  } catch (...) {
    return std::make_error_code(std::errc::state_not_recoverable);
  }
}

template <class R, class Handler>
void invoke_with(Handler& h, R&& r) {
  if constexpr (std::is_same_v<std::decay_t<R>, result<void>>) {
    std::move(h)(r ? std::error_code{} : r.error());
  } else {
    using U = typename std::decay_t<R>::value_type;
    if (r)
      std::move(h)(std::error_code{}, std::move(*r));
    else
      std::move(h)(r.error(), U{});
  }
}

template <class R, class Handler>
void start_async(communicator& c, task<R> t, Handler handler) {
  fabric& f = c.get_fabric();
  const asio::any_io_executor* loop = f.executor();
  if (!loop)
    throw std::logic_error("optcast: the " + std::string(f.name()) +
                           " fabric has no event loop for asynchronous calls; use optcast::run");
  auto work = asio::prefer(asio::get_associated_executor(handler, *loop), asio::execution::outstanding_work.tracked);
  auto slot = asio::get_associated_cancellation_slot(handler);
  if (slot.is_connected())
    slot.assign([&f, loop = *loop](asio::cancellation_type type) {
      if ((type & asio::cancellation_type::terminal) == asio::cancellation_type::none) return;
      asio::dispatch(loop, [&f] {
        f.abort(make_error_code(errc::cancelled), "a call was cancelled by its caller (Asio cancellation)");
      });
    });
  asio::dispatch(*loop, [t = std::move(t), h = std::move(handler), work = std::move(work), slot]() mutable {
    spawn(std::move(t), [h = std::move(h), work = std::move(work), slot](std::optional<R> v, std::exception_ptr e) mutable {
      R r = e ? R(fail(error_of(e))) : std::move(*v);
      // The slot is cleared where it is emitted from, the handler's executor, not on the
      // fabric's strand (another thread, when several run the loop).
      asio::post(work, [h = std::move(h), r = std::move(r), slot]() mutable {
        if (slot.is_connected()) slot.clear();
        invoke_with(h, std::move(r));
      });
    });
  });
}

// survive.hpp's calls in the shapes the completion tokens take (an optional communicator,
// as split's, since a failed call has none to give).
inline task<result<void>> revoke_on_loop(communicator& c, std::string why) {
  revoke(c, std::move(why));
  co_return result<void>{};
}
inline task<result<std::optional<communicator>>> as_optional(task<result<communicator>> t) {
  auto s = co_await std::move(t);
  if (!s) co_return fail(s.error());
  co_return std::optional<communicator>(std::move(*s));
}

// async_NAME's arguments are NAME's followed by the token: split the token off.
template <class Make, class Tuple, std::size_t... I>
auto async_split_token(communicator& c, Make make, Tuple args, std::index_sequence<I...>) {
  // get<I> of an rvalue tuple of references gives each argument back as it was passed.
  return async_run(c, make(std::get<I>(std::move(args))...), std::get<sizeof...(I)>(std::move(args)));
}

}  // namespace detail

// Runs `t` (any optcast task whose value is a result) on `c`'s event loop and completes
// `token` with its outcome (see above).
template <class R, class CompletionToken>
auto async_run(communicator& c, task<R> t, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, typename detail::async_signature<R>::type>(
      [&c](auto handler, task<R> tk) { detail::start_async(c, std::move(tk), std::move(handler)); }, token,
      std::move(t));
}

// async_NAME(comm, NAME's arguments..., token) for each call of collectives.hpp.
#define OPTCAST_ASYNC_FORM(name)                                                                           \
  template <class... Args>                                                                                 \
  auto async_##name(communicator& c, Args&&... args) {                                                     \
    static_assert(sizeof...(Args) >= 1, "async_" #name ": the last argument is the completion token");     \
    return detail::async_split_token(                                                                      \
        c, [&c](auto&&... a) { return name(c, std::forward<decltype(a)>(a)...); },                         \
        std::forward_as_tuple(std::forward<Args>(args)...), std::make_index_sequence<sizeof...(Args) - 1>{}); \
  }
OPTCAST_ASYNC_FORM(broadcast)
OPTCAST_ASYNC_FORM(scatter)
OPTCAST_ASYNC_FORM(scatterv)
OPTCAST_ASYNC_FORM(gather)
OPTCAST_ASYNC_FORM(gatherv)
OPTCAST_ASYNC_FORM(allgather)
OPTCAST_ASYNC_FORM(allgatherv)
OPTCAST_ASYNC_FORM(reduce)
OPTCAST_ASYNC_FORM(allreduce)
OPTCAST_ASYNC_FORM(reduce_scatter_block)
OPTCAST_ASYNC_FORM(reduce_scatter)
OPTCAST_ASYNC_FORM(alltoall)
OPTCAST_ASYNC_FORM(summation)
OPTCAST_ASYNC_FORM(barrier)
OPTCAST_ASYNC_FORM(send)
OPTCAST_ASYNC_FORM(recv)
OPTCAST_ASYNC_FORM(split)
OPTCAST_ASYNC_FORM(subset)
OPTCAST_ASYNC_FORM(agree)
#undef OPTCAST_ASYNC_FORM

// revoke(c, why) made on c's loop, whichever thread calls: completes once it is made.
template <class CompletionToken>
auto async_revoke(communicator& c, std::string why, CompletionToken&& token) {
  return async_run(c, detail::revoke_on_loop(c, std::move(why)), std::forward<CompletionToken>(token));
}

// shrink(c): the survivors' communicator, or nullopt with the error.
template <class CompletionToken>
auto async_shrink(communicator& c, CompletionToken&& token) {
  return async_run(c, detail::as_optional(shrink(c)), std::forward<CompletionToken>(token));
}

// grow(c[, replacements]) on every member: the communicator with the replacements, or
// nullopt with the error.
template <class CompletionToken>
auto async_grow(communicator& c, int replacements, CompletionToken&& token) {
  return async_run(c, detail::as_optional(grow(c, replacements)), std::forward<CompletionToken>(token));
}
template <class CompletionToken>
auto async_grow(communicator& c, CompletionToken&& token) {
  return async_grow(c, 1, std::forward<CompletionToken>(token));
}

// admitted(world, wait) on a replacement: the members' grown communicator, or nullopt
// with the error.
template <class CompletionToken>
auto async_admitted(communicator& world, std::chrono::milliseconds wait, CompletionToken&& token) {
  return async_run(world, detail::as_optional(admitted(world, wait)), std::forward<CompletionToken>(token));
}

}  // namespace optcast
