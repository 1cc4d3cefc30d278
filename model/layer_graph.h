// model/layer_graph.h — the model as a DAG of layers, without LibTorch.
//
// Owns `LayerGraph`: layers in topological order, each with an op, typed
// attributes and the indices of the layers it reads. `infer_shapes` fills
// every layer's per-sample output shape, parameter count, multiply-adds and
// activation bytes, so the zoo, the JSON format, the placer and the simulator
// can reason about a model without building tensors.
// Data flow: zoo / model_json / torchscript_import -> LayerGraph ->
//            infer_shapes -> profiler (times) -> LayerLibrary.
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tapp {

// Per-sample shape, batch dimension excluded: {C, H, W}, {F}, or a sequence
// {T, D} (T tokens of width D; for a model reading token ids the input is {T}).
using Shape = std::vector<int64_t>;

// What the model input holds: dense float tensors (images, features) or int64
// token ids in [0, vocabulary) read by a token_embedding layer.
enum class InputKind { dense, tokens };

// The ops a layer graph may use. Names are the JSON spelling.
//   conv2d linear relu sigmoid tanh maxpool2d avgpool2d adaptive_avgpool2d
//   flatten dropout batchnorm2d concat add identity relu6 softmax log_softmax
//   torchscript (a slice of a TorchScript module's forward: see ScriptSlice)
// Transformer ops (per-sample shapes {T, D}):
//   token_embedding      {T} ids -> {T, out}; a table of `entries` (vocabulary) x out
//   position_embedding   adds learned rows 0..T-1 of an `entries` x D table (T <= entries)
//   token_type_embedding adds row 0 of an `entries` x D table (every token is of type 0,
//                        as BertModel's default token_type_ids)
//   class_token          prepends one learned D-vector: {T, D} -> {T + 1, D} (ViT)
//   to_sequence          {C, H, W} -> {H * W, C}: a feature map as a sequence of patches
//   select_token         {T, D} -> {D}: token `index` (BERT's pooler, ViT's head)
//   mean_tokens          {T, D} -> {D}: the mean over tokens
//   lstm                 {T, D} -> {T, out}: one unidirectional LSTM layer (PyTorch's gates
//                        and parameters, `bias` as nn.LSTM's), zero initial state
//   layer_norm           over the last dimension, with weight and bias
//   self_attention       multi-head (`heads`), q/k/v and output projections with biases;
//                        `causal` masks attention to later tokens (GPT)
//   gelu                 elementwise
//   lm_head              {T, D} -> {T, V}: logits against the table of the token_embedding
//                        named by `tie` (GPT-2's tied output embedding; its parameters
//                        are counted once, at the embedding)
//   al_labels            {out}: the one-hot of the sample's label, the target path's input
//                        in a model's Associated Learning form (model/al_form.h); only
//                        make_al_form writes it (the model JSON refuses it)
// linear applies to the last dimension, so {T, F} -> {T, out}.
bool is_known_op(const std::string& op);
const std::vector<std::string>& known_ops();

// The paper's operation class of an op ("Convolution", "Relu", "Pooling",
// "Fully-Connected", "Normalization", "Dropout", "Concat", "Add", "Flatten",
// "Activation", "Identity", "Embedding", "Attention", "Recurrent", "Unknown").
std::string op_class(const std::string& op);

// Op "torchscript": the layer runs nodes [begin, end) of a TorchScript
// module's forward graph, after the submodule calls in `expand` were inlined
// (profiler/torchscript_layers.h). Its output shape, parameters and
// multiply-adds were measured by the importer (running the module once), not
// inferred here: LibTorch is needed to read the file.
struct ScriptSlice {
  std::string file;                 // absolute path of the saved module
  std::string hash;                 // 16 hex digits of the file's bytes (fnv1a64)
  std::vector<std::string> expand;  // submodule paths inlined before cutting, in order
  int64_t begin = 0, end = 0;       // node range of the expanded forward graph
  Shape output_shape;               // per sample
  int64_t params = 0;               // parameters this layer owns (each counted at its first user)
  int64_t macs = 0;                 // of its conv/linear/matmul nodes; 0 for other ops
  bool operator==(const ScriptSlice& o) const;
};

struct LayerAttrs {
  int64_t out = 0;            // conv2d: out channels; linear: out features
  int64_t kernel[2] = {1, 1};  // conv2d, pools; adaptive pool: output size
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t groups = 1;          // conv2d
  bool bias = true;            // conv2d, linear
  bool ceil_mode = false;      // pools
  double p = 0.5;              // dropout
  double eps = 1e-5;           // batchnorm2d
  int64_t dim = 1;             // concat (per-sample dims + 1, i.e. 1 = channels)
  ScriptSlice script;          // torchscript
  int64_t entries = 0;         // embedding tables: rows (vocabulary, positions, token types)
  int64_t heads = 1;           // self_attention
  bool causal = false;         // self_attention
  int64_t index = 0;           // select_token
  std::string tie;             // lm_head: the token_embedding layer whose table it reads
  // token_embedding: the table's initial N(0, init_std) (GPT-2's and BERT's 0.02;
  // PyTorch's nn.Embedding default is 1, what the text classifiers use).
  double init_std = 0.02;
  bool operator==(const LayerAttrs& o) const;
};

struct Layer {
  std::string name;
  std::string op;
  LayerAttrs attrs;
  std::vector<int> inputs;  // producer layer indices; empty = reads the model input

  // Filled by infer_shapes.
  std::vector<Shape> input_shapes;
  Shape output_shape;
  int64_t params = 0;
  // Multiply-adds per sample of the matrix products: conv2d, linear, lm_head,
  // self_attention (its four projections and the QK^T and AV products, the
  // full T x T even when causal, as the masked kernels compute it).
  int64_t macs = 0;
  // Bytes per sample that backward keeps for this layer: its output for most
  // ops; self_attention also keeps q, k, v, the per-head T x T probabilities
  // (not the scores before the softmax) and the attention output before its projection.
  int64_t saved_bytes = 0;
  // activation_bytes() as infer_shapes last computed it (-1: not yet; search
  // loops ask it for every layer of every candidate). Only infer_shapes writes
  // output_shape, and it writes this too.
  int64_t output_bytes = -1;
  int64_t activation_bytes() const;  // output, float32, per sample
  int64_t param_bytes() const { return params * 4; }
};

// One block of a model in Associated Learning form (model/al_form.h): its
// layers are the range [first, last] of the graph, its own layers f_l first,
// then its added bridge, target and decoder maps. Indices are graph layers.
struct AlBlock {
  int first = 0, last = 0;
  int output = -1;        // s_l: the block's last original layer
  int bridge = -1;        // b_l(s_l): the bridge's sigmoid
  int target = -1;        // t_l = g_l(t_{l-1}): the target map's sigmoid
  int decoder = -1;       // h_l(t_l): the decoder's sigmoid
  int decoder_input = -1; // the decoder's first layer (its linear), which reads `target`
  int target_input = -1;  // t_{l-1}: the previous block's `target`, or the al_labels layer
  bool operator==(const AlBlock& o) const;
};

struct LayerGraph {
  std::string name;
  Shape input_shape;      // per sample, e.g. {3, 224, 224}, or {T} token ids
  InputKind input_kind = InputKind::dense;
  int64_t input_vocabulary = 0;  // tokens: ids are in [0, this); set by infer_shapes
  // The classes the last layer scores: its output's width (a flat {C}, or
  // the vocabulary of a model whose output is per token, {T, V}: one label per
  // token), or its channels where it scores every pixel ({C, H, W}: one label
  // per pixel, a segmentation model).
  int64_t num_classes = 0;
  bool per_token_labels() const;  // the last layer outputs {T, V}
  // One sample's labels: {} (one class), {T} (one per token) or {H, W} (one per pixel).
  Shape label_shape() const;
  std::vector<Layer> layers;  // topological order; the last layer is the output
  // Associated Learning form (model/al_form.h): its blocks in order, which
  // cover every layer; empty for a model trained end to end. The last layer
  // is then the last block's decoder, and num_classes the label's width.
  std::vector<AlBlock> al_blocks;
  bool is_al_form() const { return !al_blocks.empty(); }

  int64_t total_params() const;
  int64_t total_macs() const;
  // consumers()[i] = indices of layers that read layer i, ascending.
  std::vector<std::vector<int>> consumers() const;
  int index_of(const std::string& layer_name) const;  // -1 if absent
};

// Checks structure (known ops, inputs that point backwards, arity) and fills
// shapes, params, macs and saved bytes. Errors name the layer: "layer 'conv3' (conv2d): ...".
Status infer_shapes(LayerGraph& graph);

std::string shape_to_string(const Shape& shape);

}  // namespace tapp
