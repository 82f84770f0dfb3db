// Tokenizers against golden ids from the reference (Hugging Face tokenizers on the same GGUF,
// testdata/make_tokenizer_golden.py), decode round trips, special ids, and refused vocabularies.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/util/error.h"
#include "core/format/gguf-writer.h"
#include "core/format/gguf.h"
#include "core/model/tokenizer.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"

namespace {

using ragkv::GgufFile;
using ragkv::Tokenizer;
using ragkv::TokenId;

std::string ids_str(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

struct Loaded {
  std::unique_ptr<GgufFile> gguf;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& path) {
  INFO("model file: " << path << " (fetched by `make setup`)");
  REQUIRE(std::filesystem::exists(path));
  Loaded l;
  l.gguf = std::make_unique<GgufFile>(path);
  l.tok = Tokenizer::from_gguf(*l.gguf);
  return l;
}

nlohmann::json golden(const std::string& name) {
  std::ifstream f(ragkv::test::testdata(name));
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

// Every golden case encodes to exactly the reference ids; those the reference decodes back to
// their text (no special tokens, every byte spelled by the vocabulary) decode back here too.
void check_golden(const Tokenizer& tok, const nlohmann::json& g) {
  REQUIRE(g["cases"].size() >= 30);
  int n_roundtrip = 0;
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"];
    const bool parse_special = c.value("parse_special", true);
    const auto want = c["ids"].get<std::vector<TokenId>>();
    const auto got = tok.encode(text, parse_special);
    INFO("text: " << nlohmann::json(text).dump() << " parse_special=" << parse_special);
    CHECK_MESSAGE(got == want, "got " << ids_str(got) << "\nwant " << ids_str(want));
    if (c.value("roundtrip", false)) {
      CHECK(tok.decode(got) == text);
      ++n_roundtrip;
    }
  }
  CHECK(n_roundtrip >= 30);
}

// stem.gguf in the test's own directory.
std::filesystem::path temp_gguf(const ragkv::test::TempDir& dir, const std::string& stem) {
  return dir.path / (stem + ".gguf");
}

// A tiny byte-level vocabulary: the 256 byte symbols, merges t+h, th+e, Ġ+t, then specials.
ragkv::GgufWriter tiny_bpe_writer(const std::string& pre) {
  std::vector<std::string> tokens;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const int cp = printable ? b : next++;
    tokens.push_back(cp < 0x80 ? std::string(1, char(cp))
                               : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))});
  }
  const std::vector<std::string> merges = {"t h", "th e", "Ġ t"};
  for (const char* t : {"th", "the", "Ġt"}) tokens.push_back(t);
  std::vector<int32_t> types(tokens.size(), 1);
  for (const char* sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(sp);
    types.push_back(3);
  }
  ragkv::GgufWriter w;
  w.set("general.architecture", "llama");
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", pre);
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(tokens.size() - 3));
  w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(tokens.size() - 1));
  return w;
}

}  // namespace

TEST_CASE("tokenizer: SmolLM2 byte-level BPE matches the reference ids") {
  const auto l = load(ragkv::test::smollm_path());
  const auto g = golden("tokenizer_golden_smollm2.json");
  CHECK(g["model"] == std::filesystem::path(ragkv::test::smollm_path()).filename().string());
  check_golden(*l.tok, g);
}

TEST_CASE("tokenizer: Gemma 3 SentencePiece matches the reference ids") {
  const auto l = load(ragkv::test::gemma_path());
  const auto g = golden("tokenizer_golden_gemma3.json");
  CHECK(g["model"] == std::filesystem::path(ragkv::test::gemma_path()).filename().string());
  check_golden(*l.tok, g);
}

TEST_CASE("tokenizer: special ids of SmolLM2 and Gemma 3") {
  {
    const auto l = load(ragkv::test::smollm_path());
    const Tokenizer& t = *l.tok;
    CHECK(t.vocab_size() == 49152);
    CHECK(t.bos_id() == 1);
    CHECK(t.eos_id() == 2);
    CHECK_FALSE(t.add_bos());
    CHECK(t.token_text(2) == "<|im_end|>");
    CHECK(t.find_token("<|im_start|>") == 1);
    CHECK(t.find_token("no such token") == -1);
    CHECK(t.is_eog(2));   // eos = <|im_end|>
    CHECK(t.is_eog(0));   // <|endoftext|>
    CHECK_FALSE(t.is_eog(1));
    CHECK(t.token_to_piece(1) == "");       // control
    CHECK(t.token_to_piece(216) == " ");    // "Ġ"
    CHECK(t.token_text(-1).empty());
    CHECK(t.token_text(t.vocab_size()).empty());
  }
  {
    const auto l = load(ragkv::test::gemma_path());
    const Tokenizer& t = *l.tok;
    CHECK(t.vocab_size() == 262144);
    CHECK(t.bos_id() == 2);
    CHECK(t.eos_id() == 1);
    CHECK(t.add_bos());
    CHECK(t.find_token("<end_of_turn>") == 106);
    CHECK(t.is_eog(1));
    CHECK(t.is_eog(106));
    CHECK_FALSE(t.is_eog(105));
    CHECK(t.token_to_piece(105) == "");   // <start_of_turn>, control
    CHECK(t.token_to_piece(248) == "\n");  // <0x0A>
    CHECK(t.token_to_piece(107) == "\n");  // user-defined "\n"
    CHECK(t.token_to_piece(t.find_token("▁the")) == " the");
  }
}

TEST_CASE("tokenizer: invalid UTF-8 does not break either tokenizer") {
  const std::string bad = "ok \xff\xfe bytes \xc3 cut \xe2\x82 end\x80";
  for (const auto& path : {ragkv::test::smollm_path(), ragkv::test::gemma_path()}) {
    const auto l = load(path);
    INFO(path);
    std::vector<TokenId> ids;
    CHECK_NOTHROW(ids = l.tok->encode(bad, true));
    CHECK_FALSE(ids.empty());
    for (TokenId id : ids) CHECK((id >= 0 && id < l.tok->vocab_size()));
    const std::string back = l.tok->decode(ids);
    CHECK(back.find("ok ") == 0);
    CHECK(back.find(" end") != std::string::npos);
  }
}

TEST_CASE("tokenizer: concurrent encodes agree") {
  const auto l = load(ragkv::test::smollm_path());
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Sentence number " + std::to_string(i) + " says hello, world!\n";
  const auto want = l.tok->encode(text, true);
  std::vector<std::vector<TokenId>> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) threads.emplace_back([&, i] { got[i] = l.tok->encode(text, true); });
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == want);
}

TEST_CASE("tokenizer: tiny byte-level BPE merges, specials and pre-tokenizer names") {
  const ragkv::test::TempDir tmp("tokenizer");
  const auto path = temp_gguf(tmp, "tiny-bpe");
  tiny_bpe_writer("gpt2").write(path.string());
  {
    GgufFile gguf(path.string());
    const auto tok = Tokenizer::from_gguf(gguf);
    const TokenId th = tok->find_token("th"), the = tok->find_token("the"), gt = tok->find_token("Ġt");
    const TokenId im_end = tok->find_token("<|im_end|>");
    const TokenId sp = tok->find_token("Ġ"), x = tok->find_token("x"), h = tok->find_token("h");
    REQUIRE(th >= 0);
    // Lowest rank first: in " th", t+h (rank 0) beats Ġ+t (rank 2), leaving "Ġ", "th".
    CHECK(tok->encode("the", true) == std::vector<TokenId>{the});
    CHECK(tok->encode(" th", true) == std::vector<TokenId>{sp, th});
    CHECK(tok->encode(" tx", true) == std::vector<TokenId>{gt, x});
    CHECK(tok->encode("h<|im_end|>", true) == std::vector<TokenId>{h, im_end});
    CHECK(tok->encode("h<|im_end|>", false).size() == 11);  // one id per byte: no merge applies
    CHECK(tok->bos_id() == tok->find_token("<|endoftext|>"));
    CHECK(tok->eos_id() == im_end);
    CHECK(tok->is_eog(im_end));
    CHECK(tok->is_eog(tok->find_token("<|endoftext|>")));
    CHECK_FALSE(tok->add_bos());
    CHECK(tok->decode(tok->encode("the other theme", true)) == "the other theme");
  }
  std::filesystem::remove(path);

  tiny_bpe_writer("no-such-pre").write(path.string());
  {
    GgufFile gguf(path.string());
    try {
      Tokenizer::from_gguf(gguf);
      FAIL("an unknown tokenizer.ggml.pre was accepted");
    } catch (const ragkv::Error& e) {
      CHECK(std::string(e.what()).find("'no-such-pre'") != std::string::npos);
    }
  }
  std::filesystem::remove(path);
}

TEST_CASE("tokenizer: an unknown tokenizer.ggml.model is refused, naming it") {
  const ragkv::test::TempDir tmp("tokenizer");
  const auto path = temp_gguf(tmp, "unknown-tokenizer");
  ragkv::GgufWriter w;
  w.set("general.architecture", "llama");
  w.set("tokenizer.ggml.model", "rwkv-world");
  w.set("tokenizer.ggml.tokens", ragkv::GgufWriter::StringArray{"a", "b"});
  w.write(path.string());
  {
    GgufFile gguf(path.string());
    try {
      Tokenizer::from_gguf(gguf);
      FAIL("an unknown tokenizer model was accepted");
    } catch (const ragkv::Error& e) {
      CHECK(std::string(e.what()).find("'rwkv-world'") != std::string::npos);
    }
  }
  std::filesystem::remove(path);
}

// Fuzz regression (fuzz/fuzz-gguf.cpp, input fuzz/corpus/gguf/crash-0a89dbae…): a SentencePiece
// vocabulary with one piece that is not valid UTF-8 ("\xBD" + "0xB1>", a damaged byte token) was
// accepted, then sentencepiece failed on ordinary text ("all normalized characters are not
// consumed") with an error naming no file. Such a piece now never matches (a placeholder, as for
// empty and repeated pieces) and the text encodes; encode errors name the model file.
TEST_CASE("tokenizer: a SentencePiece piece of invalid UTF-8 is left out, and text still encodes (fuzz regression)") {
  const ragkv::test::TempDir tmp("tokenizer");
  const auto path = temp_gguf(tmp, "spm-bad-piece");
  ragkv::GgufWriter w;
  w.set("general.architecture", "llama");
  w.set("tokenizer.ggml.model", "llama");
  ragkv::GgufWriter::StringArray tokens = {"<unk>", "<s>", "</s>"};
  ragkv::GgufWriter::IntArray types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(b == 0xB1 ? std::string("\xBD" "0xB1>") : fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  for (const char* p : {"\xE2\x96\x81", "\xE2\x96\x81hello", "h", "e", "l", "o", "he", "ll", "llo"}) {
    tokens.push_back(p);
    types.push_back(1);
  }
  ragkv::GgufWriter::FloatArray scores;
  for (size_t i = 0; i < tokens.size(); ++i) scores.push_back(-float(i));
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.scores", scores);
  w.set_u32("tokenizer.ggml.unknown_token_id", 0);
  w.write(path.string());
  GgufFile gguf(path.string());
  const auto tok = Tokenizer::from_gguf(gguf);
  const std::vector<TokenId> ids = tok->encode("Hello world, <|im_start|> 12345 \xF0\x9F\x98\x80!", true);
  CHECK(!ids.empty());
  for (const TokenId id : ids) CHECK((id >= 0 && id < tok->vocab_size()));
}
