// Checkpoints, both halves in one include: the on-disk format (checkpoint_dir.h:
// CheckpointDirectory, LibTorch-free, also linked into the Python extension) and LibTorch
// state as its blobs (torch_state.h: module, optimizer, RNG to bytes and back).
// A multi-writer checkpoint over a group: checkpoint_collective.h.
#pragma once

#include "heft/parallel/checkpoint_dir.h"
#include "heft/parallel/torch_state.h"
