// Optimizers and learning-rate schedulers (torch.optim).
#pragma once

#include "halfgrad/optim/adagrad.h"
#include "halfgrad/optim/adam.h"
#include "halfgrad/optim/adamax.h"
#include "halfgrad/optim/lbfgs.h"
#include "halfgrad/optim/lr_scheduler.h"
#include "halfgrad/optim/optimizer.h"
#include "halfgrad/optim/rmsprop.h"
#include "halfgrad/optim/sgd.h"
