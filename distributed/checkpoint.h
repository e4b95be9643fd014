// Checkpoints of a data-parallel job: rank 0 writes io::save_checkpoint's file, with every
// rank's generator state in it, and every rank resumes from it bit-identically.
//
//   distributed::save_checkpoint("run/last.safetensors", ddp->module(), opt, scaler,
//                                {{"step", std::to_string(step)}});
//   auto extra = distributed::load_checkpoint("run/last.safetensors", ddp->module(), opt, scaler);
//
// NOTE [Checkpoints of a data-parallel job] Under DistributedDataParallel every rank holds the
// same parameters, optimizer state and scaler, so rank 0's are the job's; only the default
// generators differ (each rank draws its own dropout masks). save_checkpoint all-gathers every
// rank's (seed, offset), rank 0 writes the file with them as the extra strings
// "distributed.world_size" and "distributed.rng.<rank>", and every rank learns whether the
// write succeeded before it returns (a failed write is an error on every rank, so no rank goes
// on to read a file that is not there). load_checkpoint is called by every rank on the same
// path (a file system every rank sees): each loads it as io::load_checkpoint does, then puts
// its own generator back; the job resumes bit-identically when it has the world size it was
// saved with (with another, ranks beyond the saved ones keep their generators). A load that
// fails on one rank is an error on every rank, naming that rank.
#pragma once

#include <map>
#include <string>

#include "halfgrad/io/checkpoint.h"

namespace hg::distributed {

class ProcessGroup;

// Collective: every rank of `group` (nullptr: the default group) calls it.
void save_checkpoint(const std::string& path, const nn::Module& model,
                     const optim::Optimizer& optimizer, const amp::GradScaler& scaler,
                     const std::map<std::string, std::string>& extra = {},
                     ProcessGroup* group = nullptr);

// Collective. Returns the caller's extra strings (without the "distributed." ones).
std::map<std::string, std::string> load_checkpoint(const std::string& path, nn::Module& model,
                                                   optim::Optimizer& optimizer,
                                                   amp::GradScaler& scaler,
                                                   io::LoadCheckpointOptions options = {},
                                                   ProcessGroup* group = nullptr);

}  // namespace hg::distributed
