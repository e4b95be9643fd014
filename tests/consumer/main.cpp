// A user's program, built against an installed halfgrad through find_package(halfgrad).
#include <unistd.h>

#include <filesystem>

#include <halfgrad/halfgrad.h>

int main() {
  using namespace hg;
  const Tensor x = arange(6.0).reshape({2, 3}).t();
  const Tensor h = x.contiguous().to(kFloat16);
  fmt::print("{}\n", h);
  const std::vector<float> values = h.to_vector<float>();
  if (values != std::vector<float>{0, 3, 1, 4, 2, 5}) return 1;
  if (tensor({0.1}, kFloat16).to_vector<Half>()[0].bits != 0x2E66) return 1;
  // A safetensors round trip: links the library's own dependencies (xxHash's checksums).
  const std::string path = std::filesystem::temp_directory_path() /
                           fmt::format("halfgrad-consumer-{}.safetensors", ::getpid());
  save(path, {{"h", h}});
  const bool round_trip =
      load(path, {.require_checksum = true}).at("h").to_vector<float>() == values;
  std::filesystem::remove(path);
  if (!round_trip) return 1;
  fmt::print("consumer ok\n");
  return 0;
}
