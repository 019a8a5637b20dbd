// Token data for sequence models: a real text file as byte- or character-level tokens, or
// synthetic ids, cut into sequences for the next-token (GPT) or masked-LM (BERT)
// objective. The result is a Dataset whose "images" are int64 ids [N, T] and whose labels
// are [N, T] (kIgnoreIndex where a position is not scored).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "frontends/data/dataset.hpp"

namespace mosaic {

enum class Objective { kNextToken, kMaskedLm };

/// "next-token" or "masked-lm".
Expected<Objective> parse_objective(const std::string& name);

/// A stream of token ids and the vocabulary they come from.
struct TokenStream {
  std::string name;
  std::vector<int64_t> ids;
  int64_t vocab = 0;
};

/// A text file's bytes as ids 0..255 (vocabulary 256), or with `characters` its UTF-8
/// characters numbered in order of first appearance (vocabulary: the distinct ones). An
/// empty file, one that cannot be read, or (characters) one that is not UTF-8 is an error
/// naming the file and, for UTF-8, the byte offset.
Expected<TokenStream> load_text_tokens(const std::string& path, bool characters);

/// What the model asks of token data: its sequence length and vocabulary (the embedding's
/// rows; masked-LM's [MASK] id is the data's vocabulary size, so the model needs one more).
struct TokenTask {
  int64_t seq = 0;
  int64_t model_vocab = 0;
  Objective objective = Objective::kNextToken;
};

/// Cuts a stream into sequences of task.seq tokens, the last tenth (at least one) held out:
///   next-token: inputs ids[s .. s+T), labels ids[s+1 .. s+T] (windows of T + 1, stride T);
///   masked-LM: inputs ids[s .. s+T) with 15% of the positions (seeded) chosen: 80% become
///              [MASK], 10% a random id, 10% stay; labels the original id there, ignored
///              elsewhere (BERT).
/// Errors: too few tokens for two sequences, a model vocabulary the data does not fit.
Expected<DataSplits> token_splits(const TokenStream& s, const TokenTask& task, uint64_t seed);

/// Whether a --data spec is token data: text:FILE, text-chars:FILE, synthetic-tokens:N,T,V,
/// synthetic-classes:N,T,V,K.
bool is_token_spec(const std::string& spec);

/// Loads token data for a model:
///   text:FILE              the file's bytes (vocabulary 256)
///   text-chars:FILE        the file's UTF-8 characters
///   synthetic-tokens:N,T,V N sequences of T + 1 ids uniform in [0, V) (seeded); T must be
///                          the model's sequence length
///   synthetic-classes:N,T,V,K  N sequences of T ids below V, each labelled with one of K
///                          classes (labels [N], for a sequence classifier's [batch, K] logits):
///                          a class-k sequence has id k at half its positions
/// The objective (next-token, masked-LM) applies to the first three; the last has its labels.
Expected<DataSplits> load_token_data(const std::string& spec, const TokenTask& task, uint64_t seed);

}  // namespace mosaic
