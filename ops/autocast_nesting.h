// The weight-cast cache's region count and its clearing, as separate calls: what amp's
// imperative autocast API (amp/autocast.h: increment_nesting, decrement_nesting, clear_cache,
// libtorch's at::autocast functions of those names) reaches. amp::Autocast goes through
// ops::enter_autocast_region / leave_autocast_region (ops/autocast.h), which are these calls
// put together as torch.autocast's __enter__ and __exit__ put them.
#pragma once

namespace hg::ops {

// The number of autocast regions open on this thread (amp::Autocast guards plus the
// imperative increments). The weight-cast cache keeps casts only while it is above zero.
int autocast_nesting();
// One more region; returns the new count.
int increment_autocast_nesting();
// One region less; returns the new count. Does not clear the cache (clear_autocast_cache does,
// as libtorch's decrement_nesting leaves that to its caller). hg::Error, nothing changed, at 0.
int decrement_autocast_nesting();
// Drops this thread's cached weight casts.
void clear_autocast_cache();

}  // namespace hg::ops
