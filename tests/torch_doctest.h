// tests/torch_doctest.h — doctest for test files that also use LibTorch.
//
// LibTorch pulls in glog, whose CHECK* macros collide with doctest's. Include
// this header after every LibTorch header and in place of <doctest/doctest.h>.
#pragma once

#include <torch/torch.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>
