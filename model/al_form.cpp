#include "model/al_form.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace tapp {
namespace {

Status cut_error(size_t k, const std::string& why) {
  return Status::field_error("al.cuts[" + std::to_string(k) + "]", why);
}

Layer added_layer(const std::string& name, const std::string& op, int input) {
  Layer l;
  l.name = name;
  l.op = op;
  if (input >= 0) l.inputs = {input};
  return l;
}

// Appends a copy of `l` (layer `from` of its graph) to `to`, its inputs renumbered by `index`, and records its index.
void append_renumbered(LayerGraph& to, const Layer& l, int from, std::vector<int>& index) {
  Layer copy = l;
  for (int& p : copy.inputs) p = index[p];
  index[from] = static_cast<int>(to.layers.size());
  to.layers.push_back(std::move(copy));
}

// The first original layer of a block: block 1 starts with its al_labels layer.
int first_original(const LayerGraph& al, size_t block) {
  return al.al_blocks[block].first + (block == 0 ? 1 : 0);
}

}  // namespace

std::vector<int> valid_al_cuts(const LayerGraph& source) {
  const int n = static_cast<int>(source.layers.size());
  // A cut before layer k is valid when no layer before k - 1 is read at or
  // after k, and no layer at or after k reads the model input.
  std::vector<int> last_reader(n, -1);
  int last_input_reader = -1;
  for (int i = 0; i < n; ++i) {
    if (source.layers[i].inputs.empty()) last_input_reader = i;
    for (int p : source.layers[i].inputs) last_reader[p] = std::max(last_reader[p], i);
  }
  std::vector<int> cuts;
  int furthest = -1;  // the latest reader of layers [0, k - 2]
  for (int k = 1; k < n; ++k) {
    if (k >= 2) furthest = std::max(furthest, last_reader[k - 2]);
    if (furthest < k && last_input_reader < k) cuts.push_back(k);
  }
  return cuts;
}

Result<std::vector<int>> balanced_al_cuts(const LayerGraph& source, int blocks) {
  if (blocks < 1) return Status::field_error("al.blocks", "must be at least 1");
  const std::vector<int> valid = valid_al_cuts(source);
  if (static_cast<int>(valid.size()) < blocks - 1)
    return Status::field_error("al.blocks", source.name + " has " + std::to_string(valid.size()) + " places where one tensor crosses, so at most " +
                         std::to_string(valid.size() + 1) + " blocks");
  // Prefix multiply-adds (+1 a layer, so layers without products still count).
  std::vector<double> prefix(source.layers.size() + 1, 0);
  for (size_t i = 0; i < source.layers.size(); ++i)
    prefix[i + 1] = prefix[i] + static_cast<double>(source.layers[i].macs) + 1;
  std::vector<int> cuts;
  size_t next = 0;
  for (int b = 1; b < blocks; ++b) {
    const double goal = prefix.back() * b / blocks;
    // The valid cut nearest the goal that leaves room for the blocks after it.
    size_t best = next;
    const size_t last_allowed = valid.size() - static_cast<size_t>(blocks - 1 - b) - 1;
    for (size_t j = next; j <= last_allowed; ++j)
      if (std::abs(prefix[valid[j]] - goal) < std::abs(prefix[valid[best]] - goal)) best = j;
    cuts.push_back(valid[best]);
    next = best + 1;
  }
  return cuts;
}

Result<LayerGraph> make_al_form(const LayerGraph& source, const std::vector<int>& block_starts, int64_t target_width) {
  const int n = static_cast<int>(source.layers.size());
  if (source.is_al_form()) return Status::field_error("model", "is already in AL form");
  if (source.num_classes <= 0 || n == 0) return Status::field_error("model", "has no classes: AL needs a label to encode");
  if (!source.label_shape().empty())
    return Status::field_error("model", std::string("outputs one label per ") +
                                            (source.per_token_labels() ? "token" : "pixel") +
                                            "; AL needs one label per sample (a classifier)");
  if (target_width < 1 || target_width > 65536)
    return Status::field_error("al.target_width", "must be between 1 and 65536, got " + std::to_string(target_width));
  const std::vector<int> valid = valid_al_cuts(source);
  for (size_t k = 0; k < block_starts.size(); ++k) {
    const int c = block_starts[k];
    const int prev = k ? block_starts[k - 1] : 0;
    if (c <= prev || c >= n)
      return cut_error(k, "block " + std::to_string(k + 1) + " would be empty (cuts must be ascending layers after the first)");
    if (!std::binary_search(valid.begin(), valid.end(), c))
      return cut_error(k, "more than one tensor crosses the cut before '" + source.layers[c].name +
                              "' (a block may pass on only its last layer's output)");
  }
  std::set<std::string> names;
  for (const Layer& l : source.layers) names.insert(l.name);

  LayerGraph al;
  al.name = source.name + ".al";
  al.input_shape = source.input_shape;
  al.input_kind = source.input_kind;
  std::vector<int> to_al(n, -1);
  const int blocks = static_cast<int>(block_starts.size()) + 1;
  std::string taken;  // an added layer's name the source already uses
  auto add = [&](const std::string& name, const std::string& op, int input, int64_t out = 0) {
    Layer l = added_layer(name, op, input);
    l.attrs.out = out;
    if (!names.insert(name).second && taken.empty()) taken = name;
    al.layers.push_back(std::move(l));
    return static_cast<int>(al.layers.size()) - 1;
  };
  int previous_target = -1;
  int64_t previous_width = source.num_classes;
  for (int b = 0; b < blocks; ++b) {
    AlBlock blk;
    blk.first = static_cast<int>(al.layers.size());
    const std::string tag = "al" + std::to_string(b + 1) + ".";
    if (b == 0) previous_target = add("al.labels", "al_labels", -1, source.num_classes);
    const int begin = b == 0 ? 0 : block_starts[b - 1];
    const int end = b + 1 < blocks ? block_starts[b] : n;
    for (int i = begin; i < end; ++i) append_renumbered(al, source.layers[i], i, to_al);
    blk.output = to_al[end - 1];
    const Shape& s = source.layers[end - 1].output_shape;
    int from = blk.output;
    if (s.size() == 3) {
      const int pool = add(tag + "bridge_pool", "adaptive_avgpool2d", from);
      al.layers[pool].attrs.kernel[0] = al.layers[pool].attrs.kernel[1] = 1;  // an adaptive pool's kernel is its output size
      from = add(tag + "bridge_flatten", "flatten", pool);
    } else if (s.size() == 2) {
      from = add(tag + "bridge_mean", "mean_tokens", from);  // every token (an LSTM's first sees one input)
    }
    blk.bridge = add(tag + "bridge_act", "sigmoid", add(tag + "bridge", "linear", from, target_width));
    blk.target = add(tag + "target_act", "sigmoid", add(tag + "target", "linear", previous_target, target_width));
    blk.decoder_input = add(tag + "decoder", "linear", blk.target, previous_width);
    blk.decoder = add(tag + "decoder_act", "sigmoid", blk.decoder_input);
    blk.target_input = previous_target;
    blk.last = blk.decoder;
    al.al_blocks.push_back(blk);
    previous_target = blk.target;
    previous_width = target_width;
  }
  if (!taken.empty()) return Status::field_error("model", "the added layer name '" + taken + "' is taken");
  if (Status st = infer_shapes(al); !st) return st.at_field("model");
  return al;
}

std::vector<int> al_cuts_of(const LayerGraph& al) {
  std::vector<int> cuts;
  int source_index = 0;
  for (size_t b = 0; b < al.al_blocks.size(); ++b) {
    if (b > 0) cuts.push_back(source_index);
    source_index += al.al_blocks[b].output - first_original(al, b) + 1;
  }
  return cuts;
}

int al_block_of(const LayerGraph& al, int layer) {
  for (size_t b = 0; b < al.al_blocks.size(); ++b)
    if (layer <= al.al_blocks[b].last) return static_cast<int>(b);
  return -1;
}

LayerGraph al_source(const LayerGraph& al) {
  LayerGraph src;
  src.name = al.name.size() > 3 && al.name.compare(al.name.size() - 3, 3, ".al") == 0 ? al.name.substr(0, al.name.size() - 3)
                                                                                      : al.name;
  src.input_shape = al.input_shape;
  src.input_kind = al.input_kind;
  std::vector<int> to_source(al.layers.size(), -1);
  for (size_t b = 0; b < al.al_blocks.size(); ++b)
    for (int i = first_original(al, b); i <= al.al_blocks[b].output; ++i) append_renumbered(src, al.layers[i], i, to_source);
  (void)infer_shapes(src);  // the same layers as a valid AL form's source: cannot fail
  return src;
}

int64_t al_target_width(const LayerGraph& al) {
  return al.is_al_form() ? al.layers[al.al_blocks[0].target].output_shape.at(0) : 0;
}

nlohmann::json al_form_to_json(const LayerGraph& al) {
  return {{"cuts", al_cuts_of(al)}, {"target_width", al_target_width(al)}};
}

Result<LayerGraph> al_form_from_json(const LayerGraph& source, const nlohmann::json& j) {
  return make_al_form(source, j.at("cuts").get<std::vector<int>>(), j.at("target_width").get<int64_t>());
}

LayerLibrary al_form_library(const LayerLibrary& source, const LayerGraph& al_form) {
  double macs = 0, forward_ms = 0;
  std::map<std::string, const LayerRow*> by_name;
  for (const LayerRow& r : source.rows) {
    by_name[r.name] = &r;
    macs += static_cast<double>(r.macs);
    forward_ms += r.forward_ms;
  }
  const double threads = std::max(1, source.threads);
  const double gmacs_per_thread =
      macs > 0 && forward_ms > 0 ? macs * static_cast<double>(source.batch_size) / (forward_ms * 1e6 * threads) : 20.0;
  LayerLibrary lib = estimated_library(al_form, source.batch_size, gmacs_per_thread, source.threads);
  lib.model = al_form.name;
  lib.device_kind = source.device_kind;
  lib.measured = source.measured;
  for (LayerRow& r : lib.rows) {
    auto it = by_name.find(r.name);
    if (it == by_name.end() || it->second->op != r.op) continue;
    r.forward_ms = it->second->forward_ms;
    r.backward_ms = it->second->backward_ms;
  }
  lib.whole_step_ms = lib.total_forward_ms() + lib.total_backward_ms();
  lib.sum_to_step_ratio = 1.0;
  return lib;
}

}  // namespace tapp
