#include "server/qa/token_entities.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "server/tokenizer/unicode.h"

namespace ropeserve::qa {

std::optional<Aggregation> ParseAggregation(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "none") return Aggregation::kNone;
  if (lower == "simple") return Aggregation::kSimple;
  if (lower == "first") return Aggregation::kFirst;
  if (lower == "max") return Aggregation::kMax;
  if (lower == "average") return Aggregation::kAverage;
  return std::nullopt;
}

const char* AggregationName(Aggregation a) {
  switch (a) {
    case Aggregation::kNone:
      return "none";
    case Aggregation::kSimple:
      return "simple";
    case Aggregation::kFirst:
      return "first";
    case Aggregation::kMax:
      return "max";
    case Aggregation::kAverage:
      return "average";
  }
  return "none";
}

namespace {

// numpy's argmax: the first maximum, or the first NaN.
std::size_t ArgMax(const std::vector<double>& v) {
  std::size_t best = 0;
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (std::isnan(v[k])) return k;
    if (v[k] > v[best]) best = k;
  }
  return best;
}

// numpy's nanmean: the mean of the values that are not NaN (NaN when none).
double NanMean(const std::vector<double>& v) {
  double sum = 0;
  std::size_t n = 0;
  for (double x : v)
    if (!std::isnan(x)) {
      sum += x;
      ++n;
    }
  return n ? sum / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
}

// The pipeline's softmax: exp(x - max) / sum.
std::vector<double> Softmax(const float* logits, std::size_t n) {
  double mx = -std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < n; ++k) mx = std::max<double>(mx, logits[k]);
  std::vector<double> p(n);
  double sum = 0;
  for (std::size_t k = 0; k < n; ++k) sum += p[k] = std::exp(static_cast<double>(logits[k]) - mx);
  for (double& x : p) x /= sum;
  return p;
}

// Code points [start, end) of `text` (clamped, as Python's slice), given
// tok::CodePointStarts(text).
std::string Slice(const std::string& text, const std::vector<std::size_t>& starts, std::int64_t start,
                  std::int64_t end) {
  const auto n = static_cast<std::int64_t>(starts.size()) - 1;
  start = std::clamp<std::int64_t>(start, 0, n);
  end = std::clamp<std::int64_t>(end, start, n);
  const std::size_t from = starts[static_cast<std::size_t>(start)];
  return text.substr(from, starts[static_cast<std::size_t>(end)] - from);
}

}  // namespace

StatusOr<std::vector<TokenScores>> GatherTokens(const TokenLogits& in, const tok::Tokenizer& tokenizer) {
  const tok::Encoding& enc = in.encoding;
  const std::size_t n = enc.size(), labels = in.labels.size();
  if (labels == 0 || in.logits.size() != n * labels || enc.tokens.size() != n || enc.offsets.size() != n ||
      enc.special_tokens_mask.size() != n)
    return Internal("token classification: the logits do not match the encoding");
  const std::vector<std::size_t> starts = tok::CodePointStarts(in.text);
  const std::string& prefix = tokenizer.ContinuingSubwordPrefix();
  const std::optional<TokenId> unk = tokenizer.UnkId();
  std::vector<TokenScores> out;
  for (std::size_t i = 0; i < n; ++i) {
    if (enc.special_tokens_mask[i]) continue;
    TokenScores t;
    t.word = enc.tokens[i];
    t.scores = Softmax(&in.logits[i * labels], labels);
    t.start = static_cast<std::int64_t>(enc.offsets[i].start);
    t.end = static_cast<std::int64_t>(enc.offsets[i].end);
    t.index = static_cast<std::int64_t>(i);
    const std::string ref = Slice(in.text, starts, t.start, t.end);
    if (!prefix.empty()) {
      // A word-aware tokenizer: a continuation's string carries the prefix.
      t.is_subword = tok::CountCodePoints(t.word) != tok::CountCodePoints(ref);
    } else {
      // The fallback: no space just before the token nor at its start.
      const std::string around = Slice(in.text, starts, t.start - 1, t.start + 1);
      t.is_subword = t.start > 0 && around.find(' ') == std::string::npos;
    }
    if (unk && enc.ids[i] == *unk) {
      t.word = ref;
      t.is_subword = false;
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

// A word's tokens as one entity (aggregate_word).
StatusOr<Entity> AggregateWord(const std::vector<const TokenScores*>& tokens, const std::vector<std::string>& labels,
                               const tok::Tokenizer& tokenizer, Aggregation a) {
  const std::size_t num_labels = labels.size();
  std::vector<std::string> words;
  for (const TokenScores* t : tokens) words.push_back(t->word);
  Entity e;
  RS_ASSIGN_OR_RETURN(e.word, tokenizer.DecodeTokens(std::move(words)));
  std::vector<double> scores;
  if (a == Aggregation::kFirst) {
    scores = tokens[0]->scores;
  } else if (a == Aggregation::kMax) {
    const TokenScores* best = tokens[0];
    double best_max = *std::max_element(best->scores.begin(), best->scores.end());
    for (const TokenScores* t : tokens) {
      const double m = *std::max_element(t->scores.begin(), t->scores.end());
      if (m > best_max) {
        best = t;
        best_max = m;
      }
    }
    scores = best->scores;
  } else {  // average
    scores.assign(num_labels, 0);
    for (std::size_t k = 0; k < scores.size(); ++k) {
      std::vector<double> column;
      for (const TokenScores* t : tokens) column.push_back(t->scores[k]);
      scores[k] = NanMean(column);
    }
  }
  const std::size_t best = ArgMax(scores);
  e.label = labels[best];
  e.score = scores[best];
  e.start = tokens.front()->start;
  e.end = tokens.back()->end;
  return e;
}

// "B-PER" -> ("B", "PER"), "I-PER" -> ("I", "PER"), anything else is a
// continuation of itself (get_tag).
std::pair<char, std::string> Tag(const std::string& label) {
  if (label.rfind("B-", 0) == 0) return {'B', label.substr(2)};
  if (label.rfind("I-", 0) == 0) return {'I', label.substr(2)};
  return {'I', label};
}

// Adjacent entities of one tag as one (group_sub_entities): named by the
// first's label after its last '-', scored by the mean.
StatusOr<Entity> GroupOf(const std::vector<Entity>& group, const tok::Tokenizer& tokenizer) {
  Entity e;
  const std::string& first = group.front().label;
  const std::size_t dash = first.rfind('-');
  e.label = dash == std::string::npos ? first : first.substr(dash + 1);
  std::vector<double> scores;
  std::vector<std::string> words;
  for (const Entity& x : group) {
    scores.push_back(x.score);
    words.push_back(x.word);
  }
  e.score = NanMean(scores);
  RS_ASSIGN_OR_RETURN(e.word, tokenizer.DecodeTokens(std::move(words)));
  e.start = group.front().start;
  e.end = group.back().end;
  return e;
}

}  // namespace

StatusOr<std::vector<Entity>> Aggregate(const std::vector<TokenScores>& tokens, const std::vector<std::string>& labels,
                                        const tok::Tokenizer& tokenizer, Aggregation aggregation,
                                        const std::vector<std::string>& ignore_labels) {
  for (const TokenScores& t : tokens)
    if (t.scores.size() != labels.size() || labels.empty())
      return Internal("token classification: a token's scores do not match the labels");
  std::vector<Entity> entities;
  if (aggregation == Aggregation::kNone || aggregation == Aggregation::kSimple) {
    for (const TokenScores& t : tokens) {
      const std::size_t best = ArgMax(t.scores);
      entities.push_back({labels[best], t.scores[best], t.word, t.start, t.end, t.index});
    }
  } else {
    std::vector<const TokenScores*> word;
    for (const TokenScores& t : tokens) {
      if (!word.empty() && !t.is_subword) {
        RS_ASSIGN_OR_RETURN(Entity e, AggregateWord(word, labels, tokenizer, aggregation));
        entities.push_back(std::move(e));
        word.clear();
      }
      word.push_back(&t);
    }
    if (!word.empty()) {
      RS_ASSIGN_OR_RETURN(Entity e, AggregateWord(word, labels, tokenizer, aggregation));
      entities.push_back(std::move(e));
    }
  }
  if (aggregation != Aggregation::kNone) {
    std::vector<Entity> groups, group;
    for (Entity& e : entities) {
      if (!group.empty()) {
        const auto [bi, tag] = Tag(e.label);
        if (tag != Tag(group.back().label).second || bi == 'B') {
          RS_ASSIGN_OR_RETURN(Entity g, GroupOf(group, tokenizer));
          groups.push_back(std::move(g));
          group.clear();
        }
      }
      group.push_back(std::move(e));
    }
    if (!group.empty()) {
      RS_ASSIGN_OR_RETURN(Entity g, GroupOf(group, tokenizer));
      groups.push_back(std::move(g));
    }
    entities = std::move(groups);
  }
  std::erase_if(entities, [&](const Entity& e) {
    return std::find(ignore_labels.begin(), ignore_labels.end(), e.label) != ignore_labels.end();
  });
  return entities;
}

StatusOr<std::vector<Entity>> GroupEntities(const TokenLogits& in, const tok::Tokenizer& tokenizer,
                                            Aggregation aggregation, const std::vector<std::string>& ignore_labels) {
  RS_ASSIGN_OR_RETURN(std::vector<TokenScores> tokens, GatherTokens(in, tokenizer));
  return Aggregate(tokens, in.labels, tokenizer, aggregation, ignore_labels);
}

}  // namespace ropeserve::qa
