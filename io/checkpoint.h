// Checkpoints: a model, its optimizer and its GradScaler in one safetensors file, so that a
// stopped run resumes exactly where it was.
//
//   io::save_checkpoint("run/last.safetensors", *model, opt, scaler, {{"step", "1200"}});
//   ...
//   auto extra = io::load_checkpoint("run/last.safetensors", *model, opt, scaler);
//   int64_t step = std::stoll(extra.at("step"));
//
// The file is a plain safetensors file (it opens in Python):
//   tensors   "model.<key>"                    model.state_dict()
//             "optimizer.state.<i>.<name>"     optimizer.state_dict().state ("step", "exp_avg",
//             ...)
//   metadata  "format"                         "halfgrad-checkpoint", "version": "1"
//             "optimizer.param_groups"         JSON: [{"options": {...}, "params": [...]}, ...]
//             "scaler"                         JSON: scaler.state_dict() (torch's keys)
//             "rng.cpu"                        JSON: the default generator's {"seed", "offset"}
//             "extra.<key>"                    the caller's strings
//
// The write is atomic (NOTE [Atomic checkpoints]). The default generator's state travels with
// the checkpoint, so dropout masks and data drawn after a resume are the ones an uninterrupted
// run draws: a resumed run continues bit-identically.
//
// NOTE [All-or-nothing resume] load_checkpoint reads and checks the whole file first, its
// checksums included (NOTE [Safetensors checksums]: a flipped bit in a weight, an optimizer
// step, an option or the generator's offset is an error before anything is used), then
// checks the model's keys, shapes and dtypes (a checkpoint must match its model exactly; no
// dtype conversion), then loads the scaler, the optimizer (which checks its own state before
// changing anything; on its error the scaler's previous state is put back) and last the model
// and the generator. An error names the file and the key; the model, the optimizer and the
// scaler are left as they were.
#pragma once

#include <map>
#include <string>

namespace hg::nn {
class Module;
}
namespace hg::optim {
class Optimizer;
}
namespace hg::amp {
class GradScaler;
}

namespace hg::io {

struct LoadCheckpointOptions {
  // Put the default generator back to its saved state.
  bool restore_rng = true;
  // Refuse a checkpoint without checksums (one written before halfgrad wrote them) instead of
  // loading it unverified.
  bool require_checksum = false;
};

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const amp::GradScaler& scaler,
                     const std::map<std::string, std::string>& extra = {});

// Returns the extra strings saved with the checkpoint.
std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model,
                                                   optim::Optimizer& optimizer,
                                                   amp::GradScaler& scaler,
                                                   LoadCheckpointOptions options = {});

}  // namespace hg::io
