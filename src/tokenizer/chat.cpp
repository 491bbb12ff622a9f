#include "tokenizer/chat.h"

namespace ouro {

Expected<ChatTemplate> ChatTemplate::from_template_text(const std::string& jinja) {
  ChatTemplate t;
  if (!jinja.empty() && jinja.find("<|im_start|>") == std::string::npos)
    return runtime_error("unsupported chat template (Ouro renders ChatML templates with <|im_start|> turns)");
  // The SmolLM2 template holds a literal '<|im_start|>system\n...<|im_end|>' used when the first
  // message is not a system message: take that text as the default system prompt.
  const std::string open = "<|im_start|>system\n";
  const size_t p = jinja.find(open);
  if (p != std::string::npos) {
    const size_t b = p + open.size();
    const size_t e = jinja.find("<|im_end|>", b);
    if (e != std::string::npos) t.default_system_ = jinja.substr(b, e - b);
  }
  return t;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  std::string out;
  if (!default_system_.empty() && (messages.empty() || messages[0].role != "system"))
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace ouro
