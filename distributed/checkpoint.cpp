// save_checkpoint and load_checkpoint for a data-parallel job (NOTE [Checkpoints of a
// data-parallel job]).
#include "halfgrad/distributed/checkpoint.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string_view>
#include <vector>

#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/random.h"
#include "halfgrad/distributed/process_group.h"

namespace hg::distributed {

namespace {

constexpr std::string_view kPrefix = "distributed.";

ProcessGroup& group_or_default(ProcessGroup* group) {
  return group != nullptr ? *group : default_process_group();
}

// The rank with the lowest number whose `failed` is true on it, or -1: every rank learns it.
int first_failed_rank(ProcessGroup& group, bool failed) {
  // Max over (world_size - rank) of the ranks that failed: the lowest such rank wins.
  const Tensor flag = tensor(std::vector<int64_t>{failed ? group.world_size() - group.rank() : 0});
  group.all_reduce(flag, ReduceOp::Max)->wait();
  const int64_t value = flag.item<int64_t>();
  return value == 0 ? -1 : group.world_size() - int(value);
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const amp::GradScaler& scaler,
                     const std::map<std::string, std::string>& extra, ProcessGroup* group_in) {
  ProcessGroup& group = group_or_default(group_in);
  const Generator::State mine = default_generator().get_state();
  int64_t words[2];
  std::memcpy(&words[0], &mine.seed, sizeof(int64_t));
  std::memcpy(&words[1], &mine.offset, sizeof(int64_t));
  const Tensor every = zeros({2 * int64_t(group.world_size())}, {.dtype = kInt64});
  group.all_gather(every, tensor(std::vector<int64_t>{words[0], words[1]}))->wait();

  std::string failure;
  if (group.rank() == 0) {
    try {
      std::map<std::string, std::string> all = extra;
      all[std::string(kPrefix) + "world_size"] = std::to_string(group.world_size());
      const std::vector<int64_t> states = every.to_vector<int64_t>();
      for (int r = 0; r < group.world_size(); ++r) {
        uint64_t seed = 0, offset = 0;
        std::memcpy(&seed, &states[2 * size_t(r)], sizeof(uint64_t));
        std::memcpy(&offset, &states[2 * size_t(r) + 1], sizeof(uint64_t));
        all[fmt::format("{}rng.{}", kPrefix, r)] = fmt::format("{} {}", seed, offset);
      }
      io::save_checkpoint(path, model, optimizer, scaler, all);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  const int failed = first_failed_rank(group, !failure.empty());
  if (!failure.empty()) HG_ERROR("{}", failure);
  HG_CHECK(failed < 0, "save_checkpoint: \"{}\": rank 0 could not write the checkpoint", path);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model,
                                                   optim::Optimizer& optimizer,
                                                   amp::GradScaler& scaler,
                                                   io::LoadCheckpointOptions options,
                                                   ProcessGroup* group_in) {
  ProcessGroup& group = group_or_default(group_in);
  const bool restore_rng = options.restore_rng;
  options.restore_rng = false;
  std::map<std::string, std::string> extra;
  std::string failure;
  try {
    extra = io::load_checkpoint(path, model, optimizer, scaler, options);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const int failed = first_failed_rank(group, !failure.empty());
  if (!failure.empty()) HG_ERROR("{}", failure);
  HG_CHECK(failed < 0, "load_checkpoint: \"{}\": rank {} could not load the checkpoint", path,
           failed);

  std::map<std::string, std::string> caller;
  for (const auto& [key, value] : extra) {
    if (!key.starts_with(kPrefix)) caller.emplace(key, value);
  }
  if (restore_rng) {
    const auto it = extra.find(fmt::format("{}rng.{}", kPrefix, group.rank()));
    if (it != extra.end()) {
      unsigned long long seed = 0, offset = 0;
      char tail = 0;
      HG_CHECK(std::sscanf(it->second.c_str(), "%llu %llu %c", &seed, &offset, &tail) == 2,
               "load_checkpoint: \"{}\": expected \"{}\" to hold a seed and an offset, got '{}'",
               path, it->first, it->second);
      default_generator().set_state({uint64_t(seed), uint64_t(offset)});
    }
  }
  return caller;
}

}  // namespace hg::distributed
