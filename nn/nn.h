// hg::nn: modules, init, functional and utils (the torch.nn of halfgrad).
#pragma once

#include "halfgrad/nn/containers.h"
#include "halfgrad/nn/functional.h"
#include "halfgrad/nn/init.h"
#include "halfgrad/nn/layers.h"
#include "halfgrad/nn/loss.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/nn/modules.h"
#include "halfgrad/nn/rnn.h"
#include "halfgrad/nn/transformer.h"
#include "halfgrad/nn/utils.h"
