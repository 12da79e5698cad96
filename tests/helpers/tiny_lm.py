"""A tiny causal LM for trainer tests: a byte-level BPE tokenizer trained on the given texts (so any text
encodes, and prompts stay short) and a 2-layer Qwen2 with random weights, saved as a model directory."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# The same with tool calls (a trajectory's assistant turns): each call written after the turn's text.
TOOLS_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] %}{{ m['content'] }}{% endif %}"
    "{% for c in m['tool_calls'] or [] %}<tool_call>{{ c['function']['name'] }} {{ c['function']['arguments'] }}"
    "</tool_call>{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_lm(root: Path, corpus: list[str], vocab_size: int = 1000, max_positions: int = 8192,
            chat_template: str = CHAT_TEMPLATE) -> str:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>")  # fmt: skip
    tok.chat_template = chat_template
    tok.save_pretrained(root)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    Qwen2ForCausalLM(config).save_pretrained(root)
    return str(root)
