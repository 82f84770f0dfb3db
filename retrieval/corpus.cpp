// Corpus input: text/markdown files, directories of them, and JSONL document files, validated
// into Documents; bad input fails with file and line or is skipped and reported (OnError).
#include "retrieval/corpus.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"
#include "core/util/utf8.h"

namespace ragkv {

namespace fs = std::filesystem;

namespace {

size_t line_of(std::string_view s, size_t offset) {
  return 1 + size_t(std::count(s.begin(), s.begin() + std::min(offset, s.size()), '\n'));
}

std::string lower_extension(const fs::path& p) {
  std::string e = p.extension().string();
  for (char& c : e) c = char(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

const std::vector<std::string> kDefaultTextExts{".txt", ".md"};

void strip_bom(std::string& s) {
  if (s.size() >= 3 && s.compare(0, 3, "\xEF\xBB\xBF") == 0) s.erase(0, 3);
}

// Loading state shared by every input: the policy, the result, and the ids seen so far.
class Loader {
 public:
  Loader(OnError on_error, Corpus& out) : on_error_(on_error), out_(out) {}

  void load_text_file(const fs::path& path, const std::string& id) {
    std::string text;
    if (!read(path, text)) return;
    ++out_.files_read;
    strip_bom(text);
    const std::string src = path.string();
    if (is_blank(text)) return problem(InputProblemKind::empty, src, 1, "empty document (no text)");
    if (const size_t nul = text.find('\0'); nul != std::string::npos)
      return problem(InputProblemKind::binary, src, line_of(text, nul),
                     fmt::format("binary file (NUL byte at offset {}), expected UTF-8 text", nul));
    if (const size_t bad = find_invalid_utf8(text); bad != std::string::npos)
      return problem(InputProblemKind::invalid_utf8, src, line_of(text, bad),
                     fmt::format("invalid UTF-8 (byte 0x{:02x} at offset {})", uint8_t(text[bad]), bad));
    add(Document{id, "", std::move(text), src, 0}, 1);
  }

  void load_jsonl_file(const fs::path& path) {
    std::string content;
    if (!read(path, content)) return;
    ++out_.files_read;
    const std::string src = path.string();
    size_t n_nonblank = 0;
    for_each_jsonl_line(content, [&](size_t line_no, std::string_view line) {
      ++n_nonblank;
      load_jsonl_line(src, line_no, line);
    });
    if (n_nonblank == 0) problem(InputProblemKind::empty, src, 1, "empty JSONL file (no documents)");
  }

 private:
  OnError on_error_;
  Corpus& out_;
  std::unordered_map<std::string, std::string> seen_;  // id -> "FILE:LINE" of its first document

  bool read(const fs::path& path, std::string& into) {
    try {
      into = read_file(path);
      return true;
    } catch (const Error& e) {
      problem(InputProblemKind::unreadable, path.string(), 1, e.what());
      return false;
    }
  }

  void problem(InputProblemKind kind, const std::string& src, size_t line, const std::string& what) {
    std::string msg = fmt::format("{}:{}: {}", src, line, what);
    if (on_error_ == OnError::fail) fail("{}", msg);
    out_.skipped.push_back(InputProblem{kind, src, line, std::move(msg)});
  }

  void add(Document doc, size_t line) {
    const std::string where = fmt::format("{}:{}", doc.source, line);
    auto [it, inserted] = seen_.emplace(doc.id, where);
    if (!inserted)
      return problem(InputProblemKind::duplicate_id, doc.source, line,
                     fmt::format("duplicate document id \"{}\" (first at {})", doc.id, it->second));
    out_.docs.push_back(std::move(doc));
  }

  void load_jsonl_line(const std::string& src, size_t line_no, std::string_view line) {
    if (const size_t nul = line.find('\0'); nul != std::string_view::npos)
      return problem(InputProblemKind::binary, src, line_no, "NUL byte in line (binary data?)");
    nlohmann::json j;
    try {
      j = parse_json_line(line);
    } catch (const JsonLineError& e) {
      return problem(e.kind, src, line_no, e.what);
    }
    if (!j.is_object())
      return problem(InputProblemKind::bad_json, src, line_no,
                     fmt::format("expected a JSON object {{\"id\",\"title\"?,\"text\"}}, got {}", j.type_name()));
    const auto text_it = j.find("text");
    if (text_it == j.end() || !text_it->is_string())
      return problem(InputProblemKind::missing_field, src, line_no,
                     text_it == j.end() ? "missing field \"text\"" : "field \"text\" is not a string");
    std::string id;
    const auto id_it = j.find("id");
    if (id_it != j.end() && id_it->is_string())
      id = id_it->get<std::string>();
    else if (id_it != j.end() && (id_it->is_number_integer() || id_it->is_number_unsigned()))
      id = id_it->dump();
    if (id.empty())
      return problem(
          InputProblemKind::missing_field, src, line_no,
          id_it == j.end() ? "missing field \"id\"" : "field \"id\" must be a non-empty string or an integer");
    std::string title;
    if (const auto t = j.find("title"); t != j.end() && !t->is_null()) {
      if (!t->is_string())
        return problem(InputProblemKind::missing_field, src, line_no, "field \"title\" is not a string");
      title = t->get<std::string>();
    }
    std::string text = text_it->get<std::string>();
    if (text.find('\0') != std::string::npos || title.find('\0') != std::string::npos)
      return problem(InputProblemKind::binary, src, line_no, "NUL character in \"text\" or \"title\"");
    if (is_blank(text))
      return problem(InputProblemKind::empty, src, line_no, fmt::format("document \"{}\" has empty text", id));
    add(Document{std::move(id), std::move(title), std::move(text), src, line_no}, line_no);
  }
};

std::string join_paths(const std::vector<fs::path>& inputs) {
  std::string s;
  for (const auto& p : inputs) s += (s.empty() ? "" : ", ") + p.string();
  return s;
}

}  // namespace

std::vector<std::string> text_extensions(const std::vector<std::string>& given) {
  std::vector<std::string> out;
  for (std::string e : given) {
    for (char& c : e) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (!e.empty() && e[0] != '.') e = "." + e;
    if (e.size() < 2) fail("--ext: an empty extension");
    if (e == ".jsonl") fail("--ext .jsonl: .jsonl files are always read as JSONL corpora");
    out.push_back(e);
  }
  return out;
}

Corpus load_corpus(const std::vector<fs::path>& inputs, OnError on_error, const std::vector<std::string>& text_exts) {
  const std::vector<std::string>& exts = text_exts.empty() ? kDefaultTextExts : text_exts;
  const auto is_text_ext = [&](const std::string& e) { return std::find(exts.begin(), exts.end(), e) != exts.end(); };
  const auto is_corpus_ext = [&](const std::string& e) { return is_text_ext(e) || e == ".jsonl"; };
  const std::string expected = fmt::format("{}, .jsonl or a directory", fmt::join(exts, ", "));
  Corpus corpus;
  Loader loader(on_error, corpus);
  if (inputs.empty()) fail("no corpus given (expected {})", expected);
  for (const fs::path& input : inputs) {
    std::error_code ec;
    const auto st = fs::status(input, ec);
    if (ec || !fs::exists(st)) fail("corpus path does not exist: {}", input.string());
    if (fs::is_directory(st)) {
      // (relative id, path), sorted so that the corpus order does not depend on the filesystem.
      std::vector<std::pair<std::string, fs::path>> files;
      auto it = fs::recursive_directory_iterator(input, fs::directory_options::skip_permission_denied, ec);
      if (ec) fail("{}: cannot list directory: {}", input.string(), ec.message());
      for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (ec) fail("{}: cannot list directory: {}", input.string(), ec.message());
        const fs::path& p = it->path();
        if (p.filename().string().starts_with(".")) {  // hidden files, .git and the like
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (!it->is_regular_file()) continue;
        if (is_corpus_ext(lower_extension(p))) {
          files.emplace_back(p.lexically_relative(input).generic_string(), p);
        } else {  // counted and named, never skipped silently
          ++corpus.other_files[lower_extension(p)];
          if (corpus.other_file_examples.size() < 3) corpus.other_file_examples.push_back(p.string());
        }
      }
      std::sort(files.begin(), files.end());
      for (const auto& [rel, p] : files) {
        if (is_text_ext(lower_extension(p)))
          loader.load_text_file(p, rel);
        else
          loader.load_jsonl_file(p);
      }
    } else {
      const std::string ext = lower_extension(input);
      if (!is_corpus_ext(ext))
        fail("{}: unsupported corpus file type \"{}\" (expected {}; --ext {} reads it as text)", input.string(), ext,
             expected, ext.empty() ? "EXT" : ext);
      if (is_text_ext(ext))
        loader.load_text_file(input, input.filename().generic_string());
      else
        loader.load_jsonl_file(input);
    }
  }
  if (corpus.docs.empty()) {
    std::string why;
    for (const auto& [kind, n] : corpus.skipped_by_kind())
      why += fmt::format("{}{} {}", why.empty() ? "" : ", ", n, kind);
    fail("corpus is empty: no usable document in {}{}", join_paths(inputs),
         why.empty() ? "" : fmt::format(" (skipped: {})", why));
  }
  return corpus;
}

}  // namespace ragkv
