// hg::Error and HG_CHECK: every bad input becomes an exception whose message names what
// was expected and what was given.
//
//   HG_CHECK(a.dim() == 2, "mm: expected a 2-D tensor, got {}-D (shape {})", a.dim(), a.sizes());
//
// The format string is checked at compile time by fmt.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace hg {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line)
      : std::runtime_error(std::move(message)), file_(file), line_(line) {}

  // Where in halfgrad the check failed (for bug reports; users read what()).
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  const char* file_;
  int line_;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, std::string message);

}  // namespace detail

}  // namespace hg

#define HG_ERROR(...) ::hg::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

#define HG_CHECK(cond, ...)     \
  do {                          \
    if (!(cond)) [[unlikely]] { \
      HG_ERROR(__VA_ARGS__);    \
    }                           \
  } while (false)
