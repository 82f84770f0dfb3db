// generate, tokenize and make-test-model: the model on its own, without retrieval or caches.
#include <fmt/format.h>

#include <cstdio>
#include <algorithm>
#include <functional>
#include <iostream>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmd/command-family.h"
#include "cmd/device-flags.h"
#include "core/format/gguf.h"
#include "core/model/chat-template.h"
#include "core/model/generate.h"
#include "core/model/model.h"
#include "core/model/random-model.h"
#include "core/model/tokenizer.h"
#include "core/util/error.h"
#include "core/util/paths.h"

namespace ragkv::cli {

namespace {

class ModelCommands : public CommandFamily {
 public:
  void add_to(CLI::App& app) override {
    gen_ = app.add_subcommand("generate", "Greedy completion of a prompt");
    gen_model_ = default_llm_path();
    gen_->add_option("--model", gen_model_, "LLM in GGUF format")->capture_default_str();
    gen_->add_option("--prompt", gen_prompt_, "Prompt text")->required();
    gen_->add_option("--max-tokens", gen_max_, "Maximum new tokens")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    gen_->add_flag("--chat", gen_chat_, "Wrap the prompt in the model's chat template (one user turn)");
    gen_->add_flag("--json", gen_json_, "Print one JSON object instead of streaming text");
    gen_dev_.add_to(gen_);

    tok_ = app.add_subcommand("tokenize", "Print the token ids of a text, on one line");
    tok_model_ = default_llm_path();
    tok_->add_option("--model", tok_model_, "LLM in GGUF format")->capture_default_str();
    tok_->add_option("--text", tok_text_, "Text to tokenize")->required();
    tok_->add_flag("--no-special", tok_no_special_, "Treat special-token texts as plain text");
    tok_->add_flag("--bos", tok_bos_, "Prepend BOS when the model adds one");

    mtm_ = app.add_subcommand("make-test-model", "Write a GGUF with random weights of given shapes (tests, benchmarks)");
    mtm_->add_option("--out", mtm_out_, "Output GGUF path")->required();
    mtm_->add_option("--arch", spec_.arch, "llama, qwen2 or gemma3")->check(CLI::IsMember({"llama", "qwen2", "gemma3"}))->capture_default_str();
    mtm_->add_option("--layers", spec_.n_layer, "Transformer layers")->check(CLI::Range(1, 1024))->capture_default_str();
    mtm_->add_option("--embd", spec_.n_embd, "Embedding width")->check(CLI::Range(1, 1 << 16))->capture_default_str();
    mtm_->add_option("--heads", spec_.n_head, "Attention heads")->check(CLI::Range(1, 1024))->capture_default_str();
    mtm_->add_option("--kv-heads", spec_.n_head_kv, "KV heads")->check(CLI::Range(1, 1024))->capture_default_str();
    mtm_->add_option("--head-dim", spec_.head_dim, "Head size (0: embd / heads)")->check(CLI::Range(0, 1024))->capture_default_str();
    mtm_->add_option("--ff", spec_.n_ff, "Feed-forward width")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    mtm_->add_option("--context", spec_.n_ctx, "Context length")->check(CLI::Range(1, 1 << 22))->capture_default_str();
    mtm_->add_option("--vocab", spec_.n_vocab, "Vocabulary size (0: the 262 byte-level tokens; more: filler tokens added)")
        ->check(CLI::Range(0, 1 << 24))->capture_default_str();
    std::vector<std::string> type_names;
    for (const auto& [name, type] : weight_types()) type_names.push_back(name);
    type_names.push_back("q4_k_m");
    mtm_->add_option("--weight-type", mtm_type_,
                     "Projection weight type; token_embd/output stay f32 for f32|f16|bf16, else take it; q4_k_m: "
                     "Q4_K with Q6_K for the head and some attn_v/ffn_down (llama.cpp's Q4_K_M rule)")
        ->check(CLI::IsMember(type_names))->capture_default_str();
    mtm_->add_flag("--separate-output", spec_.separate_output,
                   "Write an output.weight of its own (as Llama-3-8B) instead of tying the head to token_embd");
    mtm_->add_option("--threads", mtm_threads_, "Threads generating and quantising weights (0: one per core)")
        ->check(CLI::NonNegativeNumber);
    mtm_->add_option("--seed", spec_.seed, "Random seed")->capture_default_str();
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
    auto backend = gen_dev_.make_backend();
    Model model(gen_model_, *backend);
    std::string text = gen_prompt_;
    if (gen_chat_) {
      const auto tpl = ChatTemplate::detect(model.gguf());
      if (tpl.name == "none") fail("{}: the model has no chat template ragkv knows; drop --chat", gen_model_);
      text = tpl.wrap(gen_prompt_);
    }
    const auto ids = tokenize_prompt(model.tokenizer(), text);
    GenerateOptions opt;
    opt.max_tokens = gen_max_;
    std::function<void(const std::string&)> stream;
    if (!gen_json_)
      stream = [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      };
    const auto r = generate_greedy(model, ids, opt, stream);
    if (gen_json_) {
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
    GgufFile gguf(tok_model_);
    auto tok = Tokenizer::from_gguf(gguf);
    std::vector<int32_t> ids;
    if (tok_bos_ && tok->bos_id() >= 0) ids.push_back(tok->bos_id());
    const auto body = tok->encode(tok_text_, !tok_no_special_);
    ids.insert(ids.end(), body.begin(), body.end());
    std::cout << fmt::format("{}", fmt::join(ids, " ")) << "\n";
  }

  // --weight-type names (lower case, as llama.cpp's quantize tool spells them) and their types.
  static const std::vector<std::pair<std::string, GgmlType>>& weight_types() {
    static const std::vector<std::pair<std::string, GgmlType>> types = {
        {"f32", GgmlType::F32},   {"f16", GgmlType::F16},   {"bf16", GgmlType::BF16}, {"q4_0", GgmlType::Q4_0},
        {"q4_1", GgmlType::Q4_1}, {"q5_0", GgmlType::Q5_0}, {"q5_1", GgmlType::Q5_1}, {"q8_0", GgmlType::Q8_0},
        {"q4_k", GgmlType::Q4_K}, {"q5_k", GgmlType::Q5_K}, {"q6_k", GgmlType::Q6_K}};
    return types;
  }

  void run_make_test_model() {
    spec_.q4_k_m = mtm_type_ == "q4_k_m";
    for (const auto& [name, type] : weight_types())
      if (name == mtm_type_) spec_.weight_type = type;
    spec_.threads = mtm_threads_ > 0 ? mtm_threads_ : int(std::max(1u, std::thread::hardware_concurrency()));
    spec_.progress = true;
    write_random_model(spec_, mtm_out_);
    std::fprintf(stderr, "ragkv: wrote %s\n", mtm_out_.c_str());
  }

  CLI::App *gen_ = nullptr, *tok_ = nullptr, *mtm_ = nullptr;
  std::string gen_model_, gen_prompt_;
  int gen_max_ = 32;
  bool gen_chat_ = false, gen_json_ = false;
  DeviceFlags gen_dev_;
  std::string tok_model_, tok_text_;
  bool tok_no_special_ = false, tok_bos_ = false;
  RandomModelSpec spec_;
  std::string mtm_out_, mtm_type_ = "f32";
  int mtm_threads_ = 0;
};

}  // namespace

std::unique_ptr<CommandFamily> model_commands() { return std::make_unique<ModelCommands>(); }

}  // namespace ragkv::cli
