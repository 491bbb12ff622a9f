// Chat templates. Ouro renders the ChatML family (SmolLM2, Qwen, ...) natively from the template
// found in the GGUF, taking the default system prompt from the template text itself.
#pragma once
#include <string>
#include <vector>

#include "core/status.h"

namespace ouro {

struct ChatMessage {
  std::string role;     // system | user | assistant
  std::string content;
};

class ChatTemplate {
 public:
  // Recognises the template text (tokenizer.chat_template); empty text means ChatML.
  static Expected<ChatTemplate> from_template_text(const std::string& jinja);
  // The prompt for the messages, ending with the assistant turn's opening when add_generation_prompt.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true) const;
  const std::string& stop_text() const { return stop_; }
  const std::string& default_system() const { return default_system_; }

 private:
  std::string default_system_;  // inserted when the first message is not a system message
  std::string stop_ = "<|im_end|>";
};

}  // namespace ouro
