// generate, tokenize and make-test-model: the model on its own, without retrieval or caches.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmd/command-family.h"
#include "cmd/flag-table.h"
#include "core/format/gguf.h"
#include "core/model/chat-template.h"
#include "core/model/generate.h"
#include "core/model/model.h"
#include "core/model/random-model.h"
#include "core/model/tokenizer.h"
#include "core/util/error.h"

namespace ragkv::cli {

namespace {

class ModelCommands : public CommandFamily {
 public:
  explicit ModelCommands(CliOptions& o) : o_(o) {}

  void add_to(CLI::App& app) override {
    gen_ = app.add_subcommand("generate", "Complete a prompt (greedy unless --temperature is above 0)");
    add_flags(gen_, kGenerate, o_);
    tok_ = app.add_subcommand("tokenize", "Print the token ids of a text, on one line");
    add_flags(tok_, kTokenize, o_);
    mtm_ = app.add_subcommand("make-test-model", "Write a GGUF with random weights of given shapes (tests, benchmarks)");
    add_flags(mtm_, kMakeTestModel, o_);
  }

  bool selected() const override { return *gen_ || *tok_ || *mtm_; }

  int run() override {
    if (*gen_) run_generate();
    if (*tok_) run_tokenize();
    if (*mtm_) run_make_test_model();
    return 0;
  }

 private:
  void run_generate() {
    auto backend = o_.dev.make_backend();
    Model model(o_.model, *backend);
    std::string text = o_.prompt;
    if (o_.chat) {
      const auto tpl = ChatTemplate::detect(model.gguf());
      if (tpl.name == "none") fail("{}: the model has no chat template ragkv knows; drop --chat", o_.model);
      text = tpl.wrap(o_.prompt);
    }
    const auto ids = tokenize_prompt(model.tokenizer(), text);
    GenerateOptions opt = o_.sampling;
    opt.seed = o_.seed.value_or(0);
    opt.max_tokens = o_.defaults.max_tokens;
    std::function<void(const std::string&)> stream;
    if (!o_.json)
      stream = [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      };
    const auto r = generate_text(model, ids, opt, stream);
    if (o_.json) {
      const nlohmann::json out = {{"text", r.text}, {"prompt_tokens", r.prompt_ids.size()}, {"output_ids", r.output_ids},
                                  {"prefill_ms", r.prefill_ms}, {"decode_ms", r.decode_ms}};
      std::cout << out.dump() << "\n";
    } else {
      std::cout << "\n";
      std::fprintf(stderr, "ragkv: %zu prompt tokens in %.1f ms (%.1f tok/s), %zu new tokens in %.1f ms\n",
                   r.prompt_ids.size(), r.prefill_ms, r.prompt_ids.size() / (r.prefill_ms / 1000.0),
                   r.output_ids.size(), r.decode_ms);
    }
  }

  void run_tokenize() {
    GgufFile gguf(o_.model);
    auto tok = Tokenizer::from_gguf(gguf);
    std::vector<int32_t> ids;
    if (o_.bos && tok->bos_id() >= 0) ids.push_back(tok->bos_id());
    const auto body = tok->encode(o_.text, !o_.no_special);
    ids.insert(ids.end(), body.begin(), body.end());
    std::cout << fmt::format("{}", fmt::join(ids, " ")) << "\n";
  }

  void run_make_test_model() {
    RandomModelSpec spec = o_.spec;
    spec.q4_k_m = o_.weight_type == "q4_k_m";
    for (const auto& [name, type] : test_model_weight_types())
      if (name == o_.weight_type) spec.weight_type = type;
    spec.seed = o_.seed.value_or(spec.seed);
    spec.threads = o_.dev.threads > 0 ? o_.dev.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    spec.progress = true;
    write_random_model(spec, o_.out);
    std::fprintf(stderr, "ragkv: wrote %s\n", o_.out.c_str());
  }

  CliOptions& o_;
  CLI::App *gen_ = nullptr, *tok_ = nullptr, *mtm_ = nullptr;
};

}  // namespace

std::unique_ptr<CommandFamily> model_commands(CliOptions& o) { return std::make_unique<ModelCommands>(o); }

}  // namespace ragkv::cli
