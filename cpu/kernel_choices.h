// The GEMM and conv2d paths a process chose by measurement, carried to another process by a
// checkpoint (NOTE [Kernel choices across processes] in cpu/kernel_choices.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hg::cpu {

// This machine and build as a record of choices names them: the CPU's vendor, name, family,
// model and stepping, the vector extensions that decide which path is fastest, oneDNN's version
// and halfgrad's.
std::string kernel_machine();

// This process's choices made by measurement (or restored), GEMM's and conv2d's, with the
// machine they were made on, as JSON text for restore_kernel_choices.
std::string save_kernel_choices();

// Throws hg::Error naming what is wrong when `record` is not a record save_kernel_choices
// writes; changes nothing.
void check_kernel_choices(std::string_view record);

struct RestoredKernelChoices {
  int64_t gemm = 0;  // GEMM classes taken
  int64_t conv = 0;  // conv2d classes taken
  // Why the record's choices were not taken (made on another machine or build), or empty.
  std::string skipped;
};
// Takes the record's choices as this process's own, when it was made on this machine and build:
// each class's path from then on is the recorded one (replacing a choice made here), except
// where a path is set (set_gemm_path, set_conv_path, the environment) or cannot run here.
// Checks the record first, as check_kernel_choices does.
RestoredKernelChoices restore_kernel_choices(std::string_view record);

namespace kernel_choices_detail {

// One class's choice as a record holds it: the class key (the table's), the path's name, and
// the class as describe() prints it.
struct SavedChoice {
  std::vector<int64_t> key;
  std::string path;
  std::string shape_class;
};

// The measured and restored choices of each table, in the order first met (cpu/gemm_path.cpp,
// cpu/onednn_conv.cpp).
std::vector<SavedChoice> saved_gemm_choices();
std::vector<SavedChoice> saved_conv_choices();
// Takes the saved choices that apply here (see restore_kernel_choices); returns how many.
int64_t restore_gemm_choices(const std::vector<SavedChoice>& saved);
int64_t restore_conv_choices(const std::vector<SavedChoice>& saved);

}  // namespace kernel_choices_detail

}  // namespace hg::cpu
