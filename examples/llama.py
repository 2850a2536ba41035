"""A small Llama-style decoder with its own KV cache, written here (no transformers import).

Tokens (int64 ids, [1, L]) and ``start_pos`` (int64, [1]) -> logits [1, L, vocab] for the
positions start_pos .. start_pos + L - 1. d_model 256, 4 layers, 8 query heads sharing 2 key/value
heads (grouped-query attention, head_dim 32), SwiGLU MLP (hidden 688), vocabulary 4096, context
256, embeddings tied to the LM head, RMSNorm as in HF Llama (computed in float32), rotary
position embeddings from precomputed cos/sin tables (rotate_half form).

KV cache: per layer ``k_cache`` and ``v_cache`` of shape [1, 2, 256, 32] float32, non-persistent
buffers, zero at start. Each forward writes its keys and values at ``input_pos = start_pos +
arange(L)`` with ``index_copy_`` (``torch.export.export`` keeps it in place; after
``run_decompositions`` it is ``index_put`` and each cache is a BUFFER_MUTATION output), then
attends over the whole cache with the boolean mask ``arange(256)[None, :] <= input_pos[:, None]``:
positions not yet written, or written past ``input_pos`` by an earlier (padded) call, are never
attended. So a prompt padded at its end gives the same logits at its real positions, and the
garbage written at the padded positions is masked until a later call overwrites it: what a
bucketed export (a few fixed L) relies on.

Weights are seeded random (``torch.manual_seed(0)``), scaled so that greedy decoding does not
collapse to one repeated token. The model is built in eval mode with ``requires_grad`` off: the
in-place cache updates must not record autograd history.

``dynamic_shapes()`` gives a dynamic sequence length ``Dim("seq", min=1, max=256)``;
``start_pos`` stays static. torch 2.13's export accepts min=0 too (and min=2): no 0/1
specialization complaint; min=1 is used because a decode step is L = 1 and L = 0 means nothing.
``eager_generate`` decodes greedily with the cache: one prefill call, then one call per token.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 4096
D_MODEL = 256
N_LAYERS = 4
N_HEADS = 8
N_KV_HEADS = 2
HEAD_DIM = D_MODEL // N_HEADS
HIDDEN = 688  # Llama's rule: 2/3 of 4 * d_model, rounded up to a multiple of 16
MAX_SEQ_LEN = 256
ROPE_THETA = 10000.0
EPS = 1e-5
EMBED_STD = 0.1  # see Model._init_weights
OUT_GAIN = 2.0


class RMSNorm(nn.Module):
    """HF Llama's RMSNorm: the mean of squares in float32, cast back before the scale."""

    def __init__(self, dim: int, eps: float = EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        input_dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(input_dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """[x1, x2] -> [-x2, x1] over the last axis (halves)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row of the last axis: (values, float scales of shape [..., 1])."""
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 127.0
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8), scale


class Attention(nn.Module):
    """Grouped-query causal attention over this layer's KV cache (float32, or with
    ``kv_int8`` int8 rows and one float scale per head and position: 3.6x less state)."""

    def __init__(self, kv_int8: bool = False) -> None:
        super().__init__()
        self.kv_int8 = kv_int8
        self.q_proj = nn.Linear(D_MODEL, N_HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(D_MODEL, N_KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(D_MODEL, N_KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(N_HEADS * HEAD_DIM, D_MODEL, bias=False)
        cache_shape = (1, N_KV_HEADS, MAX_SEQ_LEN, HEAD_DIM)
        dtype = torch.int8 if kv_int8 else torch.float32
        self.register_buffer("k_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(cache_shape, dtype=dtype), persistent=False)
        if kv_int8:
            scales = (*cache_shape[:3], 1)
            self.register_buffer("k_scale", torch.zeros(scales), persistent=False)
            self.register_buffer("v_scale", torch.zeros(scales), persistent=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                input_pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, N_HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(b, n, N_KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(b, n, N_KV_HEADS, HEAD_DIM).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        keys, values = self._cached(k, v, input_pos)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, n, N_HEADS * HEAD_DIM))


    def _cached(self, k: torch.Tensor, v: torch.Tensor,
                input_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k and v at ``input_pos`` into the cache; the whole cache's keys and values."""
        if not self.kv_int8:
            self.k_cache.index_copy_(2, input_pos, k)
            self.v_cache.index_copy_(2, input_pos, v)
            return self.k_cache, self.v_cache
        for x, cache, scale in ((k, self.k_cache, self.k_scale), (v, self.v_cache, self.v_scale)):
            rows, scales = quantize_rows(x)
            cache.index_copy_(2, input_pos, rows)
            scale.index_copy_(2, input_pos, scales)
        return (self.k_cache.to(torch.float32) * self.k_scale,
                self.v_cache.to(torch.float32) * self.v_scale)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(D_MODEL, HIDDEN, bias=False)
        self.up_proj = nn.Linear(D_MODEL, HIDDEN, bias=False)
        self.down_proj = nn.Linear(HIDDEN, D_MODEL, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm: x + attn(norm(x)), then + mlp(norm(x))."""

    def __init__(self, kv_int8: bool = False) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(D_MODEL)
        self.self_attn = Attention(kv_int8)
        self.post_attention_layernorm = RMSNorm(D_MODEL)
        self.mlp = MLP()

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                input_pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, input_pos, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    """Embedding, 4 decoder layers, final RMSNorm, LM head tied to the embedding."""

    max_seq_len = MAX_SEQ_LEN

    def __init__(self, kv_int8: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed_tokens = nn.Embedding(VOCAB, D_MODEL)
        self.layers = nn.ModuleList(DecoderLayer(kv_int8) for _ in range(N_LAYERS))
        self.norm = RMSNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, VOCAB, bias=False)
        self.lm_head.weight = self.embed_tokens.weight
        inv_freq = 1.0 / ROPE_THETA ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM)
        angles = torch.outer(torch.arange(MAX_SEQ_LEN).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)  # [max_seq_len, head_dim]
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)
        self._init_weights()
        self.requires_grad_(False)
        self.eval()

    @torch.no_grad()
    def _init_weights(self) -> None:
        # With the head tied to the embedding, a residual stream dominated by the input token's
        # embedding predicts that token again: greedy decoding repeats one id (embedding std 1.0:
        # one id in 64; 0.3: two). A small embedding std, projections at std 1/sqrt(fan_in) and
        # the residual branches' output projections at twice that let the layers decide the
        # logits: 23 to 48 distinct ids in 64 greedy tokens from three prompts, logits std 1.6.
        nn.init.normal_(self.embed_tokens.weight, std=EMBED_STD)
        for module in self.modules():
            if isinstance(module, nn.Linear) and module is not self.lm_head:
                nn.init.normal_(module.weight, std=module.in_features ** -0.5)
            elif isinstance(module, RMSNorm):
                module.weight.copy_(1.0 + 0.1 * torch.randn_like(module.weight))
        for layer in self.layers:
            layer.self_attn.o_proj.weight.mul_(OUT_GAIN)
            layer.mlp.down_proj.weight.mul_(OUT_GAIN)

    def forward(self, tokens: torch.Tensor, start_pos: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        input_pos = start_pos + torch.arange(n, device=tokens.device)  # [L]
        mask = torch.arange(MAX_SEQ_LEN, device=tokens.device)[None, :] <= input_pos[:, None]
        cos, sin = self.rope_cos[input_pos], self.rope_sin[input_pos]  # [L, head_dim]
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin, input_pos, mask)
        return self.lm_head(self.norm(x))


def Int8KvModel() -> Model:
    """The same weights with an int8 KV cache (``nee-export examples/llama.py:Int8KvModel``)."""
    return Model(kv_int8=True)


def example_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """A prefill of 8 seeded random token ids at position 0."""
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (1, 8), generator=generator), torch.tensor([0])


def dynamic_shapes() -> dict[str, dict[int, torch.export.Dim] | None]:
    """torch.export ``dynamic_shapes`` for ``forward``: tokens' length dynamic in 1..256
    (the decode step's L = 1 included; torch.export would accept min=0 as well),
    ``start_pos`` static."""
    return {"tokens": {1: torch.export.Dim("seq", min=1, max=MAX_SEQ_LEN)}, "start_pos": None}


def reset(model: Model) -> None:
    """Zero every layer's KV cache (and its scales) in place."""
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith(("_cache", "_scale")):
                buffer.zero_()


@torch.no_grad()
def eager_generate(model: Model, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """Greedy decoding with the model's KV cache: reset, prefill the prompt at position 0, then
    one L = 1 call per new token. Returns the ``max_new_tokens`` new ids."""
    if not prompt_ids:
        raise ValueError("eager_generate: the prompt is empty; give at least one token id")
    if max_new_tokens < 0:
        raise ValueError(f"eager_generate: max_new_tokens must be >= 0, got {max_new_tokens}")
    needed = len(prompt_ids) + max_new_tokens
    if needed > model.max_seq_len:
        raise ValueError(
            f"eager_generate: prompt ({len(prompt_ids)} tokens) + max_new_tokens "
            f"({max_new_tokens}) = {needed} exceeds the model's context "
            f"(max_seq_len {model.max_seq_len})")
    if max_new_tokens == 0:
        return []
    reset(model)
    logits = model(torch.tensor([prompt_ids]), torch.tensor([0]))
    new = [int(logits[0, -1].argmax())]
    pos = len(prompt_ids)
    while len(new) < max_new_tokens:
        logits = model(torch.tensor([[new[-1]]]), torch.tensor([pos]))
        new.append(int(logits[0, -1].argmax()))
        pos += 1
    return new
