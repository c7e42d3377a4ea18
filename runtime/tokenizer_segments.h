// Cutting a text at the special tokens it holds (runtime/tokenizer.h): what encoding and training
// both do first, so that no merge crosses into or out of a special token. Internal to the
// tokenizer's files.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::runtime::tokenizer_detail {

// The special tokens in a text, in order: next(from) is the leftmost occurrence at or after
// `from`, the longest there (`at` npos if none). Each token's next occurrence is kept, and
// searched again only once the text is cut past it: linear in the text per special token.
struct SpecialAt {
  size_t at = std::string_view::npos, length = 0, index = 0;
};
class SpecialFinder {
public:
  SpecialFinder(std::string_view text, std::span<const std::string> specials)
      : text_(text), specials_(specials), found_(specials.size(), 0), searched_(specials.size()) {}
  SpecialAt next(size_t from) {
    SpecialAt best;
    for (size_t i = 0; i < specials_.size(); ++i) {
      if (!searched_[i] || (found_[i] != std::string_view::npos && found_[i] < from)) {
        found_[i] = text_.find(specials_[i], from);
        searched_[i] = true;
      }
      const size_t k = found_[i];
      if (k < best.at ||
          (k == best.at && k != std::string_view::npos && specials_[i].size() > best.length))
        best = {k, specials_[i].size(), i};
    }
    return best;
  }

private:
  std::string_view text_;
  std::span<const std::string> specials_;
  std::vector<size_t> found_;
  std::vector<bool> searched_;
};

// Calls plain(text) for each stretch of `text` between special tokens and special(index) for each
// special token, in order (SpecialFinder's cuts). The specials' texts are not empty.
template <class Plain, class Special>
void forEachSegment(std::string_view text, std::span<const std::string> specials, Plain plain,
                    Special special) {
  SpecialFinder finder(text, specials);
  for (size_t from = 0; from < text.size();) {
    const SpecialAt next = finder.next(from);
    const size_t end = next.at == std::string_view::npos ? text.size() : next.at;
    if (end > from)
      plain(text.substr(from, end - from));
    if (next.at == std::string_view::npos)
      break;
    special(next.index);
    from = next.at + next.length;
  }
}

} // namespace kiln::runtime::tokenizer_detail
