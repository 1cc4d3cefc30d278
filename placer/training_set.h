// placer/training_set.h — random problems for training a policy that transfers (issue 17).
//
// Owns the generators `tapp-cli train-policy --random-models/--random-clusters`
// draws from, so a trained policy sees more than the zoo and the example clusters:
//   random_cnn:     3-7 stages of 1-3 3x3 convolutions (+ ReLU), some stages a
//                   two-branch block joined by an add, each stage ending in a
//                   max-pool; then 1-2 hidden linear layers and the classifier;
//                   32x32 or 64x64 inputs, 8-512 channels, 10-1000 classes.
//   random_deep_cnn: what deep ImageNet models are made of, 30-250 layers:
//                   a strided stem, then either ResNet-like stages of basic
//                   or bottleneck blocks (batchnorm, projection shortcuts) or
//                   Inception-like blocks of 2-4 towers joined by a concat;
//                   global average pool and the classifier; 32-224 inputs,
//                   8-64 channels after the stem.
//   random_transformer: the zoo's transformer builders (model/zoo.h) at
//                   random shapes: a causal language model with a tied
//                   output table (GPT-2's form), a pre-norm encoder or a
//                   post-norm one (BERT's) with a classifier; 2-16 blocks of
//                   width 128-1024 (64 per head), 64-1024 tokens, a vocabulary
//                   of 1,000-60,000 (log-uniform).
//   random_cluster: 2-8 devices of 0.5-16 GB, the fastest of speed 0.1-100
//                   (log-uniform: a slow core to an accelerator; a third of
//                   the clusters all equal, the others 0.1-1x of it), a
//                   default link of 1-200 Gbit/s that grows with the speed
//                   and, on a third of the clusters each, slow links (50-500
//                   Mbit/s, up to 2 ms) between random pairs (unequal ones
//                   only) or two islands of devices joined by slow links
//                   (1/1000 to 1/2 of the fabric's bandwidth, each direction
//                   its own, 0.5-5 ms), e.g. one device behind a WAN link.
//   random_mesh_cluster: random_cluster's devices and fabric, then every
//                   ordered pair of devices its own link: 1/300 of the
//                   fabric's bandwidth up to all of it (log-uniform, at
//                   least 10 Mbit/s), 0.1-5 ms, so A->B and B->A differ
//                   (devices on an edge or campus network).
// Both are deterministic for a generator state.
// Thread safety: pure functions of the generator passed in.
#pragma once

#include <random>

#include "core/cluster.h"
#include "model/layer_graph.h"

namespace tapp {

LayerGraph random_cnn(std::mt19937_64& rng, const std::string& name);
LayerGraph random_deep_cnn(std::mt19937_64& rng, const std::string& name);
LayerGraph random_transformer(std::mt19937_64& rng, const std::string& name);
Cluster random_cluster(std::mt19937_64& rng, const std::string& name);
Cluster random_mesh_cluster(std::mt19937_64& rng, const std::string& name);

}  // namespace tapp
