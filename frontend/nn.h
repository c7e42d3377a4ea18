// The DSL's neural-network library in one include: Module, Linear, Embedding, the norms, the
// feed-forward network, attention with its masks and position schemes, the layers, the
// recurrent cells and their attention, and the training losses.
#pragma once

#include "frontend/builder.h"
#include "frontend/nn_attention.h"
#include "frontend/nn_blocks.h"
#include "frontend/nn_layers.h"
#include "frontend/nn_loss.h"
#include "frontend/nn_position.h"
#include "frontend/nn_recurrent.h"
#include "frontend/tensor.h"
