// A user's program, built against an installed halfgrad through find_package(halfgrad).
#include <halfgrad/halfgrad.h>

int main() {
  using namespace hg;
  const Tensor x = arange(6.0).reshape({2, 3}).t();
  const Tensor h = x.contiguous().to(kFloat16);
  fmt::print("{}\n", h);
  const std::vector<float> values = h.to_vector<float>();
  if (values != std::vector<float>{0, 3, 1, 4, 2, 5}) return 1;
  if (tensor({0.1}, kFloat16).to_vector<Half>()[0].bits != 0x2E66) return 1;
  fmt::print("consumer ok\n");
  return 0;
}
