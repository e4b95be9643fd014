// The record of a process's GEMM and conv2d path choices, and the machine it names.
#include "halfgrad/cpu/kernel_choices.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "halfgrad/config.h"
#include "halfgrad/core/error.h"
#include "halfgrad/cpu/onednn.h"

namespace hg::cpu {

// NOTE [Kernel choices across processes] A GEMM's or conv2d's path is chosen by timing the
// candidates at the first product of each shape class (NOTE [GEMM path by measurement], NOTE
// [oneDNN convolutions]), and where two paths time alike two processes can keep different ones,
// whose sums run in another order: the last bits of their results differ. Within a process a
// choice never changes, so a run's bits repeat; but a run stopped and resumed from its
// checkpoint is two processes, and the resumed one would measure again. So io::save_checkpoint
// stores this record of the choices (metadata "kernel_choices") and io::load_checkpoint takes
// them back before the resumed run's first product: the resumed run multiplies on the paths the
// stopped one used and continues with its bits (a test: examples/mnist_cnn, resumed from an
// uninterrupted run's checkpoint, ends on that run's parameters).
//
// A record names the machine and build it was made on (kernel_machine): on another CPU the
// fastest paths can differ (oneDNN's bfloat16 kernel is 8x float32 with AMX, no faster without
// it), and another halfgrad may key its classes differently, so a record from elsewhere is not
// taken; the process measures as usual. Choices fixed by set_gemm_path, set_conv_path or the
// environment are not recorded and win over a record. Taking a record replaces the choices the
// process made so far for the same classes: loading a checkpoint is where a run's bits restart.

namespace {

using json = nlohmann::json;
namespace detail = kernel_choices_detail;

#if defined(__x86_64__)
// The CPU's vendor, name, family/model/stepping and the extensions the paths depend on.
std::string describe_cpu() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  char vendor[13] = {};
  if (__get_cpuid(0, &a, &b, &c, &d) != 0) {
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
  }
  unsigned family = 0, model = 0, stepping = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) != 0) {
    family = (a >> 8) & 0xf;
    model = (a >> 4) & 0xf;
    stepping = a & 0xf;
    if (family == 0xf) family += (a >> 20) & 0xff;
    if (family == 0x6 || family >= 0xf) model |= ((a >> 16) & 0xf) << 4;
  }
  std::string name;
  unsigned highest = 0;
  if (__get_cpuid(0x80000000, &highest, &b, &c, &d) != 0 && highest >= 0x80000004) {
    for (unsigned leaf = 0x80000002; leaf <= 0x80000004; ++leaf) {
      unsigned r[4] = {};
      __get_cpuid(leaf, &r[0], &r[1], &r[2], &r[3]);
      name.append(reinterpret_cast<const char*>(r), sizeof(r));
    }
    name = name.c_str();  // up to its terminator
    const size_t first = name.find_first_not_of(' ');
    const size_t last = name.find_last_not_of(' ');
    name = first == std::string::npos ? "" : name.substr(first, last - first + 1);
  }
  std::vector<std::string_view> features;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) features.push_back("avx2");
  if (__builtin_cpu_supports("avx512f")) features.push_back("avx512f");
  unsigned max_leaf = 0;
  __get_cpuid(0, &max_leaf, &b, &c, &d);
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    if (d & (1u << 23)) features.push_back("avx512_fp16");
    if (d & (1u << 22)) features.push_back("amx_bf16");
    __cpuid_count(7, 1, a, b, c, d);
    if (a & (1u << 5)) features.push_back("avx512_bf16");
    if (a & (1u << 21)) features.push_back("amx_fp16");
  }
  return fmt::format("{} {}, family {} model {} stepping {} ({})", vendor, name, family, model,
                     stepping, fmt::join(features, " "));
}
#else
std::string describe_cpu() { return "a CPU that is not x86-64"; }
#endif

std::vector<detail::SavedChoice> read_list(const json& record, const char* table) {
  const json& list = record.at(table);
  std::vector<detail::SavedChoice> saved;
  for (const json& entry : list) {
    detail::SavedChoice choice;
    for (const json& number : entry.at("key")) choice.key.push_back(number.get<int64_t>());
    choice.path = entry.at("path").get<std::string>();
    choice.shape_class = entry.at("class").get<std::string>();
    saved.push_back(std::move(choice));
  }
  return saved;
}

json write_list(const std::vector<detail::SavedChoice>& saved) {
  json list = json::array();
  for (const detail::SavedChoice& choice : saved) {
    list.push_back({{"key", choice.key}, {"path", choice.path}, {"class", choice.shape_class}});
  }
  return list;
}

// The record's machine and lists, or an hg::Error naming what is missing or malformed.
struct Record {
  std::string machine;
  std::vector<detail::SavedChoice> gemm, conv;
};

[[noreturn]] void malformed(std::string_view what) {
  HG_ERROR(
      "kernel choices: expected a JSON object with \"machine\" (a string) and \"gemm\" and "
      "\"conv\" (lists of {{\"key\": [integers], \"path\": name, \"class\": text}}), as "
      "save_kernel_choices writes; {}",
      what);
}

Record parse(std::string_view text) {
  const json record = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) malformed("got text that is not JSON");
  if (!record.is_object() || !record.contains("machine") || !record["machine"].is_string() ||
      !record.contains("gemm") || !record["gemm"].is_array() || !record.contains("conv") ||
      !record["conv"].is_array()) {
    malformed(fmt::format("got {}", record.dump().substr(0, 200)));
  }
  try {
    return {record["machine"].get<std::string>(), read_list(record, "gemm"),
            read_list(record, "conv")};
  } catch (const json::exception& e) {
    malformed(fmt::format("a choice is not one ({})", e.what()));
  }
}

}  // namespace

std::string kernel_machine() {
  return fmt::format("{}; oneDNN {}; halfgrad {}", describe_cpu(), onednn_version(),
                     HALFGRAD_VERSION);
}

std::string save_kernel_choices() {
  return json{{"machine", kernel_machine()},
              {"gemm", write_list(detail::saved_gemm_choices())},
              {"conv", write_list(detail::saved_conv_choices())}}
      .dump();
}

void check_kernel_choices(std::string_view record) { parse(record); }

RestoredKernelChoices restore_kernel_choices(std::string_view text) {
  const Record record = parse(text);
  RestoredKernelChoices restored;
  const std::string here = kernel_machine();
  if (record.machine != here) {
    restored.skipped = fmt::format("made on {}, this is {}", record.machine, here);
    return restored;
  }
  restored.gemm = detail::restore_gemm_choices(record.gemm);
  restored.conv = detail::restore_conv_choices(record.conv);
  return restored;
}

}  // namespace hg::cpu
