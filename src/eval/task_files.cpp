#include "eval/task_files.h"

#include <utf8proc.h>

#include <nlohmann/json.hpp>

#include "util/fs.h"
#include "util/json.h"
#include "util/utf8.h"

namespace keel {

// ------------------------------------------------------------ Python's str

namespace {

// Decodes the code point at s[i] (valid UTF-8 is checked before), advancing i.
char32_t next_code_point(std::string_view s, size_t& i) {
  utf8proc_int32_t cp = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  if (n <= 0) {  // not reached for valid UTF-8; a byte at a time otherwise
    ++i;
    return 0xFFFD;
  }
  i += static_cast<size_t>(n);
  return static_cast<char32_t>(cp);
}

void append_code_point(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Python's str.replace: non-overlapping, left to right.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t at = s.find(from, i);
    if (at == std::string_view::npos) break;
    out.append(s.substr(i, at - i)).append(to);
    i = at + from.size();
  }
  out.append(s.substr(std::min(i, s.size())));
  return out;
}

}  // namespace

bool python_isspace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

std::string python_rstrip(std::string_view s) {
  size_t i = 0, keep = 0;  // keep: the end of the last non-space character
  while (i < s.size()) {
    const char32_t c = next_code_point(s, i);
    if (!python_isspace(c)) keep = i;
  }
  return std::string(s.substr(0, keep));
}

std::string python_strip(std::string_view s) {
  size_t i = 0, start = s.size();
  while (i < s.size()) {
    const size_t at = i;
    if (!python_isspace(next_code_point(s, i))) {
      start = at;
      break;
    }
  }
  return python_rstrip(s.substr(start));
}

std::string python_capitalize(std::string_view s) {
  std::string out;
  size_t i = 0;
  bool first = true;
  while (i < s.size()) {
    const char32_t c = next_code_point(s, i);
    const auto mapped = first ? utf8proc_totitle(static_cast<utf8proc_int32_t>(c))
                              : utf8proc_tolower(static_cast<utf8proc_int32_t>(c));
    append_code_point(out, static_cast<char32_t>(mapped));
    first = false;
  }
  return out;
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string hellaswag_preprocess(std::string_view text) {
  std::string s = replace_all(python_strip(text), " [title]", ". ");
  std::string kept;  // re.sub("\\[.*?\\]", "", s): '.' stops at a newline
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '[') {
      const size_t end = s.find_first_of("]\n", i + 1);
      if (end != std::string::npos && s[end] == ']') {
        i = end + 1;
        continue;
      }
    }
    kept.push_back(s[i++]);
  }
  return replace_all(kept, "  ", " ");
}

// ------------------------------------------------------------ the readers

namespace {

using nlohmann::json;

struct Line {
  const std::string& file;
  int64_t number;
  const json& doc;

  [[noreturn]] void fail(const std::string& what) const {
    throw TaskFileError(file + ":" + std::to_string(number) + ": " + what);
  }
  const json& field(const json& obj, const std::string& key, const std::string& path) const {
    if (!obj.is_object() || !obj.contains(key)) fail("no \"" + path + "\" field");
    return obj.at(key);
  }
  std::string text(const json& obj, const std::string& key, const std::string& path) const {
    const json& v = field(obj, key, path);
    if (!v.is_string()) fail("\"" + path + "\" is " + std::string(v.type_name()) + ", not a string");
    return v.get<std::string>();
  }
  std::string text(const std::string& key) const { return text(doc, key, key); }
  std::vector<std::string> texts(const json& v, const std::string& path) const {
    if (!v.is_array()) fail("\"" + path + "\" is " + std::string(v.type_name()) + ", not a list");
    if (v.empty() || v.size() > kMaxTaskChoices)
      fail("\"" + path + "\" has " + std::to_string(v.size()) + " entries (1 to " + std::to_string(kMaxTaskChoices) +
           " expected)");
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) fail("\"" + path + "[" + std::to_string(i) + "]\" is not a string");
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }
  // A label given as a number or a numeric string ("2"), within [0, n).
  int64_t index(const json& v, const std::string& path, size_t n) const {
    int64_t k = -1;
    if (v.is_number_integer()) {
      k = v.get<int64_t>();
    } else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
        fail("\"" + path + "\" is \"" + s.substr(0, 40) + "\", not a choice number");
      k = std::stoll(s);
    } else {
      fail("\"" + path + "\" is " + std::string(v.type_name()) + ", not a choice number");
    }
    if (k < 0 || static_cast<size_t>(k) >= n)
      fail("\"" + path + "\" is " + std::to_string(k) + ", outside the " + std::to_string(n) + " choices");
    return k;
  }
};

// One request per choice: (context, " " + choice), lm-eval's multiple_choice.
EvalDoc choice_doc(const std::string& context, std::vector<std::string> choices, int64_t gold, int64_t line) {
  EvalDoc d;
  for (const auto& c : choices) d.requests.push_back({context, " " + c});
  d.choices = std::move(choices);
  d.gold = gold;
  d.line = line;
  return d;
}

EvalDoc hellaswag_doc(const Line& l) {
  // utils.process_docs: activity_label + ": " + ctx_a + " " + ctx_b.capitalize();
  // files without ctx_a/ctx_b (other exports) use "ctx".
  std::string ctx;
  if (l.doc.contains("ctx_a") || l.doc.contains("ctx_b"))
    ctx = l.text("ctx_a") + " " + python_capitalize(l.text("ctx_b"));
  else
    ctx = l.text("ctx");
  const std::string query = hellaswag_preprocess(l.text("activity_label") + ": " + ctx);
  std::vector<std::string> endings = l.texts(l.field(l.doc, "endings", "endings"), "endings");
  for (auto& e : endings) e = hellaswag_preprocess(e);
  if (!l.doc.contains("label") || l.doc["label"] == "")
    l.fail("no \"label\" (HellaSwag's test split publishes none: use the validation file)");
  const int64_t gold = l.index(l.doc["label"], "label", endings.size());
  return choice_doc(query, std::move(endings), gold, l.number);
}

EvalDoc arc_doc(const Line& l) {
  // AI2's release: question {stem, choices: [{text, label}]}; Hugging Face's
  // export: question (the stem), choices {text: [...], label: [...]}.
  std::string stem;
  std::vector<std::string> texts, labels;
  const json& q = l.field(l.doc, "question", "question");
  if (q.is_object()) {
    stem = l.text(q, "stem", "question.stem");
    const json& cs = l.field(q, "choices", "question.choices");
    if (!cs.is_array() || cs.empty() || cs.size() > kMaxTaskChoices)
      l.fail("\"question.choices\" is not a list of 1 to " + std::to_string(kMaxTaskChoices) + " choices");
    for (size_t i = 0; i < cs.size(); ++i) {
      const std::string at = "question.choices[" + std::to_string(i) + "]";
      texts.push_back(l.text(cs[i], "text", at + ".text"));
      labels.push_back(l.text(cs[i], "label", at + ".label"));
    }
  } else if (q.is_string()) {
    stem = q.get<std::string>();
    const json& cs = l.field(l.doc, "choices", "choices");
    texts = l.texts(l.field(cs, "text", "choices.text"), "choices.text");
    labels = l.texts(l.field(cs, "label", "choices.label"), "choices.label");
    if (labels.size() != texts.size()) l.fail("\"choices.text\" and \"choices.label\" differ in length");
  } else {
    l.fail("\"question\" is neither an object with a stem nor a string");
  }
  const std::string key = l.text("answerKey");
  int64_t gold = -1;
  for (size_t i = 0; i < labels.size() && gold < 0; ++i)
    if (labels[i] == key) gold = static_cast<int64_t>(i);
  if (gold < 0) l.fail("\"answerKey\" \"" + key.substr(0, 20) + "\" is none of the choices' labels");
  return choice_doc("Question: " + stem + "\nAnswer:", std::move(texts), gold, l.number);
}

EvalDoc piqa_doc(const Line& l, const std::vector<int64_t>& labels, size_t index) {
  std::vector<std::string> sols = {l.text("sol1"), l.text("sol2")};
  int64_t gold;
  if (l.doc.contains("label")) {
    gold = l.index(l.doc["label"], "label", 2);
  } else {
    if (index >= labels.size()) l.fail("no label: the labels file has fewer lines than this file has examples");
    gold = labels[index];
  }
  return choice_doc("Question: " + l.text("goal") + "\nAnswer:", std::move(sols), gold, l.number);
}

EvalDoc winogrande_doc(const Line& l) {
  // preprocess_winogrande.py: each option fills the blank of the sentence's
  // first part (a context each); the rest after the blank is the one continuation.
  const std::string sentence = l.text("sentence");
  const size_t blank = sentence.find('_');
  if (blank == std::string::npos) l.fail("\"sentence\" has no blank \"_\"");
  const json& a = l.field(l.doc, "answer", "answer");
  if (a == "") l.fail("no \"answer\" (Winogrande's test split publishes none: use dev.jsonl)");
  const int64_t gold = l.index(a, "answer", 3) - 1;
  if (gold < 0) l.fail("\"answer\" is 0; Winogrande's answers are \"1\" or \"2\"");
  EvalDoc d;
  const std::string target = " " + python_strip(std::string_view(sentence).substr(blank + 1));
  for (const std::string& opt : {l.text("option1"), l.text("option2")}) {
    d.choices.push_back(sentence.substr(0, blank) + opt);
    d.requests.push_back({d.choices.back(), target});
  }
  d.gold = gold;
  d.line = l.number;
  return d;
}

EvalDoc lambada_doc(const Line& l) {
  // lambada_openai.yaml: text.split(' ')[:-1] joined, then ' ' + the last word.
  const std::string text = l.text("text");
  const size_t space = text.rfind(' ');
  EvalDoc d;
  if (space == std::string::npos) d.requests.push_back({"", " " + text});
  else d.requests.push_back({text.substr(0, space), text.substr(space)});
  d.line = l.number;
  return d;
}

EvalDoc jsonl_doc(const Line& l) {
  std::vector<std::string> choices = l.texts(l.field(l.doc, "choices", "choices"), "choices");
  const int64_t gold = l.index(l.field(l.doc, "label", "label"), "label", choices.size());
  return choice_doc(l.text("context"), std::move(choices), gold, l.number);
}

// PIQA's answers come in a file of their own: valid.jsonl beside valid-labels.lst.
std::string piqa_labels_path(const std::string& path) {
  std::string stem = path;
  if (stem.size() > 6 && stem.compare(stem.size() - 6, 6, ".jsonl") == 0) stem.resize(stem.size() - 6);
  return stem + "-labels.lst";
}

std::vector<int64_t> read_piqa_labels(const std::string& path) {
  std::string text;
  try {
    text = read_small_file(path, kMaxTaskFileBytes);
  } catch (const std::exception& e) {
    throw TaskFileError(path + ": PIQA's labels file (beside its .jsonl, as published) cannot be read: " + e.what());
  }
  std::vector<int64_t> out;
  int64_t number = 0;
  for (size_t i = 0; i < text.size();) {
    size_t end = text.find('\n', i);
    if (end == std::string::npos) end = text.size();
    std::string line = python_strip(std::string_view(text).substr(i, end - i));
    ++number;
    i = end + 1;
    if (line.empty() && i >= text.size()) break;
    if (line != "0" && line != "1")
      throw TaskFileError(path + ":" + std::to_string(number) + ": \"" + line.substr(0, 20) + "\" is not 0 or 1");
    out.push_back(line == "1");
  }
  return out;
}

}  // namespace

EvalTask read_task_file(const TaskSpec& spec, int64_t limit) {
  EvalTask task;
  task.spec = spec;
  const std::string& file = spec.path;
  if (spec.kind == "winogrande") task.scoring = TaskScoring::partial;
  if (spec.kind == "lambada") task.scoring = TaskScoring::last_word;
  std::string text;
  try {
    text = read_small_file(file, kMaxTaskFileBytes);
  } catch (const std::exception& e) {
    throw TaskFileError(file + ": the " + spec.kind + " task file cannot be read: " + e.what());
  }
  if (const size_t bad = first_invalid_utf8(text); bad != std::string::npos)
    throw TaskFileError(file + ": not UTF-8 at byte offset " + std::to_string(bad));
  std::vector<int64_t> piqa_labels;
  const bool piqa_lst = spec.kind == "piqa" && text.find("\"label\"") == std::string::npos;
  if (piqa_lst) piqa_labels = read_piqa_labels(piqa_labels_path(file));
  int64_t number = 0;
  for (size_t i = 0; i < text.size();) {
    if (limit > 0 && static_cast<int64_t>(task.docs.size()) >= limit) break;
    size_t end = text.find('\n', i);
    if (end == std::string::npos) end = text.size();
    const std::string raw = text.substr(i, end - i);
    i = end + 1;
    ++number;
    if (python_strip(raw).empty()) continue;
    const std::string where = file + ":" + std::to_string(number);
    json doc;
    try {
      doc = parse_json_bounded(raw, where, kMaxTaskJsonDepth);
    } catch (const JsonError& e) {
      throw TaskFileError(e.what());
    }
    if (!doc.is_object()) throw TaskFileError(where + ": not a JSON object");
    const Line l{file, number, doc};
    if (spec.kind == "hellaswag") task.docs.push_back(hellaswag_doc(l));
    else if (spec.kind == "arc") task.docs.push_back(arc_doc(l));
    else if (spec.kind == "piqa") task.docs.push_back(piqa_doc(l, piqa_labels, task.docs.size()));
    else if (spec.kind == "winogrande") task.docs.push_back(winogrande_doc(l));
    else if (spec.kind == "lambada") task.docs.push_back(lambada_doc(l));
    else if (spec.kind == "jsonl") task.docs.push_back(jsonl_doc(l));
    else throw TaskFileError(file + ": task kind " + spec.kind + " is not read from a file");
  }
  if (task.docs.empty()) throw TaskFileError(file + ": no examples (an empty " + spec.kind + " file)");
  if (piqa_lst && limit == 0 && piqa_labels.size() != task.docs.size())
    throw TaskFileError(piqa_labels_path(file) + ": " + std::to_string(piqa_labels.size()) + " labels for " +
                        std::to_string(task.docs.size()) + " examples in " + file);
  return task;
}

}  // namespace keel
