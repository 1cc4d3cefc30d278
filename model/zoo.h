// model/zoo.h — built-in models as layer graphs (no LibTorch).
//
// Owns the model zoo: alexnet, vgg16, resnet50, inception_v3 (torchvision's
// layer structure and parameter counts; inception without the aux head),
// transformers: gpt2 and gpt2_medium (GPT-2's shapes, tied output embedding),
// bert_base (BertModel with its pooler), vit_b_16 (torchvision's), and
// small models that train in seconds: alexnet_cifar, vgg5 (PipeLearn), mlp,
// and a small model with branches; text classifiers over token ids (the
// Pipeline AL seed's settings): text_lstm (4 LSTM layers) and text_transformer
// (4 encoder blocks), width 64, 32 tokens, vocabulary 1000, 4 classes. `load_layer_graph` resolves a zoo name or a JSON
// layer-graph file to an inferred LayerGraph (TorchScript files: profiler/model_loader.h).
// Thread safety: stateless functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/layer_graph.h"

namespace tapp {

// How a TorchScript file becomes a layer graph (profiler/torchscript_import.h):
// ops maps each aten op onto a LayerGraph op (fine layers, weights from the
// seed, few ops); layers runs the module's own code per layer (any op LibTorch
// runs, weights from the file); automatic tries ops and falls back to layers.
enum class ScriptImport { automatic, ops, layers };
// "auto", "ops" or "layers" (tapp-cli --torchscript); other names are an error listing these.
Result<ScriptImport> script_import_from_name(const std::string& name);

// 0 everywhere means the model's default.
struct ModelOptions {
  // Image side (224, 299, 32 for CIFAR models), or a token model's sequence
  // length (gpt2: 1024, bert_base: 512).
  int64_t input_size = 0;
  // 1000, or 10 for CIFAR models; bert_base: a classifier on the pooler when
  // set (BertModel alone ends at the pooler); gpt2 predicts its vocabulary.
  int64_t num_classes = 0;
  // Transformers and text classifiers only: vocabulary (gpt2 50257, bert_base 30522), blocks,
  // width (d_model) and attention heads, e.g. for tiny versions in tests and the random
  // transformers a policy trains on (placer/training_set.h).
  int64_t vocabulary = 0;
  int64_t layers = 0;
  int64_t width = 0;
  int64_t heads = 0;
  ScriptImport torchscript = ScriptImport::automatic;  // TorchScript files only
};

std::vector<std::string> zoo_names();
// A zoo model with shapes inferred. Unknown names list the known ones.
Result<LayerGraph> zoo_model(const std::string& name, const ModelOptions& options = {});

// A zoo name or a path to a JSON layer graph (*.json); a *.pt path is refused
// here (it needs LibTorch: profiler/model_loader.h's load_model takes all three).
Result<LayerGraph> load_layer_graph(const std::string& name_or_path, const ModelOptions& options = {});
bool is_torchscript_path(const std::string& name_or_path);  // *.pt or *.pth

}  // namespace tapp
