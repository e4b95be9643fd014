// A user's program, built against an installed halfgrad through find_package(halfgrad).
#include <halfgrad/halfgrad.h>

#include <fmt/format.h>

int main() {
  const hg::Half h(0.1f);
  fmt::print("0.1 as float16 is {} (bits {:#06x})\n", static_cast<float>(h), h.bits);
  if (h.bits != 0x2E66) return 1;
  fmt::print("consumer ok\n");
  return 0;
}
