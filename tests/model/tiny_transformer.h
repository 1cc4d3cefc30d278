// tests/model/tiny_transformer.h — the options of a zoo transformer at test size.
#pragma once

#include <cstdint>

#include "model/zoo.h"

namespace tapp::test {

// `tokens` (or the image side for vit_b_16), a vocabulary (0 = the model's),
// `layers` blocks of `width` with `heads` heads, `classes` (0 = the model's).
inline ModelOptions tiny_transformer(int64_t tokens, int64_t vocabulary, int64_t layers, int64_t width, int64_t heads,
                                     int64_t classes = 0) {
  ModelOptions o;
  o.input_size = tokens;
  o.vocabulary = vocabulary;
  o.num_classes = classes;
  o.layers = layers;
  o.width = width;
  o.heads = heads;
  return o;
}

}  // namespace tapp::test
