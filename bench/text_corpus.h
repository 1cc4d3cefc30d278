// bench/text_corpus.h — a small generated text-classification set (issue 20, item 4): no text
// corpus ships in a Debian package this project may use, so this generator makes one. Not a test.
//
// Sentences of `tokens` ids over a vocabulary of 1,000: id 0 is a class token at position 0
// (what a Transformer classifier reads), id 1 is "not", ids 2..41 are 40 cue words (10 per
// class, 4 classes), ids 42..999 filler words drawn by a Zipf law (s = 1.1). Each sentence has
// 3 to 5 cue words at random places, each from the sentence's intended class with probability
// 0.6, else from any class; a cue is negated ("not" just before it) with probability 0.25,
// which turns its vote to the opposite class (k + 2 mod 4). The label is the class with the
// most votes; sentences whose vote ties are drawn again. So the label follows from the words
// exactly, but only a model that reads order (the negation) and counts gets all of it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace tapp::bench {

struct TextSet {
  int64_t tokens = 32, vocabulary = 1000, classes = 4;
  std::vector<int64_t> ids;     // samples x tokens
  std::vector<int64_t> labels;  // samples
};

inline TextSet generate_text_set(int64_t samples, int64_t tokens, uint64_t seed) {
  constexpr int64_t kClasses = 4, kCuesPerClass = 10, kFirstCue = 2, kFirstFiller = 42, kVocabulary = 1000;
  TextSet set;
  set.tokens = tokens;
  std::mt19937_64 rng(seed);
  std::vector<double> zipf;
  for (int64_t w = kFirstFiller; w < kVocabulary; ++w) zipf.push_back(1.0 / std::pow(w - kFirstFiller + 1, 1.1));
  std::discrete_distribution<int64_t> filler(zipf.begin(), zipf.end());
  std::uniform_real_distribution<double> unit(0, 1);
  std::uniform_int_distribution<int64_t> any_class(0, kClasses - 1), any_cue(0, kCuesPerClass - 1), cue_count(3, 5);
  std::vector<int64_t> slots;
  for (int64_t p = 2; p < tokens; ++p) slots.push_back(p);  // a cue at p may have "not" at p - 1 >= 1
  while (static_cast<int64_t>(set.labels.size()) < samples) {
    std::vector<int64_t> s(tokens);
    s[0] = 0;
    for (int64_t p = 1; p < tokens; ++p) s[p] = kFirstFiller + filler(rng);
    const int64_t intended = any_class(rng);
    std::shuffle(slots.begin(), slots.end(), rng);
    std::vector<int64_t> votes(kClasses, 0), places;
    const int64_t cues = std::min<int64_t>(cue_count(rng), static_cast<int64_t>(slots.size()));
    for (int64_t k = 0; k < cues; ++k) {
      const int64_t p = slots[k];
      // Keep cues apart so that a "not" never overwrites another cue.
      if (std::any_of(places.begin(), places.end(), [&](int64_t q) { return std::abs(q - p) < 2; })) continue;
      places.push_back(p);
      const int64_t cls = unit(rng) < 0.6 ? intended : any_class(rng);
      s[p] = kFirstCue + cls * kCuesPerClass + any_cue(rng);
      const bool negated = unit(rng) < 0.25;
      if (negated) s[p - 1] = 1;
      ++votes[negated ? (cls + 2) % kClasses : cls];
    }
    const int64_t top = *std::max_element(votes.begin(), votes.end());
    if (std::count(votes.begin(), votes.end(), top) != 1) continue;
    set.labels.push_back(std::max_element(votes.begin(), votes.end()) - votes.begin());
    set.ids.insert(set.ids.end(), s.begin(), s.end());
  }
  return set;
}

}  // namespace tapp::bench
