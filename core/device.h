// Device: where a tensor's storage lives (the CPU, or CUDA device n).
#pragma once

#include <cstdint>
#include <string_view>

namespace hg {

enum class DeviceType : int8_t { CPU, CUDA };
inline constexpr DeviceType kCPU = DeviceType::CPU;
inline constexpr DeviceType kCUDA = DeviceType::CUDA;

std::string_view device_type_name(DeviceType type);  // "cpu", "cuda"

struct Device {
  DeviceType type = kCPU;
  int8_t index = 0;  // the CUDA device ordinal; always 0 for the CPU

  constexpr Device(DeviceType device_type = kCPU, int device_index = 0)  // NOLINT: implicit
      : type(device_type), index(static_cast<int8_t>(device_index)) {}

  // "cpu", "cuda", "cuda:1"; anything else throws hg::Error naming the string.
  static Device parse(std::string_view text);

  constexpr bool is_cpu() const { return type == kCPU; }
  constexpr bool is_cuda() const { return type == kCUDA; }
  friend constexpr bool operator==(Device a, Device b) = default;
};

}  // namespace hg
