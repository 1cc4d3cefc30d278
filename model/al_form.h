// model/al_form.h — a model in Associated Learning form (Kao and Chen, Neural
// Computation 2021; the Pipeline AL seed's ALPackage), without LibTorch.
//
// Owns `make_al_form`: a layer graph cut into L blocks becomes one layer graph
// (LayerGraph::al_blocks) in which block l holds its own layers f_l, then its
// added maps, with sizes fixed here (d = the target width, d_0 = the classes):
//   b_l bridge   s_l -> [adaptive_avgpool2d to 1x1 + flatten for a C x H x W
//                map | mean_tokens for a T x D sequence | as is for a
//                vector] -> linear(width of s_l -> d) -> sigmoid
//   g_l target   t_{l-1} -> linear(d_{l-1} -> d) -> sigmoid = t_l
//   h_l decoder  t_l -> linear(d -> d_{l-1}) -> sigmoid
// t_0 is the label's one-hot (an `al_labels` layer heads block 1). Block l's
// local loss is |b_l(s_l) - t_l|^2 + |h_l(t_l) - t_{l-1}|^2 (sums over the
// features, mean over the batch); only s_l and t_l cross to block l+1, and
// no gradient crosses back. Inference runs f_1..f_L, b_L, h_L..h_1.
// A cut is valid where exactly one tensor crosses it: every edge over a cut
// leaves the last layer before it and ends in the next block.
// Data flow: LayerGraph + cuts -> make_al_form -> LayerGraph (AL form) ->
//            profiler (its added layers are timed like any) | task graph
//            (schedule al) | AlModel (profiler/al_model.h) trains it.
// Thread safety: plain functions.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"

namespace tapp {

constexpr int64_t kDefaultAlTargetWidth = 128;

// The source graph (shapes inferred) cut before each layer in `block_starts`
// (source layer indices, ascending; L - 1 of them for L blocks). Errors name
// the field: `al.cuts[k]` for a cut that leaves a block empty or that more
// than one tensor crosses, `al.target_width`, `model` for a model without
// classes or with one label per token or per pixel.
Result<LayerGraph> make_al_form(const LayerGraph& source, const std::vector<int>& block_starts,
                                int64_t target_width = kDefaultAlTargetWidth);

// Source layer indices where a cut is valid (see above), ascending.
std::vector<int> valid_al_cuts(const LayerGraph& source);

// L blocks of about equal multiply-adds, cut only where valid. Error
// (`al.blocks`) when the model has fewer than L - 1 valid cuts.
Result<std::vector<int>> balanced_al_cuts(const LayerGraph& source, int blocks);

// The cut points of an AL form: the source layer indices its blocks 2..L begin at.
std::vector<int> al_cuts_of(const LayerGraph& al_form);

// Which block of an AL form layer i belongs to.
int al_block_of(const LayerGraph& al_form, int layer);

// The graph an AL form was made from (its original layers, in order) and its
// target width: make_al_form(al_source(g), al_cuts_of(g), al_target_width(g))
// gives g again (how a job carries an AL form to its workers).
LayerGraph al_source(const LayerGraph& al_form);
int64_t al_target_width(const LayerGraph& al_form);
// {"cuts": al_cuts_of, "target_width": al_target_width}, and the AL form of
// `source` that such an object describes (errors as make_al_form's).
nlohmann::json al_form_to_json(const LayerGraph& al_form);
Result<LayerGraph> al_form_from_json(const LayerGraph& source, const nlohmann::json& j);

// A layer library of an AL form, made from a library of its source model: the
// source's times for the original layers (a layer reading only earlier blocks
// keeps its input-gradient time, which AL skips: slightly over), the added maps
// (labels, bridges, targets, decoders: small linears) estimated from
// multiply-adds at the source library's own throughput. Prices the AL form of
// any cut set from one profile (optimize's AL row); `tapp-cli plan --allow-al`
// profiles the form itself.
LayerLibrary al_form_library(const LayerLibrary& source, const LayerGraph& al_form);

}  // namespace tapp
