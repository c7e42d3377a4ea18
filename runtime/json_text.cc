// Bounded, strict JSON reading (see json_text.h).
#include "runtime/json_text.h"

#include <cassert>
#include <limits>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>

namespace kiln::runtime {

namespace {

// Thrown out of the parser callback: nlohmann has no other way to stop a parse.
struct TooDeep {};
struct Duplicate {
  Error error;
};

// nlohmann's messages begin "[json.exception.parse_error.101] parse error at line 1, column 9: ";
// the byte offset we print says where already.
std::string parseReason(const std::string &what) {
  size_t at = what.find("parse error");
  size_t colon = at == std::string::npos ? at : what.find(": ", at);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

// The byte of the first '[' or '{' that opens nesting level kMaxJsonDepth + 1. Only called once
// the parser has read that far without a syntax error, so counting brackets outside strings
// suffices.
size_t tooDeepAt(std::string_view text) {
  int depth = 0;
  bool inString = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  assert(false && "the parser saw nesting that is not in the text");
  return 0;
}

// An object whose members are fewer than its keys: one was given twice. Thrown by the fast pass,
// which only counts keys; the second pass, with every object's key set, names it.
struct HasDuplicate {};

// Where the parser is: one frame per open object or array.
struct Frame {
  bool array = false;
  int64_t index = 0;                         // arrays: the element being read
  int64_t keys = 0;                          // objects: the keys so far
  const std::string *key = nullptr;          // objects, second pass: the member being read
  std::unordered_set<std::string> seen = {}; // objects, second pass: the keys so far
};

std::vector<std::string> pathOf(const std::vector<Frame> &open) {
  std::vector<std::string> path;
  for (size_t k = 0; k + 1 < open.size(); ++k)
    path.push_back(open[k].array ? std::to_string(open[k].index) : *open[k].key);
  return path;
}

std::string pathText(const std::vector<std::string> &path, const std::vector<Frame> &open) {
  std::string s;
  for (size_t k = 0; k < path.size(); ++k)
    s += open[k].array ? "[" + path[k] + "]" : (s.empty() ? "" : ".") + path[k];
  return s;
}

} // namespace

std::string jsonQuote(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

namespace {

// One parse; `named` says which duplicate key is where (the second pass: a set of keys per open
// object), else duplicates are only counted (HasDuplicate).
Expected<JsonText> parse(std::string_view text, const JsonReadOptions &o, bool naming);

} // namespace

// A second pass only for a text that fails: keeping every object's keys in a set cost a third of
// a 128k-token vocabulary's load, to find what is almost never there. (It also names a duplicate
// that comes before a syntax error, which the first pass, seeing duplicates only at an object's
// end, would pass over.)
Expected<JsonText> readJson(std::string_view text, const JsonReadOptions &o) {
  try {
    if (Expected<JsonText> fast = parse(text, o, false))
      return fast;
  } catch (const HasDuplicate &) {
  }
  return parse(text, o, true);
}

namespace {

Expected<JsonText> parse(std::string_view text, const JsonReadOptions &o, bool naming) {
  // "byte 9: header is not valid JSON", or without a name "byte 9: not valid JSON".
  const std::string is = o.what.empty() ? "" : o.what + " is ";
  const std::string named = o.what.empty() ? "" : o.what + ": ";
  std::vector<Frame> open;
  std::vector<std::string> topKeys;
  Json::parser_callback_t onEvent = [&](int depth, Json::parse_event_t event, Json &parsed) {
    using E = Json::parse_event_t;
    switch (event) {
    case E::object_start:
    case E::array_start:
      // `depth` counts the enclosing values, so the top-level value opens at 0.
      if (depth >= kMaxJsonDepth)
        throw TooDeep{};
      open.push_back(Frame{.array = event == E::array_start});
      break;
    case E::key: {
      Frame &f = open.back();
      ++f.keys;
      if (!naming) {
        if (open.size() == 1)
          topKeys.push_back(parsed.get_ref<const std::string &>());
        break;
      }
      auto [at, fresh] = f.seen.insert(parsed.get_ref<const std::string &>());
      f.key = &*at; // (a set's elements stay where they are)
      if (!fresh) {
        std::vector<std::string> path = pathOf(open);
        throw Duplicate{
            o.duplicate
                ? o.duplicate(path, *f.key)
                : makeError("{}key {} appears twice{}", named, jsonQuote(*f.key),
                            path.empty() ? " at the top level" : " in " + pathText(path, open))};
      }
      if (open.size() == 1)
        topKeys.push_back(*f.key);
      break;
    }
    case E::object_end:
      if (static_cast<int64_t>(parsed.size()) != open.back().keys)
        throw HasDuplicate{}; // (the second pass throws Duplicate before it gets here)
      [[fallthrough]];
    case E::array_end:
      open.pop_back();
      [[fallthrough]];
    case E::value:
      if (!open.empty() && open.back().array)
        ++open.back().index;
      break;
    }
    return true;
  };
  try {
    JsonText out;
    out.value = Json::parse(text.begin(), text.end(), onEvent);
    out.topKeys = std::move(topKeys);
    return out;
  } catch (const Duplicate &d) {
    return d.error;
  } catch (const TooDeep &) {
    return makeError("byte {}: {} nests deeper than {} levels", o.base + tooDeepAt(text),
                     o.what.empty() ? "JSON" : o.what, kMaxJsonDepth);
  } catch (const Json::parse_error &e) {
    // e.byte is the 1-based index of the last character read.
    const uint64_t at = o.base + (e.byte > 0 ? e.byte - 1 : 0);
    return makeError("byte {}: {}not valid JSON: {}", at, is, parseReason(e.what()));
  } catch (const Json::exception &e) {
    // A number the parser cannot hold ("number overflow parsing '1e400'"); nlohmann gives no
    // position, so the number's first appearance in the text stands for it.
    std::string what = e.what();
    if (size_t close = what.find("] "); what.starts_with("[json.exception.") && close != what.npos)
      what = what.substr(close + 2);
    size_t first = what.find('\''), last = what.rfind('\'');
    size_t at = first < last ? text.find(what.substr(first + 1, last - first - 1)) : text.npos;
    return makeError("byte {}: {}not valid JSON: {}", o.base + (at == text.npos ? 0 : at), is,
                     what);
  }
}

} // namespace

const nlohmann::json &memberOrNull(const nlohmann::json &v, std::string_view key) {
  static const nlohmann::json null;
  if (!v.is_object())
    return null;
  auto it = v.find(key);
  return it != v.end() ? *it : null;
}

std::optional<int32_t> tokenIdIn(const nlohmann::json &v) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
      v.get<int64_t>() > std::numeric_limits<int32_t>::max())
    return std::nullopt;
  return static_cast<int32_t>(v.get<int64_t>());
}

} // namespace kiln::runtime
