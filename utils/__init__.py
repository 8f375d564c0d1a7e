"""Reference kernels of the course: one module per idea, each the single reference for it.

Notebooks import earlier ideas from here instead of copying them; hidden tests compare a
learner's code with these kernels.

    utils.tokenizer   GPT-2 BPE through tiktoken, offline (00)
    utils.embeddings  token-id -> vector lookup (00)
    utils.attention   dot-product attention without trainable weights (01)
    utils.self_attention  trainable queries, keys and values; SelfAttentionV1/V2 (02)
    utils.scaled_attention  variance of q.k, softmax Jacobian, scaled_dot_product_attention (03)
    utils.causal      causal masks, the two masking routes, CausalSelfAttention (04)
    utils.dropout     inverted dropout on attention weights, CausalAttention (05)
    utils.multihead   split/merge heads, MultiHeadAttention, parameter counts (06)
    utils.mha_variants  the same layer as a wrapper, einsum, SDPA, nn.MultiheadAttention (06)
    utils.benchmark   side-by-side timing; `python -m utils.benchmark` (06)
    utils.kv_cache    KVCache, cached MHA, grouped-query attention, greedy generate, cache bytes (07)
    utils.gpt         the small GPT of notebooks 07-12: pluggable attention, one cache per layer (07)
    utils.bench_generate  `python -m utils.bench_generate`: full-size cache / GQA / MQA timing, bytes per token, cache regimes (07)
    utils.bandwidth   the bandwidth line: read rate (the line) and copy (a reference) measured once, the last-level cache, the fraction of the line a decode reaches (07, 11, 12)
    utils.rope        sinusoidal positions, RoPE in both layouts, RoPEMultiHeadAttention (08)
    utils.rmsnorm     RMSNorm, computed in float32 (09, 12)
    utils.mla         multi-head latent attention, naive and absorbed paths, cache sizes; `python -m utils.mla` (09)
    utils.moe         experts, routers, DeepSeek-V3's gate and bias balancing, MoE; `python -m utils.moe` (10)
    utils.quantize    absmax int8, block-wise FP8, Int8WeightOnlyLinear, quantize_model_, Int8KVCache (11)
    utils.w8a8        W8A8Linear: int8 weights and activations on fbgemm, int32 accumulation (11)
    utils.bench_quantize  `python -m utils.bench_quantize`: decode speed, memory, bandwidth share, accuracy; fp32/int8/W8A8 (11)
    utils.mini_deepseek  the mini DeepSeek-V3: Block, MiniDeepSeek, next_token_loss, load_checkpoint (11, 12)
    utils.mtp         multi-token prediction, self-speculative decoding; `python -m utils.mtp` (12)
    utils.copy_task   the copying task: batches, copy mask, prompts (11, 12)
    utils.train_mini  `python -m utils.train_mini`, which trains the model into checkpoints/ (11, 12)
    utils.fixtures    the book's running example "Your journey starts with one step"
    utils.sliding_window  sliding-window mask, RollingKVCache, attention with sinks, WindowedLM (13)
    utils.dsa         DeepSeek Sparse Attention (V3.2): DSAConfig, LightningIndexer, topk_key_mask, SparseMLA (13)
    utils.bench_sparse  `python -m utils.bench_sparse`: dense absorbed MLA vs indexer + top-k, one decode step (13)
    utils.flash_attention  online softmax, tiled forward and backward, the FlashAttention autograd Function (14)
    utils.bench_flash  `python -m utils.bench_flash`: peak memory and time of naive, tiled and SDPA attention (14)
    utils.flash_triton  Triton kernels: row softmax, FlashAttention-2 forward with lse, TritonFlashAttention (15; needs `make triton`)
    utils.bench_triton  `python -m utils.bench_triton`: on a GPU, the kernel against the tiled forward and SDPA, time and TFLOP/s (15)
    utils.linear_attention  linear attention, the gated delta rule (step, recurrent, chunked), KDA, hybrid cache bytes; transformers' layout (16)
    utils.gated_deltanet  Qwen3-Next's Gated DeltaNet layer under transformers' parameter names (16)
    utils.bench_linear  `python -m utils.bench_linear`: state vs cache bytes of two hybrids, decode and prefill time, recall (16)
    utils.plots       attention heatmaps and other course figures
    utils.device_checks  each kernel on a device against the CPU; stray CPU tensors made visible on meta
    utils.device_report  `python -m utils.device_report --device cuda`: every kernel and the benchmarks of 06-14 and 16 on a device

Kernels follow the device of their inputs; helpers that make tensors from nothing take `device=`
(default: torch's default device); benchmarks read the clock through utils.benchmark.now, which
waits for the GPU first.

Run its tests with `make test` or `.venv/bin/pytest utils/tests`.
"""
