"""Chat turns as the target reads them: its template (or Gemma's turn format when the checkpoint ships
none), and the ids that end a reply."""

from __future__ import annotations

from .errors import OmniDraftError

# Gemma 3's turn format, for Gemma checkpoints whose tokenizer ships no chat template
# (the GGUF of the base 270M model has none).
GEMMA_TURN = "<start_of_turn>{role}\n{content}<end_of_turn>\n"


def _template_takes_system(tok) -> bool:
    """Whether the tokenizer's chat template renders a system turn (Gemma's turn format has none)."""
    template = getattr(tok, "chat_template", None)
    return bool(template) and "system" in str(template)


def eos_ids(tokenizer, chat: bool = False) -> frozenset[int]:
    """Target ids that end generation: EOS, and in a chat also the end-of-turn token."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    if chat:
        vocab = tokenizer.get_vocab()
        ids |= {vocab[end] for end in ("<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|end|>") if end in vocab}
    return frozenset(ids)


def encode_chat(tok, messages: list[dict], target_name: str) -> list[int]:
    """A conversation (roles system, first, then user/assistant) in the target's chat format, ready for its reply.

    Control tokens come only from the template: each message's text is tokenized as text,
    so a message that contains e.g. "<end_of_turn>" cannot forge a turn boundary. A message
    may carry its tokens ("ids", a reply as the target generated it): they are used as they are,
    so a chat session's next prompt extends exactly what the target read and wrote. A system
    prompt goes into the template's system turn, or, where it has none (Gemma), before the
    first user message.
    """
    if messages and messages[0]["role"] == "system" and not _template_takes_system(tok):
        system, *messages = messages
        if messages and messages[0]["role"] == "user":
            messages[0] = {"role": "user", "content": f"{system['content']}\n\n{messages[0]['content']}"}
    marks = [f"\ue000{i}\ue001" for i in range(len(messages))]  # private-use placeholders
    shell = [{"role": m["role"], "content": mark} for m, mark in zip(messages, marks)]
    if getattr(tok, "chat_template", None):
        rendered = tok.apply_chat_template(shell, tokenize=False, add_generation_prompt=True)
        ids = []
    elif "<start_of_turn>" in tok.get_vocab():
        rendered = "".join(GEMMA_TURN.format(role="model" if m["role"] == "assistant" else "user",
                                             content=m["content"]) for m in shell) + "<start_of_turn>model\n"
        ids = [tok.bos_token_id] if tok.bos_token_id is not None else []
    else:
        raise OmniDraftError(f"target {target_name} has no chat template; drop --chat")
    start = 0
    for message, mark in zip(messages, marks):
        at = rendered.index(mark, start)
        ids += tok.encode(rendered[start:at], add_special_tokens=False)  # the template's own control tokens
        if "ids" in message:
            ids += [int(t) for t in message["ids"]]
        else:
            ids += tok.encode(message["content"], add_special_tokens=False, split_special_tokens=True)
        start = at + len(mark)
    return ids + tok.encode(rendered[start:], add_special_tokens=False)
