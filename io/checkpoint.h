// Checkpoints: a model, its optimizer, and everything else a resume needs (LR schedulers, a
// DataLoader's place in its epoch, a GradScaler or amp::initialize's AmpHandle, an fp8 recipe's
// amax histories, the default generator) in one safetensors file, so that a stopped run resumes
// exactly where it was.
//
//   io::save_checkpoint("run/last.safetensors", *model, opt,
//                       {{"scaler", &scaler}, {"scheduler", &schedule}, {"loader", &loader},
//                        {"fp8", &recipe}},
//                       {{"step", "1200"}});
//   ...
//   auto extra = io::load_checkpoint("run/last.safetensors", *model, opt,
//                                    {{"scaler", &scaler}, {"scheduler", &schedule},
//                                     {"loader", &loader}, {"fp8", &recipe}});
//   int64_t step = std::stoll(extra.at("step"));
//
// save_checkpoint(path, model, optimizer, scaler, extra) and its load_checkpoint are the same
// with the scaler as the one state "scaler".
//
// The file is a plain safetensors file (it opens in Python):
//   tensors   "model.<key>"                    model.state_dict()
//             "optimizer.state.<i>.<name>"     optimizer.state_dict().state ("step", "exp_avg",
//                                              ...)
//             "state.<name>.<key>"             the tensors of the state called <name>
//   metadata  "format"                         "halfgrad-checkpoint", "version": "2"
//             "optimizer.param_groups"         JSON: [{"options": {...}, "params": [...]}, ...]
//             "state.<name>"                   JSON: {"kind": "OneCycleLR", "values": {...}}, the
//                                              kind and values of the state called <name> (a
//                                              GradScaler's values are torch's keys)
//             "rng.cpu"                        JSON: the default generator's {"seed", "offset"}
//             "kernel_choices"                 JSON: the GEMM and conv2d paths chosen by
//                                              measurement and the machine (NOTE [Kernel
//                                              choices across processes])
//             "extra.<key>"                    the caller's strings
// Version 1 files (before the states) hold the scaler as metadata "scaler" (JSON: its
// state_dict()) and no other state; they still load, the scaler as the state "scaler".
//
// The write is atomic (NOTE [Atomic checkpoints]). The default generator's state travels with
// the checkpoint, so dropout masks and data drawn after a resume are the ones an uninterrupted
// run draws, and so do the GEMM and conv2d paths chosen by timing them, so the resumed run's
// products sum in the stopped run's order: a resumed run continues bit-identically.
//
// NOTE [All-or-nothing resume] load_checkpoint reads and checks the whole file first, its
// checksums included (NOTE [Safetensors checksums]: a flipped bit in a weight, an optimizer
// step, an option or the generator's offset is an error before anything is used), then
// checks the model's keys, shapes and dtypes (a checkpoint must match its model exactly; no
// dtype conversion) and the states' names and kinds (each state given must be in the file, of
// the kind saved, and each state in the file must be given), reporting every mismatch in one
// error, then checks every state against its object (Stateful::check_state_dict, NOTE
// [Checkpoint state protocol]). Only then does it load: the GradScalers (whose values
// GradScaler::load_state_dict itself range-checks), then the optimizer (which checks its own
// state before changing anything; on its error the scalers' previous states are put back),
// then the other states, which passed their checks, and last the model and the generator. An
// error names the file and the key; the model, the optimizer and every state given are left as
// they were.
#pragma once

#include <map>
#include <string>
#include <variant>
#include <vector>

#include "halfgrad/io/stateful.h"

namespace hg::nn {
class Module;
}
namespace hg::optim {
class Optimizer;
class LRScheduler;
class ReduceLROnPlateau;
}  // namespace hg::optim
namespace hg::amp {
class GradScaler;
class AmpHandle;
}  // namespace hg::amp
namespace hg::ops {
class DelayedScaling;
}

namespace hg::io {

// A state a checkpoint saves and restores, by name: anything Stateful (a DataLoader, a
// DistributedSampler, a class of the caller's), or one of halfgrad's stateful types below io.
// The name is letters, digits, '_' and '-'; the names of one checkpoint differ.
class NamedState {
 public:
  NamedState(std::string name, Stateful* object) : name_(std::move(name)), object_(object) {}
  // Its step count, base lrs and own counters, kind the scheduler's name() (a SequentialLR's
  // schedulers are its own: save the SequentialLR).
  NamedState(std::string name, optim::LRScheduler* scheduler)
      : name_(std::move(name)), object_(scheduler) {}
  NamedState(std::string name, optim::ReduceLROnPlateau* scheduler)
      : name_(std::move(name)), object_(scheduler) {}
  NamedState(std::string name, amp::GradScaler* scaler) : name_(std::move(name)), object_(scaler) {}
  // amp::initialize's handle: its loss scaler's state and, with master weights, the float32
  // masters (amp::AmpHandleState), kind "AmpHandle".
  NamedState(std::string name, amp::AmpHandle* handle) : name_(std::move(name)), object_(handle) {}
  // The amax histories and scales of every layer that ran under the recipe, each known by the
  // name of its weight in the checkpoint's model.
  NamedState(std::string name, ops::DelayedScaling* recipe)
      : name_(std::move(name)), object_(recipe) {}

  const std::string& name() const { return name_; }
  using Object = std::variant<Stateful*, optim::LRScheduler*, optim::ReduceLROnPlateau*,
                              amp::GradScaler*, amp::AmpHandle*, ops::DelayedScaling*>;
  const Object& object() const { return object_; }

 private:
  std::string name_;
  Object object_;
};

struct LoadCheckpointOptions {
  // Put the default generator back to its saved state.
  bool restore_rng = true;
  // Take the GEMM and conv2d paths the saving process chose, when it ran on this machine and
  // build (NOTE [Kernel choices across processes] in cpu/kernel_choices.cpp), so that the
  // resumed run multiplies as the stopped one did.
  bool restore_kernel_choices = true;
  // Refuse a checkpoint without checksums (one written before halfgrad wrote them) instead of
  // loading it unverified.
  bool require_checksum = false;
};

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const std::vector<NamedState>& states,
                     const std::map<std::string, std::string>& extra = {});

// Returns the extra strings saved with the checkpoint. `states` must be the states the
// checkpoint holds, each of the kind saved (NOTE [All-or-nothing resume]).
std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model,
                                                   optim::Optimizer& optimizer,
                                                   const std::vector<NamedState>& states,
                                                   LoadCheckpointOptions options = {});

// The same with a GradScaler as the one state, named "scaler".
void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const amp::GradScaler& scaler,
                     const std::map<std::string, std::string>& extra = {});
std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model,
                                                   optim::Optimizer& optimizer,
                                                   amp::GradScaler& scaler,
                                                   LoadCheckpointOptions options = {});

}  // namespace hg::io
