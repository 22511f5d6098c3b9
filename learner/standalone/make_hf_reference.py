"""Writes a small random-weight Qwen2 or Qwen3 model with Hugging Face transformers, and the logits
and log-probs transformers computes for random ids, for learner_hf_check to compare against.

    python3 make_hf_reference.py MODEL_DIR REFERENCE.safetensors [DEVICE] [qwen2|qwen3]

The Qwen3 model has q/k norms and a head_dim (48) unlike hidden_size / heads (32), so that both
show if we got them wrong.
"""
import sys

import torch
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM


def main():
    model_dir, reference = sys.argv[1], sys.argv[2]
    device = sys.argv[3] if len(sys.argv) > 3 else "cuda"
    family = sys.argv[4] if len(sys.argv) > 4 else "qwen2"
    torch.manual_seed(0)
    common = dict(vocab_size=1024, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, rope_theta=1e6, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, max_position_embeddings=4096, initializer_range=0.1,
                  attn_implementation="eager")
    if family == "qwen2":
        config = Qwen2Config(**common)
        model = Qwen2ForCausalLM(config).float()
    elif family == "qwen3":
        config = Qwen3Config(head_dim=48, attention_bias=False, **common)
        model = Qwen3ForCausalLM(config).float()
    else:
        sys.exit(f"make_hf_reference.py: unknown family '{family}' (qwen2 or qwen3)")
    with torch.no_grad():
        # Hugging Face initialises biases to 0 and norms to 1 (Qwen3's q_norm / k_norm too):
        # randomise them so that a forgotten bias or norm weight shows.
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif "norm" in name:
                p.uniform_(0.7, 1.3)
    model.save_pretrained(model_dir, safe_serialization=True)

    ids = torch.randint(0, config.vocab_size, (2, 96))
    out = {"input_ids": ids.to(torch.int64)}
    model = model.to(device).eval()
    for suffix, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        m = model.to(dtype)
        with torch.no_grad():
            logits = m(ids.to(device)).logits.float()
        logp = torch.log_softmax(logits, -1)[:, :-1].gather(-1, ids[:, 1:].to(device).unsqueeze(-1)).squeeze(-1)
        logp = torch.cat([torch.zeros(ids.shape[0], 1, device=device), logp], dim=1)
        out["logits_" + suffix] = logits.cpu().contiguous()
        out["logprobs_" + suffix] = logp.cpu().contiguous()
    # The yardstick for learner_hf_check's bfloat16 rows: how far transformers' own bfloat16 run is
    # from its float32 run, by the same measure (max abs difference / max abs reference).
    for what in ("logits", "logprobs"):
        ref = out[what + "_f32"]
        drift = (out[what + "_bf16"] - ref).abs().max() / ref.abs().max()
        print(f"transformers bfloat16 vs float32 {what}: {drift.item():.3e} relative")
    save_file(out, reference)
    print("wrote", family, model_dir, reference, "torch", torch.__version__)


if __name__ == "__main__":
    main()
