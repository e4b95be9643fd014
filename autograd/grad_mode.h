// Grad mode: whether ops record the autograd graph on this thread. On by default; a new
// thread starts with it on.
//
//   { hg::NoGradGuard no_grad; y = model(x); }   // nothing recorded
#pragma once

namespace hg {

namespace autograd {
namespace detail {
// The thread's grad mode. Read inline (every op reads it); constinit, so an access is a plain
// thread-local load, with no initialisation call.
extern thread_local constinit bool grad_enabled;
}  // namespace detail
inline bool is_grad_enabled() { return detail::grad_enabled; }
inline void set_grad_enabled(bool enabled) { detail::grad_enabled = enabled; }
}  // namespace autograd

// Sets grad mode for its lifetime and restores the previous mode when it ends (also when
// an exception unwinds).
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : previous_(autograd::is_grad_enabled()) {
    autograd::set_grad_enabled(enabled);
  }
  ~AutoGradMode() { autograd::set_grad_enabled(previous_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool previous_;
};

// libtorch's torch::NoGradGuard.
class NoGradGuard : public AutoGradMode {
 public:
  NoGradGuard() : AutoGradMode(false) {}
};

class EnableGradGuard : public AutoGradMode {
 public:
  EnableGradGuard() : AutoGradMode(true) {}
};

}  // namespace hg
