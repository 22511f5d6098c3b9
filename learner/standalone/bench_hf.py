"""The transformers + PyTorch eager baseline for bench_learner: one update step of the same shape,
batch and loss (clipped surrogate over a full-vocabulary log-softmax, sample-level aggregation,
gradient clipping, AdamW), timed the same way.

    python3 bench_hf.py [qwen2-0.5b|qwen2-1.5b|qwen3-0.6b|qwen3-1.7b|qwen3-8b] [BATCH] [SEQ] [STEPS] [--trace FILE]

--trace writes the Chrome trace of one more step, its phases named as bench_learner's
(tools/bench/trace_summary.py reads both).
"""
import json
import math
import sys
import time

import torch
import transformers

# As learner::model_preset (the public config.json files' shapes).
SHAPES = {
    "qwen2-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True),
    "qwen2-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True),
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                     tie_word_embeddings=False),
}


def main():
    trace = None
    if "--trace" in sys.argv:
        at = sys.argv.index("--trace")
        trace = sys.argv[at + 1]
        del sys.argv[at:at + 2]
    preset = sys.argv[1] if len(sys.argv) > 1 else "qwen2-0.5b"
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    seq = int(sys.argv[3]) if len(sys.argv) > 3 else 2048
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    vocab = 151936
    family = "Qwen3" if preset.startswith("qwen3") else "Qwen2"
    config = getattr(transformers, family + "Config")(vocab_size=vocab, rope_theta=1e6,
                                                      attn_implementation="sdpa", **SHAPES[preset])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = getattr(transformers, family + "ForCausalLM")(config).to(torch.bfloat16)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, betas=(0.9, 0.999), weight_decay=0.01)
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    mask = torch.ones(batch, seq, device="cuda")
    mask[:, : max(1, seq // 8)] = 0
    old = torch.full((batch, seq), -math.log(vocab), device="cuda")
    adv = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(batch)], device="cuda")[:, None].expand(batch, seq)

    phase = torch.profiler.record_function

    def step():
        with phase("leap::forward"):
            hidden = model.model(ids).last_hidden_state
        with phase("leap::logprobs"):
            logits = model.lm_head(hidden).float()
            logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            ratio = torch.exp(logp - old[:, 1:])
            a = adv[:, 1:]
            pg = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a)
            m = mask[:, 1:]
            loss = ((pg * m).sum(1) / m.sum(1)).mean()
        with phase("leap::backward"):
            loss.backward()
        with phase("leap::grad_norm"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        with phase("leap::adamw"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.item()

    step()  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tps = batch * seq * steps / seconds
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"transformers update: {tps:.1f} tokens/s, peak {peak:.2f} GiB (torch {torch.__version__})")
    print("json: " + json.dumps({"bench": "update_transformers", "preset": preset, "batch": batch, "seq": seq,
                                 "steps": steps, "tokens_per_second": tps, "peak_gib": peak}))
    if trace:
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(trace)
        print(f"trace of one step written to {trace}")


if __name__ == "__main__":
    main()
