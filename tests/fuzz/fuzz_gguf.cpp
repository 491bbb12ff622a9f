// libFuzzer target: the GGUF reader and the tokenizer/config code that reads its metadata.
#include <cstddef>
#include <cstdint>

#include "model/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = ouro::GgufFile::parse(data, size, "fuzz");
  if (!f) return 0;
  auto tok = ouro::Tokenizer::from_gguf(**f);
  if (tok) {
    auto ids = (*tok)->encode("Hello, world! 123 <|im_start|>\xff", true);
    (void)(*tok)->decode(ids);
  }
  if (auto v = (*f)->find("tokenizer.chat_template"); v && v->type == ouro::GgufType::kString)
    (void)ouro::ChatTemplate::from_template_text(v->s);
  // Touch every tensor's first and last byte: the reader promised they are in bounds.
  unsigned sum = 0;
  for (const auto& t : (*f)->tensors())
    if (t.nbytes) sum += t.data[0] + t.data[t.nbytes - 1];
  return (int)(sum & 0);
}
